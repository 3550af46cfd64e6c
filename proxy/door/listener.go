package door

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/http2"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/filters/impersonation"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	"k8s.io/klog/v2"
)

// Chain is the door's handler chain, built from the generic server's
// configuration c as proxy/chain builds the hub path's: panic recovery,
// request info, the audit log (refusals audited as failed authentications),
// tracing if on, and impersonation as for any request, with the door's own
// authentication in place of the hub's, the member deciding a client's
// impersonation, and no authorization (the member authorizes).
func Chain(s *Server, c *genericapiserver.Config, tracing bool) http.Handler {
	h := http.Handler(http.HandlerFunc(s.Serve))
	// A client's own Impersonate-* headers, as the member would allow them.
	h = impersonation.WithImpersonation(h, authorizeImpersonation{}, c.Serializer)
	h = genericapifilters.WithAudit(h, c.AuditBackend, c.AuditPolicyRuleEvaluator, c.LongRunningFunc)
	if tracing {
		h = genericapifilters.WithTracing(h, c.TracerProvider)
	}
	h = s.Authenticate(h, genericapifilters.WithFailedAuthenticationAudit(s.Refusal(), c.AuditBackend, c.AuditPolicyRuleEvaluator))
	h = genericapifilters.WithWarningRecorder(h)
	h = genericapifilters.WithCacheControl(h)
	h = genericapifilters.WithRequestInfo(h, c.RequestInfoResolver)
	h = genericapifilters.WithRequestReceivedTimestamp(h)
	h = genericfilters.WithPanicRecovery(h, c.RequestInfoResolver)
	return genericapifilters.WithAuditInit(h)
}

// shutdownGrace is how long a stopping door waits for its requests; the
// forwarder ends proxied streams when the shutdown begins.
const shutdownGrace = 5 * time.Second

// bodyFrame is the HTTP/2 frame and per-stream upload buffer size
// k8s.io/apiserver's secure serving uses: 99 % of serialized objects fit.
const bodyFrame = 256 << 10

// Serve serves h with s's TLS configuration on ln until ctx ends, with the
// HTTP/2 settings of the gateway's own secure port (k8s.io/apiserver's):
// maxStreams concurrent streams per connection
// (--http2-max-streams-per-connection; 0: the library's 100).
func Serve(ctx context.Context, ln net.Listener, s *Server, h http.Handler, maxStreams int) {
	logger := klog.FromContext(ctx).WithName("member-door")
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         s.TLSConfig(),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       90 * time.Second,
		// Refused handshakes (a name no cluster serves) are a client's
		// mistake: logged as information, not as errors.
		ErrorLog: klog.NewStandardLogger("INFO"),
		BaseContext: func(net.Listener) context.Context {
			return context.WithoutCancel(ctx)
		},
	}
	if maxStreams <= 0 {
		maxStreams = 100
	}
	if err := http2.ConfigureServer(srv, &http2.Server{
		IdleTimeout:                  90 * time.Second,
		MaxConcurrentStreams:         uint32(maxStreams),
		MaxUploadBufferPerStream:     bodyFrame,
		MaxUploadBufferPerConnection: bodyFrame * int32(maxStreams),
		MaxReadFrameSize:             bodyFrame,
	}); err != nil {
		logger.Error(err, "Member door not served: configuring HTTP/2")
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
	}()
	logger.Info("Serving the member door", "address", ln.Addr().String())
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Error(err, "Member door stopped")
	}
	<-done
}
