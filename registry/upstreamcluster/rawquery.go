package upstreamcluster

import (
	"context"
	"net/http"

	genericrequest "k8s.io/apiserver/pkg/endpoints/request"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

type rawQueryKey struct{}

// WithRawProxyQuery keeps the client's query string of proxy subresource requests
// for the data plane and hides `dryRun` from the generic Connecter handler, which
// refuses it: a dry run through the proxy is the member's business
// (`kubectl apply --dry-run=server` must reach the member as a dry run).
// It must run after the RequestInfo filter.
func WithRawProxyQuery(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		info, ok := genericrequest.RequestInfoFrom(req.Context())
		if !ok || !info.IsResourceRequest || info.APIGroup != gatewayv1alpha1.GroupName ||
			info.Resource != "upstreamclusters" || info.Subresource != "proxy" {
			handler.ServeHTTP(w, req)
			return
		}
		ctx := context.WithValue(req.Context(), rawQueryKey{}, req.URL.RawQuery)
		req = req.WithContext(ctx)
		if q := req.URL.Query(); q.Has("dryRun") {
			q.Del("dryRun")
			u := *req.URL
			u.RawQuery = q.Encode()
			req.URL = &u
		}
		handler.ServeHTTP(w, req)
	})
}

func rawQueryFrom(ctx context.Context) (string, bool) {
	q, ok := ctx.Value(rawQueryKey{}).(string)
	return q, ok
}
