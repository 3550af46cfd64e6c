package forward

import (
	"fmt"
	"math"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/failure"
	"github.com/kubewharf/kube-gateway/proxy/longrunning"
	"github.com/kubewharf/kube-gateway/proxy/transport"
)

// retryAfterSeconds is what clients are told to wait when no server answered.
const retryAfterSeconds = 1

// noServerReason says why a route has no server to try: every server is
// disabled, or the policy's subset names no enabled one. (Unhealthy servers are
// still tried when no healthy one is left: cluster.Route.Pick.)
func noServerReason(route *cluster.Route) string {
	if route.Policy == "" {
		return "it has no enabled server (spec.servers)"
	}
	return fmt.Sprintf("dispatch policy %q names no enabled server (upstreamSubset)", route.Policy)
}

// tooManyRequests is the 429 of a request its flow-control schema refused.
func tooManyRequests(clusterName, policy, schema string, retryAfter time.Duration) error {
	seconds := max(int(math.Ceil(retryAfter.Seconds())), 1)
	err := apierrors.NewTooManyRequests(fmt.Sprintf("upstream cluster %q: too many requests for flow-control schema %q (dispatch policy %q), retry after %ds",
		clusterName, schema, policy, seconds), seconds)
	err.ErrStatus.Details.Name, err.ErrStatus.Details.Group, err.ErrStatus.Details.Kind = clusterName, gatewayv1alpha1.GroupName, "upstreamclusters"
	return err
}

// tooManyLongRunning is the 429 of a long-running request past the user's
// cap. Nothing tells when one of the user's streams ends: retry after 1s, as
// for a full maxRequestsInflight schema.
func tooManyLongRunning(user string, limit int) error {
	return apierrors.NewTooManyRequests(fmt.Sprintf("user %q holds as many long-running requests open through this kube-gateway as it allows per user: %d "+
		"(--%s; a watch or log stream counts %d, an exec, attach or port-forward session %d). Close some, or have the operator raise the limit",
		user, limit, longrunning.Flag, longrunning.StreamSlots, longrunning.SessionSlots), retryAfterSeconds)
}

// shuttingDown is the 429 of a long-running request that reached this replica
// after Stop: its client retries after a second, when the load balancer (or
// the hub, after this replica's GOAWAY) sends it to another replica.
func shuttingDown() error {
	return apierrors.NewTooManyRequests("this kube-gateway replica is shutting down and takes no new long-running requests; retry, and another replica will serve it", retryAfterSeconds)
}

// unavailable is the 503 of a cluster that cannot serve now.
func unavailable(clusterName, why string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusServiceUnavailable,
		Reason:  metav1.StatusReasonServiceUnavailable,
		Message: fmt.Sprintf("upstream cluster %q is unavailable: %s", clusterName, why),
		Details: &metav1.StatusDetails{Name: clusterName, Group: gatewayv1alpha1.GroupName, Kind: "upstreamclusters", RetryAfterSeconds: retryAfterSeconds},
	}}
}

// headerTimeoutError is the error of an attempt whose server sent no response
// headers within the attempt's headerTimeout. It does not wrap
// context.Canceled: the client did not go away, the server failed.
type headerTimeoutError struct{ after time.Duration }

func (e *headerTimeoutError) Error() string {
	return fmt.Sprintf("no response headers within %s", e.after)
}

// Unwrap makes the failure a timeout (failure.Of): a slow server, not a
// connection that failed.
func (e *headerTimeoutError) Unwrap() error { return failure.ErrTimedOut }

// gatewayTimeout is the 504 of a server that sent no response headers in time.
// It has no Retry-After: the server may have carried the request out, and
// clients that honour one would send a POST again.
func gatewayTimeout(clusterName, host string, after time.Duration) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure,
		Code:   http.StatusGatewayTimeout,
		Reason: metav1.StatusReasonTimeout,
		Message: fmt.Sprintf("upstream cluster %q: server %s sent no response headers within %s (the gateway's --member-response-header-timeout); the server is slow or stuck",
			clusterName, host, after),
		Details: &metav1.StatusDetails{Name: clusterName, Group: gatewayv1alpha1.GroupName, Kind: "upstreamclusters"},
	}}
}

// Unavailable is the 503 of a cluster the gateway cannot use, with the reason.
func Unavailable(clusterName string, why error) error { return unavailable(clusterName, why.Error()) }

// status is the error written to the client for err, a failure of kind
// before the member's answer: 504 when the server did not answer in time, 503
// when it could not be reached (the request went nowhere), 502 when it failed
// while answering.
func (a *attempt) status(kind failure.Kind, err error) error {
	host := a.endpoint.URL.Host
	switch kind {
	case failure.Timeout:
		return gatewayTimeout(a.cluster.Name, host, a.headerTimeout)
	case failure.Proxy:
		return unavailable(a.cluster.Name, fmt.Sprintf("server %s could not be reached through its egress proxy (spec.clientConfig.proxyURL): %v", host, transport.StripURL(err)))
	case failure.Connect, failure.Tunnel:
		return unavailable(a.cluster.Name, fmt.Sprintf("server %s could not be reached: %v", host, transport.StripURL(err)))
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusBadGateway,
		Reason:  metav1.StatusReason("BadGateway"),
		Message: fmt.Sprintf("upstream cluster %q: proxying to server %s failed: %v", a.cluster.Name, host, transport.StripURL(err)),
		Details: &metav1.StatusDetails{Name: a.cluster.Name, Group: gatewayv1alpha1.GroupName, Kind: "upstreamclusters"},
	}}
}
