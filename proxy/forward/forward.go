// Package forward carries one proxied request to a member apiserver: it picks a
// server, replaces the client's credentials by the gateway's and the hub identity
// by impersonation headers, and streams the request and its response.
//
// Plain and streaming requests (gets, lists, watches, log streams) go through
// one httputil.ReverseProxy per Forwarder whose copy buffers are pooled;
// protocol upgrades (exec, attach, port-forward) go through UpgradeAwareHandler,
// which dials its own connection. Serve reads as the steps of a request: prepare
// (classify, refuse, authorize), admit (route, the user's long-running cap, flow
// control), one attempt per server until one answers or retrying is pointless,
// observe.
package forward

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/balance"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/flowcontrol"
	"github.com/kubewharf/kube-gateway/proxy/impersonate"
	"github.com/kubewharf/kube-gateway/proxy/longrunning"
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
	// MemberIdentity: User is the member's own identity (the member door),
	// impersonated as it is; otherwise the hub user, mapped by the cluster's
	// spec.impersonation.
	MemberIdentity bool
	// ViaHub: the hub's front proxy passes the response on and sets its own
	// Audit-ID and Cache-Control on it, so the member's are dropped.
	ViaHub bool
}

// door is the request's door label.
func (r *Request) door() string {
	if r.MemberIdentity {
		return metrics.DoorMember
	}
	return metrics.DoorHub
}

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
	// LongRunning caps the long-running requests each hub user holds open
	// through this gateway, over all clusters; nil: no cap.
	LongRunning *longrunning.Limiter
	// ResponseHeaderTimeout bounds the wait for a server's response headers to
	// a request that is not long-running: a server that stays silent longer is
	// counted as failed, like one that cannot be reached. Zero waits forever.
	// Long-running requests (watches, log streams, exec, attach, port-forward,
	// proxy) are never bounded: their server may rightly be silent for long.
	ResponseHeaderTimeout time.Duration

	// proxy carries requests that are not long-running, longRunning the others:
	// they differ in the size of their pooled copy buffers only.
	proxy, longRunning *reverseProxy
	// stopping ends with Stop; stop ends it, and with it the long-running
	// responses of longRunning.
	stopping context.Context
	stop     context.CancelFunc
	// splice lends upgraded connections their copy buffers.
	splice *bufferPool
}

// DefaultResponseHeaderTimeout is the default ResponseHeaderTimeout. A member
// kube-apiserver answers every request that is not long-running within its
// --request-timeout (60 s by default), with its own 504 at worst; the 10 s
// more let that answer through, so that only a server that is stuck, not
// one that is busy, counts as failed.
const DefaultResponseHeaderTimeout = 70 * time.Second

// NewForwarder returns a Forwarder recording into m.
func NewForwarder(m *metrics.Metrics) *Forwarder {
	stopping, stop := context.WithCancel(context.Background())
	headers := &impersonate.Headers{}
	return &Forwarder{
		Metrics:               m,
		ResponseHeaderTimeout: DefaultResponseHeaderTimeout,
		proxy:                 newReverseProxy(shortBufferSize, false, nil, headers),
		longRunning:           newReverseProxy(longRunningBufferSize, true, stopping, headers),
		stopping:              stopping,
		stop:                  stop,
		splice:                newBufferPool(spliceBufferSize),
	}
}

// Stop ends every proxied long-running request (watches, log streams)
// cleanly, so that a gateway shutting down is not held by streams its clients
// would keep open for hours; they reconnect elsewhere. Long-running requests
// that arrive later are refused with 429 and Retry-After, which client-go
// retries by itself: one that was served would end at once, and a reflector
// takes a watch that ends at once for an error. Upgraded connections (exec,
// attach, port-forward) end when the process exits.
func (f *Forwarder) Stop() { f.stop() }

// Serve forwards req (the inbound request) as described by r: it classifies the
// request, routes it by the cluster's dispatch policies, admits it by the
// policy's flow-control schema, picks a server and proxies.
func (f *Forwarder) Serve(w http.ResponseWriter, req *http.Request, r Request) {
	attrs, err := f.prepare(req, r)
	if err != nil {
		r.Errors.Error(err)
		return
	}
	route := r.Cluster.Route(&attrs)
	series := metrics.Series{Cluster: r.Cluster.Name, Door: r.door(), Policy: route.Policy, Schema: route.Schema.Name()}
	if attrs.LongRunning && f.stopping.Err() != nil {
		f.Metrics.Rejected(series, metrics.ReasonShuttingDown)
		r.Errors.Error(shuttingDown())
		return
	}
	upgrade := httpstream.IsUpgradeRequest(req)
	release, err := f.admit(series, route, &attrs, upgrade)
	if err != nil {
		r.Errors.Error(err)
		return
	}
	defer release()
	inFlight := f.Metrics.InFlight(series)
	inFlight.Inc()
	defer inFlight.Dec()

	start := time.Now()
	recorder := &statusRecorder{ResponseWriter: w, client: req.Context(), splice: f.splice}
	// A response that breaks off mid-body is aborted by the reverse proxy's
	// panic (http.ErrAbortHandler), which skips the rest of Serve: count it
	// while the panic goes by, without recovering (other panics keep their
	// stack).
	returned := false
	defer func() {
		if a := recorder.attempt; !returned && a != nil && a.failed {
			f.observe(req.Context(), r, series, &attrs, a.endpoint, recorder.code(), time.Since(start))
			resource := metrics.ResourceLabel(attrs.IsResourceRequest, attrs.Resource, attrs.Subresource)
			f.Metrics.Aborted(series, attrs.Verb, resource)
		}
	}()
	last, ok := f.attempts(recorder, req, r, route, &attrs, upgrade)
	returned = true
	if !ok {
		f.Metrics.Rejected(series, metrics.ReasonNoReadyServer)
		r.Errors.Error(unavailable(r.Cluster.Name, noServerReason(route)))
		return
	}
	code := recorder.code()
	if last.writtenCode != 0 { // the error went through the ErrorWriter, not recorder
		code = last.writtenCode
	}
	f.observe(req.Context(), r, series, &attrs, last.endpoint, code, time.Since(start))
}

// prepare classifies the inner request and refuses what must never be
// forwarded: member paths that are not canonical (dot and empty segments could
// make the member see another path than the one classified here), anonymous
// users, and requests the hub's RBAC does not allow (with an Authorizer).
func (f *Forwarder) prepare(req *http.Request, r Request) (request.Attributes, error) {
	attrs, err := request.Parse(req.Method, r.Path, r.RawQuery, r.User)
	if err != nil {
		return attrs, apierrors.NewBadRequest(err.Error())
	}
	if r.User == nil || r.User.GetName() == "" || r.User.GetName() == user.Anonymous {
		return attrs, apierrors.NewForbidden(gatewayv1alpha1.Resource("upstreamclusters/proxy"), r.Cluster.Name,
			errors.New("anonymous requests are never forwarded to member clusters"))
	}
	if f.Authorizer != nil {
		if err := f.authorize(req.Context(), r.Cluster.Name, &attrs); err != nil {
			return attrs, err
		}
	}
	return attrs, nil
}

// admit takes slots of the user's long-running cap for a long-running
// request (more for an upgrade: it holds connections of its own), then asks
// the route's flow-control schema, if any, to let the request in. It returns
// what to call when the request ends.
func (f *Forwarder) admit(series metrics.Series, route *cluster.Route, attrs *request.Attributes, upgrade bool) (release func(), err error) {
	releaseUser := noop
	if attrs.LongRunning {
		slots := longrunning.StreamSlots
		if upgrade {
			slots = longrunning.SessionSlots
		}
		var ok bool
		if releaseUser, ok = f.LongRunning.Acquire(attrs.User.GetName(), slots); !ok {
			f.Metrics.Rejected(series, metrics.ReasonLongRunningPerUser)
			return nil, tooManyLongRunning(attrs.User.GetName(), f.LongRunning.Max())
		}
	}
	if route.Schema == nil {
		return releaseUser, nil
	}
	releaseSchema, retryAfter, ok := route.Schema.Admit(flowcontrol.Request{User: attrs.User.GetName(), Namespace: attrs.Namespace, LongRunning: attrs.LongRunning})
	if !ok {
		releaseUser()
		f.Metrics.Rejected(series, string(route.Schema.Kind()))
		return nil, tooManyRequests(series.Cluster, series.Policy, series.Schema, retryAfter)
	}
	if !attrs.LongRunning {
		return releaseSchema, nil
	}
	return func() { releaseSchema(); releaseUser() }, nil
}

func noop() {}

// attempts sends req to one server after another until one answers, or a
// failure may not be retried, or no server is left. ok is false when not even
// one server could be tried. The inbound request is never changed: each
// attempt sends a copy.
//
// A retryable request is tried on one other server, and once more when a
// connection broke under it (failure.Broken): every pooled connection to a
// member can break at once when the konnectivity server or egress proxy that
// carried them goes away, so the other server's may be gone too; that try
// may go to any server, the one whose connection broke included, and opens
// a new connection.
func (f *Forwarder) attempts(w *statusRecorder, req *http.Request, r Request, route *cluster.Route, attrs *request.Attributes, upgrade bool) (last *attempt, ok bool) {
	retryable := isRetryable(req, attrs, upgrade)
	otherServer, newConnection := retryable, retryable
	policy := r.Cluster.Impersonation
	if r.MemberIdentity {
		policy = impersonate.AsIs
	}
	identity := policy.Identity(r.User)
	storage := reachesStorage(attrs, r.RawQuery)
	var exclude *balance.Endpoint
	for {
		endpoint := route.Pick(exclude)
		if endpoint == nil {
			if last == nil {
				return nil, false
			}
			last.writeDeferred() // no other server to try
			return last, true
		}
		if last != nil {
			f.Metrics.Retried(r.Cluster.Name, last.endpoint.URL.String())
		}
		last = &attempt{cluster: r.Cluster, endpoint: endpoint,
			path: r.Path, rawQuery: r.RawQuery, identity: identity, errors: r.Errors,
			retryable: otherServer, retryBroken: newConnection, viaHub: r.ViaHub, reachesStorage: storage}
		if !attrs.LongRunning && !upgrade {
			last.headerTimeout = f.ResponseHeaderTimeout
		}
		w.attempt = last
		f.try(w, req, last, upgrade, attrs.LongRunning)
		if last.deferred == nil {
			return last, true
		}
		if last.broken && newConnection {
			newConnection, exclude = false, nil
		} else {
			otherServer, exclude = false, endpoint
		}
	}
}

// isRetryable: an idempotent request whose server failed before answering
// anything may be tried once more on another server: nothing was sent to the
// client yet, and the member did not act on it. Watches and upgrades never are.
func isRetryable(req *http.Request, attrs *request.Attributes, upgrade bool) bool {
	if attrs.LongRunning || upgrade {
		return false
	}
	return req.Method == http.MethodGet || req.Method == http.MethodHead || req.Method == http.MethodOptions
}

// try sends req to a's server and reports the outcome to health checking.
func (f *Forwarder) try(w *statusRecorder, req *http.Request, a *attempt, upgrade, longRunning bool) {
	defer a.endpoint.Start()()
	switch {
	case upgrade:
		a.upgrade(w, req)
	case longRunning:
		f.longRunning.serve(w, req, a)
	default:
		f.proxy.serve(w, req, a)
	}
	if !a.failed {
		code := w.code()
		a.cluster.ReportSuccess(a.endpoint, a.reachesStorage && code < http.StatusInternalServerError && code != http.StatusTooManyRequests)
	}
}

// reachesStorage: the member answers the request only after reaching its
// storage (etcd): a write, or a get or list of a resource without
// resourceVersion (a consistent read). Reads with a resourceVersion,
// subresources such as logs, watches, discovery and /version are answered
// while the member's storage stalls, so their answers say nothing of its
// readiness.
func reachesStorage(attrs *request.Attributes, rawQuery string) bool {
	if !attrs.IsResourceRequest || attrs.LongRunning {
		return false
	}
	switch attrs.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	case "get", "list":
		return attrs.Subresource == "" && !hasResourceVersion(rawQuery)
	}
	return false
}

// hasResourceVersion says whether the query sets resourceVersion.
func hasResourceVersion(rawQuery string) bool {
	if !strings.Contains(rawQuery, "resourceVersion") {
		return false // the usual case, without parsing
	}
	q, err := url.ParseQuery(rawQuery)
	return err != nil || q.Get("resourceVersion") != ""
}

// observe records the request's metrics and, at -v=3, where the generic
// apiserver logs its own requests, one line: the path, not the query (it can
// carry anything).
func (f *Forwarder) observe(ctx context.Context, r Request, series metrics.Series, attrs *request.Attributes, endpoint *balance.Endpoint, code int, latency time.Duration) {
	resource := metrics.ResourceLabel(attrs.IsResourceRequest, attrs.Resource, attrs.Subresource)
	if attrs.LongRunning {
		f.Metrics.ObserveLongRunning(series, attrs.Verb, resource, code)
	} else {
		f.Metrics.Observe(series, attrs.Verb, resource, code, latency)
	}
	if logger := klog.FromContext(ctx); logger.V(3).Enabled() {
		logger.V(3).Info("Proxied", "upstreamcluster", r.Cluster.Name, "door", series.Door, "policy", series.Policy, "endpoint", endpoint.URL.Host,
			"user", attrs.User.GetName(), "verb", attrs.Verb, "resource", resource, "path", r.Path, "code", code, "latency", latency)
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

// withTraceContext adds the gateway's trace context to h when tracing is on, so
// that the member's spans join the gateway's trace.
func withTraceContext(ctx context.Context, h http.Header) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
	}
}
