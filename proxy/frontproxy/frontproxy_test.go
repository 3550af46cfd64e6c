package frontproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kubewharf/kube-gateway/test/testca"
)

// client issues a front-proxy client certificate signed by c.
func client(t testing.TB, c *testca.CA, cn string, serial int64) *x509.Certificate {
	t.Helper()
	return c.Issue(t, testca.Spec{CommonName: cn, Usage: x509.ExtKeyUsageClientAuth, Serial: serial}).Cert
}

// swappableCA is a CA content provider whose bundle the test replaces, as a
// file or ConfigMap change would.
type swappableCA struct {
	opts atomic.Pointer[x509.VerifyOptions]
}

func (s *swappableCA) set(t testing.TB, c *testca.CA) {
	p, err := dynamiccertificates.NewStaticCAContent("test", c.PEM)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := p.VerifyOptions()
	s.opts.Store(&o)
}
func (s *swappableCA) Name() string                             { return "test" }
func (s *swappableCA) CurrentCABundleContent() []byte           { return nil }
func (s *swappableCA) AddListener(dynamiccertificates.Listener) {}
func (s *swappableCA) VerifyOptions() (x509.VerifyOptions, bool) {
	return *s.opts.Load(), true
}

// recorder is the full authenticator: it records that it was asked.
type recorder struct{ calls int }

func (r *recorder) AuthenticateRequest(*http.Request) (*authenticator.Response, bool, error) {
	r.calls++
	return &authenticator.Response{User: &user.DefaultInfo{Name: "from-full", Groups: []string{user.AllAuthenticated}}}, true, nil
}

// swappableNames are allowed client names the test replaces, as a ConfigMap
// change would.
type swappableNames struct{ names atomic.Pointer[[]string] }

func (s *swappableNames) Value() []string { return *s.names.Load() }

type fixture struct {
	verifier *Verifier
	authn    authenticator.Request
	full     *recorder
	caSrc    *swappableCA
	names    *swappableNames
	clock    *clocktesting.FakePassiveClock
}

func newFixture(t testing.TB, c *testca.CA, allowed ...string) *fixture {
	f := &fixture{full: &recorder{}, caSrc: &swappableCA{}, names: &swappableNames{}, clock: clocktesting.NewFakePassiveClock(time.Now())}
	f.caSrc.set(t, c)
	f.names.names.Store(&allowed)
	rh := &authenticatorfactory.RequestHeaderConfig{
		CAContentProvider:   f.caSrc,
		AllowedClientNames:  f.names,
		UsernameHeaders:     headerrequest.StaticStringSlice{"X-Remote-User"},
		UIDHeaders:          headerrequest.StaticStringSlice{"X-Remote-Uid"},
		GroupHeaders:        headerrequest.StaticStringSlice{"X-Remote-Group"},
		ExtraHeaderPrefixes: headerrequest.StaticStringSlice{"X-Remote-Extra-"},
	}
	f.verifier = newVerifier(rh, f.clock)
	f.authn = f.verifier.Authenticator(f.full)
	return f
}

func request(cert *x509.Certificate) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, "https://gateway/apis", nil)
	req.Header.Set("X-Remote-User", "alice")
	req.Header.Add("X-Remote-Group", "dev")
	req.Header.Set("X-Remote-Extra-Scopes", "s1")
	if cert != nil {
		req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	}
	return req
}

// authenticate returns the user name and whether the full authenticator was
// needed.
func (f *fixture) authenticate(t *testing.T, req *http.Request) (string, bool) {
	t.Helper()
	before := f.full.calls
	resp, ok, err := f.authn.AuthenticateRequest(req)
	if err != nil || !ok {
		t.Fatalf("AuthenticateRequest: ok=%v err=%v", ok, err)
	}
	return resp.User.GetName(), f.full.calls > before
}

func TestVerifiedCertificateAuthenticatesFromHeaders(t *testing.T) {
	front := testca.New(t, "front-proxy-ca")
	f := newFixture(t, front, "front-proxy-client")
	cert := client(t, front, "front-proxy-client", 2)
	for i := range 3 { // the first verifies, the others come from the cache
		req := request(cert)
		resp, ok, err := f.authn.AuthenticateRequest(req)
		if err != nil || !ok {
			t.Fatalf("request %d: ok=%v err=%v", i, ok, err)
		}
		u := resp.User
		if u.GetName() != "alice" || !slices.Equal(u.GetGroups(), []string{"dev", user.AllAuthenticated}) || !slices.Equal(u.GetExtra()["scopes"], []string{"s1"}) {
			t.Fatalf("request %d: user %#v", i, u)
		}
		if f.full.calls != 0 {
			t.Fatalf("request %d: the full authenticator was asked", i)
		}
		// Like the library's authenticator, the identity headers are removed.
		if req.Header.Get("X-Remote-User") != "" || req.Header.Get("X-Remote-Group") != "" || req.Header.Get("X-Remote-Extra-Scopes") != "" {
			t.Fatalf("request %d: identity headers left: %v", i, req.Header)
		}
	}
}

func TestEverythingElseIsLeftToTheFullAuthenticator(t *testing.T) {
	front := testca.New(t, "front-proxy-ca")
	other := testca.New(t, "other-ca")
	f := newFixture(t, front, "front-proxy-client")
	for name, req := range map[string]*http.Request{
		"no client certificate": request(nil),
		"another CA":            request(client(t, other, "front-proxy-client", 3)),
		"a name not allowed":    request(client(t, front, "someone-else", 4)),
	} {
		t.Run(name, func(t *testing.T) {
			if got, full := f.authenticate(t, req); got != "from-full" || !full {
				t.Fatalf("got user %q (full authenticator asked: %v), want the full authenticator's", got, full)
			}
		})
	}
}

// FromFrontProxy says yes exactly when the request-header step would
// authenticate the request, and leaves the identity headers for it.
func TestFromFrontProxy(t *testing.T) {
	front := testca.New(t, "front-proxy-ca")
	other := testca.New(t, "other-ca")
	f := newFixture(t, front, "front-proxy-client")
	cert := client(t, front, "front-proxy-client", 2)
	noUser := request(cert)
	noUser.Header.Del("X-Remote-User")
	bearer := request(nil)
	bearer.Header.Set("Authorization", "Bearer hub-token")
	tests := []struct {
		name string
		req  *http.Request
		want bool
	}{
		{"the front proxy's certificate and a user", request(cert), true},
		{"the front proxy's certificate without a user", noUser, false},
		{"a bearer token and identity headers", bearer, false},
		{"another CA", request(client(t, other, "front-proxy-client", 3)), false},
		{"a name not allowed", request(client(t, front, "someone-else", 4)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.req.Header.Clone()
			if got := f.verifier.FromFrontProxy(tt.req); got != tt.want {
				t.Fatalf("FromFrontProxy = %v, want %v", got, tt.want)
			}
			if len(tt.req.Header) != len(before) || tt.req.Header.Get("X-Remote-User") != before.Get("X-Remote-User") {
				t.Fatalf("headers changed: %v, were %v", tt.req.Header, before)
			}
			if !tt.want {
				return
			}
			if got, full := f.authenticate(t, tt.req); got != "alice" || full {
				t.Fatalf("then authenticated as %q (full authenticator asked: %v)", got, full)
			}
		})
	}
	var none *Verifier
	if none.FromFrontProxy(request(cert)) {
		t.Fatal("a nil Verifier (no request-header configuration) trusted a request")
	}
}

func TestCachedVerificationEnds(t *testing.T) {
	front := testca.New(t, "front-proxy-ca")
	f := newFixture(t, front, "front-proxy-client")
	cert := client(t, front, "front-proxy-client", 2)
	if got, full := f.authenticate(t, request(cert)); got != "alice" || full {
		t.Fatalf("first request: %q, full asked %v", got, full)
	}

	t.Run("when the certificate expires", func(t *testing.T) {
		f.clock.SetTime(cert.NotAfter.Add(time.Second))
		defer f.clock.SetTime(time.Now())
		if got, _ := f.authenticate(t, request(cert)); got != "from-full" {
			t.Fatalf("an expired certificate authenticated %q", got)
		}
	})
	if got, _ := f.authenticate(t, request(cert)); got != "alice" {
		t.Fatalf("back in its validity period: %q", got)
	}

	t.Run("when the CA bundle changes", func(t *testing.T) {
		f.caSrc.set(t, testca.New(t, "new-front-proxy-ca"))
		if got, _ := f.authenticate(t, request(cert)); got != "from-full" {
			t.Fatalf("a certificate of the replaced CA authenticated %q", got)
		}
	})

	t.Run("when the allowed names change", func(t *testing.T) {
		f.caSrc.set(t, front)
		if got, _ := f.authenticate(t, request(cert)); got != "alice" {
			t.Fatalf("CA restored: %q", got)
		}
		f.names.names.Store(&[]string{"another-name"})
		if got, _ := f.authenticate(t, request(cert)); got != "from-full" {
			t.Fatalf("a name no longer allowed authenticated %q", got)
		}
	})
}

// BenchmarkAuthenticate compares the library's request-header authenticator,
// which verifies the chain on every request, with the cached one.
func BenchmarkAuthenticate(b *testing.B) {
	front := testca.New(b, "front-proxy-ca")
	cert := client(b, front, "front-proxy-client", 2)
	f := newFixture(b, front, "front-proxy-client")
	rh := &authenticatorfactory.RequestHeaderConfig{
		CAContentProvider:   f.caSrc,
		AllowedClientNames:  headerrequest.StaticStringSlice{"front-proxy-client"},
		UsernameHeaders:     headerrequest.StaticStringSlice{"X-Remote-User"},
		UIDHeaders:          headerrequest.StaticStringSlice{"X-Remote-Uid"},
		GroupHeaders:        headerrequest.StaticStringSlice{"X-Remote-Group"},
		ExtraHeaderPrefixes: headerrequest.StaticStringSlice{"X-Remote-Extra-"},
	}
	library := headerrequest.NewDynamicVerifyOptionsSecure(rh.CAContentProvider.VerifyOptions, rh.AllowedClientNames,
		rh.UsernameHeaders, rh.UIDHeaders, rh.GroupHeaders, rh.ExtraHeaderPrefixes)
	for name, authn := range map[string]authenticator.Request{"library": library, "cached": f.authn} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok, err := authn.AuthenticateRequest(request(cert)); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

// BenchmarkTrusted is the check every request through the hub makes twice (the
// entry decision and the authenticator), on one connection's certificate, from
// all CPUs at once.
func BenchmarkTrusted(b *testing.B) {
	front := testca.New(b, "front-proxy-ca")
	f := newFixture(b, front, "front-proxy-client")
	req := request(client(b, front, "front-proxy-client", 2))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !f.verifier.v.trusted(req) {
				b.Error("not trusted")
				return
			}
		}
	})
}

// The CA bundle of the hub's extension-apiserver-authentication ConfigMap is
// not there when the server starts: the library's first load reads an informer
// that has not run yet. Loaded says so until the controller has loaded it, and
// meanwhile no request comes from the front proxy.
func TestLoadedOnlyOnceTheConfigMapIsRead(t *testing.T) {
	front := testca.New(t, "front-proxy-ca")
	hub := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "extension-apiserver-authentication"},
		Data:       map[string]string{"requestheader-client-ca-file": string(front.PEM)},
	})
	ca, err := dynamiccertificates.NewDynamicCAFromConfigMapController("request-header", metav1.NamespaceSystem, "extension-apiserver-authentication", "requestheader-client-ca-file", hub)
	if err != nil {
		t.Fatal(err)
	}
	// What k8s.io/apiserver's delegating authentication does before serving.
	if err := ca.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	v := NewVerifier(&authenticatorfactory.RequestHeaderConfig{
		CAContentProvider:  ca,
		AllowedClientNames: headerrequest.StaticStringSlice{},
		UsernameHeaders:    headerrequest.StaticStringSlice{"X-Remote-User"},
		UIDHeaders:         headerrequest.StaticStringSlice{},
		GroupHeaders:       headerrequest.StaticStringSlice{},
	})
	req := request(client(t, front, "front-proxy-client", 2))
	if err := v.Loaded(); err == nil {
		t.Fatal("Loaded before the ConfigMap's informer ran")
	}
	if v.FromFrontProxy(req) {
		t.Fatal("a front-proxy request trusted without a CA bundle")
	}

	ctx, cancel := context.WithTimeout(context.Background(), wait.ForeverTestTimeout)
	defer cancel()
	go ca.Run(ctx, 1)
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		return v.Loaded() == nil, nil
	}); err != nil {
		t.Fatalf("still not loaded: %v", v.Loaded())
	}
	if !v.FromFrontProxy(req) {
		t.Fatal("loaded, but the front proxy's request is not trusted")
	}
	var none *Verifier
	if err := none.Loaded(); err != nil {
		t.Fatalf("a nil Verifier (no request-header configuration): %v", err)
	}
}

// Every request of a connection carries the certificate its handshake parsed;
// that one is remembered, and another connection's copy of the same bytes is
// verified on its own. The cache stays within its bound as connections come
// and go.
func TestVerificationIsRememberedPerConnection(t *testing.T) {
	front := testca.New(t, "front-proxy-ca")
	f := newFixture(t, front, "front-proxy-client")
	cert := client(t, front, "front-proxy-client", 2)
	remembered := f.verifier.v.verified.Remembered

	if got, _ := f.authenticate(t, request(cert)); got != "alice" || !remembered(cert) {
		t.Fatalf("first request: %q, certificate remembered: %v", got, remembered(cert))
	}
	reconnected, err := x509.ParseCertificate(cert.Raw)
	if err != nil {
		t.Fatal(err)
	}
	if remembered(reconnected) {
		t.Fatal("another connection's certificate was taken as verified before it was")
	}
	if got, _ := f.authenticate(t, request(reconnected)); got != "alice" || !remembered(reconnected) {
		t.Fatalf("another connection: %q, certificate remembered: %v", got, remembered(reconnected))
	}

	for i := range 2 * cacheSize {
		c, err := x509.ParseCertificate(cert.Raw)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := f.authenticate(t, request(c)); got != "alice" {
			t.Fatalf("connection %d: %q", i, got)
		}
		if !remembered(c) {
			t.Fatalf("connection %d: its certificate was not remembered", i)
		}
	}
	if n := f.verifier.v.verified.Len(); n > cacheSize {
		t.Fatalf("%d certificates remembered, want at most %d", n, cacheSize)
	}
}
