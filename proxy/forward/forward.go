// Package forward carries one proxied request to a member apiserver: it picks a
// server, replaces the client's credentials by the gateway's and the hub identity
// by impersonation headers, and streams the request and its response, upgrades
// included, through UpgradeAwareHandler.
package forward

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	proxyutil "k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"
	"k8s.io/klog/v2"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/balance"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/flowcontrol"
	"github.com/kubewharf/kube-gateway/proxy/impersonate"
	"github.com/kubewharf/kube-gateway/proxy/metrics"
	"github.com/kubewharf/kube-gateway/proxy/request"
)

// ErrorWriter writes an error to the client as a metav1.Status; the apiserver's
// rest.Responder is one.
type ErrorWriter interface {
	Error(err error)
}

// Request is one request to forward.
type Request struct {
	Cluster *cluster.Cluster
	// Path is the member path, beginning with "/".
	Path string
	// RawQuery is the client's query string, forwarded unchanged.
	RawQuery string
	// User is the hub identity, as authenticated by the hub.
	User user.Info
	// Errors receives errors that happen before the member answered.
	Errors ErrorWriter
}

// retryAfterSeconds is what clients are told to wait when no server answered.
const retryAfterSeconds = 1

// Forwarder carries proxied requests. It holds what outlives any one cluster
// configuration; everything else comes with the compiled cluster. Make one with
// NewForwarder.
type Forwarder struct {
	// Metrics records every proxied request; required.
	Metrics *metrics.Metrics
	// Authorizer, if set, must allow the inner request itself (its real verb,
	// resource, namespace and name, or non-resource path) for the hub user
	// before it is forwarded: the hub's RBAC applies in addition to the
	// member's (--authorize-proxy-subpath).
	Authorizer authorizer.Authorizer

	stopOnce sync.Once
	stopping chan struct{}
}

// NewForwarder returns a Forwarder recording into m.
func NewForwarder(m *metrics.Metrics) *Forwarder {
	return &Forwarder{Metrics: m, stopping: make(chan struct{})}
}

// Stop ends every proxied long-running request (watches, log streams) cleanly,
// now and from now on, so that a gateway shutting down is not held by streams
// its clients would keep open for hours; they reconnect elsewhere. Upgraded
// connections (exec, attach, port-forward) end when the process exits.
func (f *Forwarder) Stop() {
	if f.stopping != nil {
		f.stopOnce.Do(func() { close(f.stopping) })
	}
}

// Serve forwards req (the inbound request) as described by r: it classifies the
// request, routes it by the cluster's dispatch policies, admits it by the
// policy's flow-control schema, picks a server and proxies.
func (f *Forwarder) Serve(w http.ResponseWriter, req *http.Request, r Request) {
	// Parse also refuses member paths that are not in canonical form (dot and
	// empty segments), which could make the member see another path than the
	// one classified here.
	attrs, err := request.Parse(req.Method, r.Path, r.RawQuery, r.User)
	if err != nil {
		r.Errors.Error(apierrors.NewBadRequest(err.Error()))
		return
	}
	if r.User == nil || r.User.GetName() == "" || r.User.GetName() == user.Anonymous {
		r.Errors.Error(apierrors.NewForbidden(gatewayv1alpha1.Resource("upstreamclusters/proxy"), r.Cluster.Name,
			errors.New("anonymous requests are never forwarded to member clusters")))
		return
	}
	if f.Authorizer != nil {
		if err := f.authorize(req.Context(), r.Cluster.Name, &attrs); err != nil {
			r.Errors.Error(err)
			return
		}
	}
	route := r.Cluster.Route(&attrs)
	schema := ""
	if route.Schema != nil {
		schema = route.Schema.Name()
		release, retryAfter, ok := route.Schema.Admit(flowcontrol.Request{User: attrs.User.GetName(), Namespace: attrs.Namespace, LongRunning: attrs.LongRunning})
		if !ok {
			f.Metrics.Rejected(r.Cluster.Name, route.Policy, schema, string(route.Schema.Kind()))
			r.Errors.Error(tooManyRequests(r.Cluster.Name, route.Policy, schema, retryAfter))
			return
		}
		defer release()
	}
	inFlight := f.Metrics.InFlight(r.Cluster.Name, route.Policy, schema)
	inFlight.Inc()
	defer inFlight.Dec()

	// A shallow copy is enough: UpgradeAwareHandler copies the request and its
	// headers before anything is sent. Client credentials leave the inbound
	// headers in place, as the apiserver's authentication filters do with theirs.
	out := req.WithContext(impersonate.WithIdentity(req.Context(), r.Cluster.Impersonation.Identity(r.User)))
	u := *req.URL
	u.RawQuery = r.RawQuery
	out.URL = &u
	impersonate.StripInbound(out.Header)
	// Trailers could carry credentials too; members have no use for a client's.
	out.Trailer = nil
	// With tracing on, the member's spans join the gateway's trace.
	if sc := trace.SpanContextFromContext(req.Context()); sc.IsValid() {
		propagation.TraceContext{}.Inject(req.Context(), propagation.HeaderCarrier(out.Header))
	}

	recorder := &statusRecorder{ResponseWriter: w}
	wrapped := responsewriter.WrapForHTTP1Or2(recorder)
	start := time.Now()
	// An idempotent request whose server failed before answering anything is
	// tried once more on another server: nothing was sent to the client yet, and
	// the member did not act on it. Watches and upgrades are never retried.
	retryable := !attrs.LongRunning && !httpstream.IsUpgradeRequest(req) &&
		(req.Method == http.MethodGet || req.Method == http.MethodHead || req.Method == http.MethodOptions)
	var failed *balance.Endpoint
	var previous, last *responder
	for attempt := 0; ; attempt++ {
		endpoint := route.Pick(failed)
		if endpoint == nil {
			if previous != nil {
				previous.writeDeferred() // no other server to try
				break
			}
			f.Metrics.Rejected(r.Cluster.Name, route.Policy, schema, metrics.ReasonNoReadyServer)
			r.Errors.Error(unavailable(r.Cluster.Name, noServerReason(route)))
			return
		}
		if failed != nil {
			f.Metrics.Retried(r.Cluster.Name, failed.URL.String())
		}
		resp := &responder{cluster: r.Cluster, endpoint: endpoint, errors: r.Errors, retryable: retryable && attempt == 0}
		last = resp
		f.proxy(wrapped, out, r, endpoint, resp, attrs.LongRunning)
		if resp.deferred == nil {
			break
		}
		failed, previous = endpoint, resp
	}
	code := recorder.code()
	if last.writtenCode != 0 { // the error went through the apiserver's responder, not recorder
		code = last.writtenCode
	}
	latency := time.Since(start)
	resource := metrics.ResourceLabel(attrs.IsResourceRequest, attrs.Resource, attrs.Subresource)
	if attrs.LongRunning {
		f.Metrics.ObserveLongRunning(r.Cluster.Name, route.Policy, schema, attrs.Verb, resource, code)
	} else {
		f.Metrics.Observe(r.Cluster.Name, route.Policy, schema, attrs.Verb, resource, code, latency)
	}
	// One line per proxied request at -v=3, where the generic apiserver logs
	// its own requests; the path, not the query (it can carry anything).
	if logger := klog.FromContext(req.Context()); logger.V(3).Enabled() {
		logger.V(3).Info("Proxied", "upstreamcluster", r.Cluster.Name, "policy", route.Policy, "endpoint", last.endpoint.URL.Host,
			"user", attrs.User.GetName(), "verb", attrs.Verb, "resource", resource, "path", r.Path, "code", code, "latency", latency)
	}
}

// proxy sends out to endpoint through UpgradeAwareHandler.
func (f *Forwarder) proxy(w http.ResponseWriter, out *http.Request, r Request, endpoint *balance.Endpoint, resp *responder, longRunning bool) {
	defer endpoint.Start()()
	transports := r.Cluster.Transports(endpoint)
	rt := transports.RoundTripper
	if longRunning && f.stopping != nil {
		rt = &stoppableTransport{delegate: rt, stopping: f.stopping}
	}
	location := *endpoint.URL
	location.Path = r.Path
	location.RawQuery = r.RawQuery
	h := &proxyutil.UpgradeAwareHandler{
		Location:         &location,
		Transport:        rt,
		UpgradeTransport: transports.Upgrade,
		UseLocationHost:  true,
		// A member that redirects could send the gateway's credential elsewhere.
		RejectForwardingRedirects: true,
		// Flush as the member writes: watch events and log lines must not wait
		// in a buffer. Large responses are still streamed, never buffered whole.
		FlushInterval: -1,
		Responder:     resp,
	}
	h.ServeHTTP(w, out)
	if !resp.failed {
		r.Cluster.ReportSuccess(endpoint)
	}
}

// authorize asks the hub whether the user may perform the inner request.
func (f *Forwarder) authorize(ctx context.Context, clusterName string, a *request.Attributes) error {
	record := authorizer.AttributesRecord{
		User:            a.User,
		Verb:            a.Verb,
		Namespace:       a.Namespace,
		APIGroup:        a.APIGroup,
		APIVersion:      a.APIVersion,
		Resource:        a.Resource,
		Subresource:     a.Subresource,
		Name:            a.Name,
		ResourceRequest: a.IsResourceRequest,
		Path:            a.Path,
	}
	decision, reason, err := f.Authorizer.Authorize(ctx, record)
	if decision == authorizer.DecisionAllow {
		return nil
	}
	what := a.Verb + " " + a.Path
	gr := gatewayv1alpha1.Resource("upstreamclusters/proxy")
	if a.IsResourceRequest {
		what = a.Verb + " " + a.Resource
		if a.Subresource != "" {
			what += "/" + a.Subresource
		}
		gr.Group, gr.Resource = a.APIGroup, a.Resource
	}
	msg := fmt.Sprintf("the hub does not allow this request on upstream cluster %q (%s); the gateway checks the hub's RBAC for proxied requests", clusterName, what)
	if reason != "" {
		msg += ": " + reason
	}
	if err != nil {
		msg += ": " + err.Error()
	}
	return apierrors.NewForbidden(gr, a.Name, errors.New(msg))
}

func noServerReason(route *cluster.Route) string {
	if route.Policy == "" {
		return "none of its enabled servers is healthy"
	}
	return fmt.Sprintf("none of the enabled servers of dispatch policy %q is healthy", route.Policy)
}

// tooManyRequests is the 429 of a request its flow-control schema refused.
func tooManyRequests(clusterName, policy, schema string, retryAfter time.Duration) error {
	seconds := int(math.Ceil(retryAfter.Seconds()))
	if seconds < 1 {
		seconds = 1
	}
	err := apierrors.NewTooManyRequests(fmt.Sprintf("upstream cluster %q: too many requests for flow-control schema %q (dispatch policy %q), retry after %ds",
		clusterName, schema, policy, seconds), seconds)
	err.ErrStatus.Details.Name, err.ErrStatus.Details.Group, err.ErrStatus.Details.Kind = clusterName, gatewayv1alpha1.GroupName, "upstreamclusters"
	return err
}

// statusRecorder remembers the status code written to the client.
type statusRecorder struct {
	http.ResponseWriter
	status   int
	hijacked bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Hijack records an upgrade: the member's answer then goes to the raw
// connection, so the code is counted as 101.
func (s *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	s.hijacked = true
	return s.ResponseWriter.(http.Hijacker).Hijack()
}

// Unwrap implements responsewriter.UserProvidedDecorator.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) code() int {
	switch {
	case s.hijacked:
		return http.StatusSwitchingProtocols
	case s.status == 0:
		return http.StatusOK
	}
	return s.status
}

// responder turns errors of UpgradeAwareHandler into Status responses, reports
// failures to the cluster's health checking, and holds back a retryable error so
// that Serve can try another server.
type responder struct {
	cluster   *cluster.Cluster
	endpoint  *balance.Endpoint
	errors    ErrorWriter
	retryable bool

	failed      bool
	deferred    error // a retryable error, not written yet
	writtenCode int   // the status code of the error written, if any
}

func (r *responder) Error(_ http.ResponseWriter, req *http.Request, err error) {
	r.failed = true
	if errors.Is(err, context.Canceled) && req.Context().Err() != nil {
		return // the client went away; nobody to answer
	}
	host := r.endpoint.URL.Host
	klog.FromContext(req.Context()).V(2).Info("Proxying to member failed", "upstreamcluster", r.cluster.Name, "endpoint", host, "err", err.Error())
	// Any transport error here came before the member's answer: the endpoint
	// could not serve.
	r.cluster.ReportFailure(r.endpoint, err)
	var status error
	if isConnectError(err) {
		status = unavailable(r.cluster.Name, fmt.Sprintf("server %s could not be reached: %v", host, redact(err)))
	} else {
		status = &apierrors.StatusError{ErrStatus: metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusBadGateway,
			Reason:  metav1.StatusReason("BadGateway"),
			Message: fmt.Sprintf("upstream cluster %q: proxying to server %s failed: %v", r.cluster.Name, host, redact(err)),
			Details: &metav1.StatusDetails{Name: r.cluster.Name, Group: gatewayv1alpha1.GroupName, Kind: "upstreamclusters"},
		}}
	}
	if r.retryable {
		r.deferred = status
		return
	}
	r.write(status)
}

func (r *responder) writeDeferred() {
	if r.deferred != nil {
		r.write(r.deferred)
	}
}

func (r *responder) write(err error) {
	if s, ok := err.(apierrors.APIStatus); ok {
		r.writtenCode = int(s.Status().Code)
	}
	r.errors.Error(err)
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

// Unavailable is the 503 of a cluster the gateway cannot use, with the reason.
func Unavailable(clusterName string, why error) error { return unavailable(clusterName, why.Error()) }

func isConnectError(err error) bool {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EHOSTUNREACH) {
		return true
	}
	// The upgrade path of UpgradeAwareHandler flattens dial errors into text.
	return strings.HasPrefix(err.Error(), "error dialing backend: dial ")
}

// redact drops the request URL from transport errors: it repeats what the client
// sent, and error messages stay short and about the member.
func redact(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err
	}
	return err
}

// stoppableTransport makes the response of a long-running request end, as if
// the member had finished it, when the gateway stops: the client gets a complete
// response (for a watch: the end of the stream) rather than a cut connection,
// and reconnects.
type stoppableTransport struct {
	delegate http.RoundTripper
	stopping <-chan struct{}
}

func (t *stoppableTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.delegate.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body := &stoppableBody{ReadCloser: resp.Body, done: make(chan struct{})}
	go func() {
		select {
		case <-t.stopping:
			body.stopped.Store(true)
			_ = body.ReadCloser.Close() // unblocks a pending Read
		case <-body.done:
		}
	}()
	resp.Body = body
	return resp, nil
}

type stoppableBody struct {
	io.ReadCloser
	stopped   atomic.Bool
	done      chan struct{}
	closeOnce sync.Once
}

func (b *stoppableBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.stopped.Load() {
		return n, io.EOF
	}
	return n, err
}

func (b *stoppableBody) Close() error {
	b.closeOnce.Do(func() { close(b.done) })
	return b.ReadCloser.Close()
}
