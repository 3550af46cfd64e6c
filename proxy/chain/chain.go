// Package chain serves the proxy subresource,
// /apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/{name}/proxy/{path}, on a
// short handler chain of its own, in front of the generic apiserver's chain that
// serves everything else.
//
// Every proxied request is long-running for the gateway, so most filters of
// k8s.io/apiserver's DefaultBuildHandlerChain let it through untouched (request
// timeout, deadline, in-flight limit, wait group), and go-restful's routing and
// Connect handler only find the name and the sub-path. They and the always-on
// tracing filter cost more than the gateway's own work per request
// (docs/benchmark-history.md). The short chain keeps what decides who may do what, and
// what operators rely on: panic recovery, request info, authentication,
// audit, impersonation, authorization, CONNECT admission (in the handler),
// warnings, CORS, HSTS, Cache-Control, probabilistic GOAWAY; tracing when
// tracing is configured.
//
// A proxied request's goroutine gets the stack the short chain needs before it
// runs (stack.go): growing it twice deep inside the chain cost a measurable
// share of the gateway's CPU per request (docs/benchmark-history.md).
//
// In front of both chains sits the entry decision (entry.go): by default the
// gateway's API group is served only to requests that come through the hub's
// front proxy.
//
// Left out: the apiserver_request_* metrics and filter latency metrics (the
// kube_gateway_proxy_* metrics count proxied requests), the HTTP access log of
// -v=3 (the forwarder logs each request), and the filters that do not apply to
// long-running requests.
package chain

import (
	"net/http"
	"strings"

	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/filters/impersonation"
	genericfeatures "k8s.io/apiserver/pkg/features"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// ProxyFunc serves one request for upstream cluster name; path is the member
// path, "/" at least. The request is authenticated and authorized for the
// proxy subresource.
type ProxyFunc func(w http.ResponseWriter, req *http.Request, name, path string)

// Options of the short chain that are not in the generic server's Config.
type Options struct {
	// Tracing adds the tracing filter; without tracing configuration the
	// tracer provider is a no-op and the filter only costs.
	Tracing bool
	// Entry, when set, serves the gateway's API group only to the requests
	// it lets in, on both chains; nil serves it to anyone the gateway
	// authenticates and authorizes (direct access).
	Entry *Entry
}

// New returns a handler that serves proxy paths with serve on the short chain
// and everything else with generic, the generic server's full chain. c is the
// configuration the generic chain was built from.
func New(generic http.Handler, serve ProxyFunc, c *genericapiserver.Config, o Options) http.Handler {
	h := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		name, path, _ := Split(req.URL.Path)
		serve(w, req, name, path)
	}))
	// The same filters as DefaultBuildHandlerChain, in the same order.
	h = genericapifilters.WithAuthorization(h, c.Authorization.Authorizer, c.Serializer)
	if c.FeatureGate.Enabled(genericfeatures.ConstrainedImpersonation) {
		h = impersonation.WithConstrainedImpersonation(h, c.Authorization.Authorizer, c.Serializer)
	} else {
		h = impersonation.WithImpersonation(h, c.Authorization.Authorizer, c.Serializer)
	}
	h = genericapifilters.WithAudit(h, c.AuditBackend, c.AuditPolicyRuleEvaluator, c.LongRunningFunc)
	failed := genericapifilters.Unauthorized(c.Serializer)
	failed = genericapifilters.WithFailedAuthenticationAudit(failed, c.AuditBackend, c.AuditPolicyRuleEvaluator)
	if o.Tracing {
		h = genericapifilters.WithTracing(h, c.TracerProvider)
	}
	h = genericapifilters.WithAuthentication(h, c.Authentication.Authenticator, failed, c.Authentication.APIAudiences, c.Authentication.RequestHeaderConfig)
	h = genericfilters.WithCORS(h, c.CorsAllowedOriginList, nil, nil, nil, "true")
	h = genericapifilters.WithWarningRecorder(h)
	if c.SecureServing != nil && !c.SecureServing.DisableHTTP2 && c.GoawayChance > 0 {
		h = genericfilters.WithProbabilisticGoaway(h, c.GoawayChance)
	}
	h = genericapifilters.WithCacheControl(h)
	h = genericfilters.WithHSTS(h, c.HSTSDirectives)
	h = genericapifilters.WithRequestInfo(h, c.RequestInfoResolver)
	h = genericapifilters.WithRequestReceivedTimestamp(h)
	h = genericfilters.WithPanicRecovery(h, c.RequestInfoResolver)
	h = genericapifilters.WithAuditInit(h)

	short := h
	var refuse http.Handler
	if o.Entry != nil {
		refuse = o.Entry.refusal(c)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// The entry decision comes first: it holds for both chains, and other
		// paths (health, metrics, discovery of /apis, OpenAPI) keep their rules.
		if refuse != nil && gatewayAPI(req.URL.Path) && !o.Entry.FromFrontProxy(req) {
			refuse.ServeHTTP(w, req)
			return
		}
		if _, _, ok := Split(req.URL.Path); ok {
			growStack(len(req.URL.Path))
			short.ServeHTTP(w, req)
			return
		}
		generic.ServeHTTP(w, req)
	})
}

const prefix = gatewayv1alpha1.UpstreamClustersPath + "/"

// Split returns the cluster name and the member path of a proxy subresource
// path, exactly as the generic Connect handler finds them, so that both agree
// on every form (request.Parse then refuses dot and empty segments): the
// segments after ".../proxy" with trailing slashes trimmed and one leading
// empty segment dropped, "/"-prefixed, with one trailing slash if the path had
// any; "/" when that leaves nothing. Other paths are not ok.
func Split(urlPath string) (name, path string, ok bool) {
	rest, ok := strings.CutPrefix(urlPath, prefix)
	if !ok {
		return "", "", false
	}
	name, rest, _ = strings.Cut(rest, "/")
	sub, ok := strings.CutPrefix(rest, "proxy")
	if !ok || name == "" || (sub != "" && sub[0] != '/') { // e.g. .../proxyfoo: not the subresource
		return "", "", false
	}
	if sub == "" {
		return name, "/", true
	}
	// The path is a slice of sub, not a new string: every proxied request
	// is split twice. After sub's leading "/", k bytes remain once trailing
	// slashes are trimmed; a second leading "/" is the one kept.
	k := len(strings.TrimRight(sub[1:], "/"))
	start, end := 0, 1+k
	if k > 0 && sub[1] == '/' {
		start = 1
	}
	if k > 0 && end < len(sub) { // one of the trimmed slashes
		end++
	}
	return name, sub[start:end], true
}
