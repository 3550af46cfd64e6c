package forward

import (
	"context"
	"errors"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	proxyutil "k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"
	clienttransport "k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"github.com/kubewharf/kube-gateway/proxy/balance"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/failure"
	"github.com/kubewharf/kube-gateway/proxy/impersonate"
	"github.com/kubewharf/kube-gateway/proxy/transport"
)

// attempt is one try of a request on one server. It turns transport errors
// into Status responses, reports failures to the cluster's health checking, and
// holds back a retryable error so that another server can be tried.
type attempt struct {
	cluster  *cluster.Cluster
	endpoint *balance.Endpoint
	path     string // the member path
	rawQuery string // the client's query, as it sent it
	identity clienttransport.ImpersonationConfig
	errors   ErrorWriter
	// retryable: a failure is held back for another try; retryBroken: only
	// a connection that broke under the request is (see Forwarder.attempts).
	retryable, retryBroken bool
	// headerTimeout bounds the wait for the response headers; zero: none.
	headerTimeout time.Duration
	// client is the client's request context; cancel, set with
	// headerTimeout, ends the request to the server (a child of client) when
	// its headers are late or its body is closed. Both are set by the reverse
	// proxy.
	client context.Context
	cancel context.CancelFunc
	// response is the header of the client's response, set by the reverse
	// proxy: what the gateway's chain set on it before the member answered.
	response http.Header
	// viaHub: see Request.ViaHub.
	viaHub bool
	// reachesStorage: an answer shows the server reaches its storage (see
	// reachesStorage), which health checking may take for a probe.
	reachesStorage bool

	// dialError keeps an upgrade's failed dial, which UpgradeAwareHandler
	// reports as text only.
	dialError *transport.DialError

	failed      bool
	broken      bool  // the failure was a connection that broke (failure.Broken)
	deferred    error // a retryable error, not written yet
	writtenCode int   // the status code of the error written, if any
}

// upgrade carries an upgrade request (exec, attach, port-forward) through
// UpgradeAwareHandler: it dials the server itself, over HTTP/1.1, and splices
// the connections; its transports add the credential and impersonate the
// identity in the request's context.
func (a *attempt) upgrade(w *statusRecorder, req *http.Request) {
	ctx, dialError := transport.KeepDialError(impersonate.WithIdentity(req.Context(), a.identity))
	a.dialError = dialError
	out := req.WithContext(ctx)
	out.Header = req.Header.Clone()
	impersonate.StripInbound(out.Header)
	out.Trailer = nil
	withTraceContext(out.Context(), out.Header)
	location := *a.endpoint.URL
	location.Path = a.path
	location.RawQuery = a.rawQuery
	h := &proxyutil.UpgradeAwareHandler{
		Location:         &location,
		Transport:        a.endpoint.Transports.RoundTripper,
		UpgradeTransport: a.endpoint.Transports.Upgrade,
		UseLocationHost:  true,
		// A member that redirects could send the gateway's credential elsewhere.
		RejectForwardingRedirects: true,
		FlushInterval:             -1,
		Responder:                 a,
	}
	h.ServeHTTP(responsewriter.WrapForHTTP1Or2(w), out)
}

// Error implements proxyutil.ErrorResponder, and is the ReverseProxy's
// ErrorHandler: err came before the member's answer.
func (a *attempt) Error(_ http.ResponseWriter, req *http.Request, err error) {
	a.failed = true
	if errors.Is(err, context.Canceled) && req.Context().Err() != nil {
		return // the client went away; nobody to answer
	}
	if a.dialError != nil {
		err = a.dialError.Restore(err)
	}
	host := a.endpoint.URL.Host
	klog.FromContext(req.Context()).V(2).Info("Proxying to member failed", "upstreamcluster", a.cluster.Name, "endpoint", host, "err", err.Error())
	// Any transport error here came before the member's answer: the endpoint
	// could not serve.
	a.cluster.ReportFailure(a.endpoint, err)
	status := a.status(failure.Of(err), err)
	a.broken = failure.Broken(err)
	if a.retryable || a.retryBroken && a.broken {
		a.deferred = status
		return
	}
	a.write(status)
}

// bodyFailed records that reading the server's response body failed after the
// response began: the connection broke (reset, closed) mid-response. The client
// has part of the answer, so the request is never retried and the stream is
// aborted; the server is counted as failed.
func (a *attempt) bodyFailed(ctx context.Context, err error) {
	a.failed = true
	klog.FromContext(ctx).V(2).Info("Member response broke off", "upstreamcluster", a.cluster.Name, "endpoint", a.endpoint.URL.Host, "err", err.Error())
	a.cluster.ReportFailure(a.endpoint, err)
}

func (a *attempt) writeDeferred() {
	if a.deferred != nil {
		a.write(a.deferred)
	}
}

func (a *attempt) write(err error) {
	if s, ok := err.(apierrors.APIStatus); ok {
		a.writtenCode = int(s.Status().Code)
	}
	a.errors.Error(err)
}

type attemptKey struct{}

func attemptFrom(ctx context.Context) *attempt {
	a, _ := ctx.Value(attemptKey{}).(*attempt)
	return a
}
