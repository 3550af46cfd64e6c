package chain

import (
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericfeatures "k8s.io/apiserver/pkg/features"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// Entry restricts the gateway's own API to requests that come through the
// hub's front proxy (its aggregator), where the hub authenticated and
// authorized the user, applied its priority and fairness and wrote its audit
// log. Hub credentials sent straight to the gateway would skip all of that.
type Entry struct {
	// FromFrontProxy tells whether a request comes from the front proxy and
	// will be authenticated as the user the front proxy names
	// (frontproxy.Verifier.FromFrontProxy).
	FromFrontProxy func(*http.Request) bool
	// Message of the 401 for every other request: it tells the caller how to
	// get in (through the hub, or the flag that allows direct access).
	Message string
}

// refusal answers a request the Entry refuses: 401 with a Status carrying the
// message, audited as a failed authentication. It runs before either chain,
// so it initializes the audit context and request info itself.
func (e *Entry) refusal(c *genericapiserver.Config) http.Handler {
	err := apierrors.NewUnauthorized(e.Message)
	h := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// As for any failed authentication (genericapifilters.Unauthorized):
		// an unauthenticated client does not keep an HTTP/2 connection.
		if utilfeature.DefaultFeatureGate.Enabled(genericfeatures.UnauthenticatedHTTP2DOSMitigation) && req.ProtoMajor == 2 {
			w.Header().Set("Connection", "close")
		}
		responsewriters.ErrorNegotiated(err, c.Serializer, gatewayv1alpha1.SchemeGroupVersion, w, req)
	}))
	h = genericapifilters.WithFailedAuthenticationAudit(h, c.AuditBackend, c.AuditPolicyRuleEvaluator)
	h = genericapifilters.WithRequestInfo(h, c.RequestInfoResolver)
	return genericapifilters.WithAuditInit(h)
}

// gatewayAPI tells whether urlPath is in the gateway's API group:
// /apis/gateway.kubewharf.io and everything under it (discovery, the
// UpstreamCluster API, the proxy subresource). Empty segments are skipped, as
// the request info resolver and go-restful's router skip leading slashes, so
// that "//apis/gateway.kubewharf.io/..." is not a way around the decision.
func gatewayAPI(urlPath string) bool {
	var segs [2]string
	n := 0
	for rest := urlPath; rest != "" && n < len(segs); {
		var seg string
		seg, rest, _ = strings.Cut(rest, "/")
		if seg != "" {
			segs[n] = seg
			n++
		}
	}
	return n == 2 && segs[0] == "apis" && segs[1] == gatewayv1alpha1.GroupName
}
