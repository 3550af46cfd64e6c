package chain_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	utilfeature "k8s.io/apiserver/pkg/util/feature"

	"github.com/kubewharf/kube-gateway/proxy/chain"
	"github.com/kubewharf/kube-gateway/proxy/frontproxy"
	"github.com/kubewharf/kube-gateway/test/testca"
)

// BenchmarkChain sends a proxied GET through the short chain as the gateway
// builds it, up to the proxy function, which answers at once: the entry
// check, the apiserver's filters with the front-proxy authentication the
// gateway uses (verification cached) and the privileged-group authorizer that
// admits the hub's administrator without a SubjectAccessReview. What the
// filters cost per request, apart from forwarding (BenchmarkServe in
// proxy/forward) and HTTP/2. Each iteration builds its request (the filters
// remove the X-Remote-* headers they read), as the HTTP/2 server would.
func BenchmarkChain(b *testing.B) {
	serve := proxiedGET(b)
	b.ReportAllocs()
	for b.Loop() {
		serve()
	}
}

// proxiedGET returns a function that sends one proxied GET through the short
// chain and fails tb unless the proxy function got it.
func proxiedGET(tb testing.TB) func() {
	front := testca.New(tb, "front-proxy-ca")
	leaf := front.Issue(tb, testca.Spec{CommonName: "front-proxy-client", Usage: x509.ExtKeyUsageClientAuth, Serial: 2}).Cert
	ca, err := dynamiccertificates.NewStaticCAContent("front-proxy", front.PEM)
	if err != nil {
		tb.Fatal(err)
	}
	rh := &authenticatorfactory.RequestHeaderConfig{
		CAContentProvider:   ca,
		AllowedClientNames:  headerrequest.StaticStringSlice{"front-proxy-client"},
		UsernameHeaders:     headerrequest.StaticStringSlice{"X-Remote-User"},
		UIDHeaders:          headerrequest.StaticStringSlice{"X-Remote-Uid"},
		GroupHeaders:        headerrequest.StaticStringSlice{"X-Remote-Group"},
		ExtraHeaderPrefixes: headerrequest.StaticStringSlice{"X-Remote-Extra-"},
	}
	full := headerrequest.NewDynamicVerifyOptionsSecure(rh.CAContentProvider.VerifyOptions, rh.AllowedClientNames,
		rh.UsernameHeaders, rh.UIDHeaders, rh.GroupHeaders, rh.ExtraHeaderPrefixes)
	verifier := frontproxy.NewVerifier(rh)

	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	c := genericapiserver.NewConfig(serializer.NewCodecFactory(scheme))
	c.FeatureGate = utilfeature.DefaultFeatureGate
	c.RequestInfoResolver = genericapiserver.NewRequestInfoResolver(c)
	c.Authentication.Authenticator = verifier.Authenticator(full)
	c.Authentication.RequestHeaderConfig = rh
	c.Authorization.Authorizer = authorizerfactory.NewPrivilegedGroups(user.SystemPrivilegedGroup)

	var served bool
	proxy := func(w http.ResponseWriter, req *http.Request, name, path string) {
		served = name == "member-b" && path == "/api/v1/namespaces/bench/configmaps/target"
		w.WriteHeader(http.StatusOK)
	}
	h := chain.New(http.NotFoundHandler(), proxy, c, chain.Options{Entry: &chain.Entry{FromFrontProxy: verifier.FromFrontProxy, Message: "refused"}})

	const url = "https://gateway/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-b/proxy/api/v1/namespaces/bench/configmaps/target"
	header := http.Header{
		"Accept":          {"application/json"},
		"Accept-Encoding": {"gzip"},
		"User-Agent":      {"bench"},
		"X-Remote-User":   {"admin"},
		"X-Remote-Group":  {"system:masters", "system:authenticated"},
	}
	state := &tls.ConnectionState{HandshakeComplete: true, PeerCertificates: []*x509.Certificate{leaf}}
	w := &discard{header: http.Header{}}
	return func() {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			tb.Fatal(err)
		}
		req.Header, req.TLS, req.RemoteAddr = header.Clone(), state, "127.0.0.1:40000"
		clear(w.header)
		served, w.code = false, 0
		h.ServeHTTP(w, req)
		if !served || w.code != http.StatusOK {
			tb.Fatalf("the proxied GET was not served: %d", w.code)
		}
	}
}

// discard is a ResponseWriter that keeps the status and drops the body.
type discard struct {
	header http.Header
	code   int
}

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(code int)        { d.code = code }
