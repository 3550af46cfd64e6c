package door

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/endpoints/filters/impersonation"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster/clustertest"
	"github.com/kubewharf/kube-gateway/test/testca"
)

type fakeDoors map[string]*Door

func (f fakeDoors) Door(name string) (*Door, error) {
	if d, ok := f[name]; ok {
		return d, nil
	}
	return nil, errors.New("no UpstreamCluster serves it")
}

// fakeMember answers TokenReviews with the gateway's token as a member
// would: token "good-"+cluster is ServiceAccount alice:sa, "boom" gets a 500,
// anything else is not authenticated. It counts the reviews.
type fakeMember struct {
	*httptest.Server
	reviews, sars atomic.Int32
	// clientCA is what the member publishes as its client-ca-file; nil: the
	// ConfigMap cannot be read.
	clientCA atomic.Pointer[[]byte]
}

func newFakeMember(t *testing.T, cluster string) *fakeMember {
	m := &fakeMember{}
	m.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ca := m.clientCA.Load(); r.Method == http.MethodGet && r.URL.Path == memberCAPath && r.Header.Get("Authorization") == "Bearer gw-token" && ca != nil {
			_ = json.NewEncoder(w).Encode(&corev1.ConfigMap{Data: map[string]string{memberCAKey: string(*ca)}})
			return
		}
		if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer gw-token" || r.Header.Get("Impersonate-User") != "" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		if r.URL.Path == "/apis/authorization.k8s.io/v1/subjectaccessreviews" {
			// Only member-a's admin may impersonate.
			var sar authorizationv1.SubjectAccessReview
			if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			m.sars.Add(1)
			sar.Status.Allowed = sar.Spec.User == "admin" && sar.Spec.ResourceAttributes != nil && sar.Spec.ResourceAttributes.Verb == "impersonate"
			if !sar.Status.Allowed {
				sar.Status.Reason = "no RBAC policy matched"
			}
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(&sar)
			return
		}
		if r.URL.Path != "/apis/authentication.k8s.io/v1/tokenreviews" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		m.reviews.Add(1)
		var review authenticationv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch review.Spec.Token {
		case "boom":
			http.Error(w, "etcd is down", http.StatusInternalServerError)
			return
		case "good-" + cluster:
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{
				Username: "system:serviceaccount:alice:sa", UID: "sa-uid", Groups: []string{"system:serviceaccounts", "system:authenticated"},
				Extra: map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/credential-id": {"JTI=1"}}}}
		}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(&review)
	}))
	t.Cleanup(m.Close)
	return m
}

// doorOf compiles the door of cluster, served by member, with a serving
// certificate for names from servingCA and clientCA as the client CA.
func doorOf(t *testing.T, cluster string, member *fakeMember, names []string, servingCA, clientCA *testca.CA) *Door {
	t.Helper()
	serving := servingCA.Issue(t, testca.Spec{CommonName: names[0], SANs: names, Usage: x509.ExtKeyUsageServerAuth})
	uc := &gatewayv1alpha1.UpstreamCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}}
	uc.Spec.SecureServing = &gatewayv1alpha1.SecureServing{ServerNames: names, SecretRef: gatewayv1alpha1.SecretReference{Namespace: "kube-gateway", Name: cluster + "-door"}}
	c := clustertest.Compile(t, cluster, "gw-token", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: member.Certificate().Raw}), nil, member.URL)
	d, err := Compile(uc, &corev1.Secret{Data: map[string][]byte{CertKey: serving.CertPEM, KeyKey: serving.KeyPEM, ClientCAKey: clientCA.PEM}}, c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

type seen struct {
	cluster, user string
	groups        []string
}

// TestDoor serves two clusters' doors on a real TLS listener and checks who
// gets in, as whom, and the errors of everyone else.
func TestDoor(t *testing.T) {
	servingCA := testca.New(t, "door-serving-ca")
	caA, caB := testca.New(t, "member-a-client-ca"), testca.New(t, "member-b-client-ca")
	doors := fakeDoors{}
	memberA := newFakeMember(t, "member-a")
	for _, d := range []*Door{
		doorOf(t, "member-a", memberA, []string{"member-a.example.com"}, servingCA, caA),
		doorOf(t, "member-b", newFakeMember(t, "member-b"), []string{"member-b.example.com"}, servingCA, caB),
	} {
		for _, n := range d.ServerNames {
			doors[n] = d
		}
	}
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	codecs := serializer.NewCodecFactory(scheme)
	got := make(chan seen, 1)
	s := NewServer(doors, func(w http.ResponseWriter, req *http.Request, cluster string) {
		u, _ := genericapirequest.UserFrom(req.Context())
		if req.Header.Get("Authorization") != "" {
			t.Errorf("the client's Authorization header reached the forwarder")
		}
		got <- seen{cluster, u.GetName(), u.GetGroups()}
		_, _ = io.WriteString(w, "forwarded")
	}, codecs)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		Serve(ctx, ln, s, s.Authenticate(impersonation.WithImpersonation(http.HandlerFunc(s.Serve), authorizeImpersonation{}, codecs), s.Refusal()), doorStreams)
	}()
	t.Cleanup(func() { cancel(); <-served })

	adminA := caA.Issue(t, testca.Spec{CommonName: "admin", Organization: []string{"system:masters"}, Usage: x509.ExtKeyUsageClientAuth})
	adminB := caB.Issue(t, testca.Spec{CommonName: "admin", Organization: []string{"system:masters"}, Usage: x509.ExtKeyUsageClientAuth})
	expiredA := caA.Issue(t, testca.Spec{CommonName: "admin", Usage: x509.ExtKeyUsageClientAuth, NotAfter: time.Now().Add(-time.Minute)})
	roots := x509.NewCertPool()
	roots.AddCert(servingCA.Cert)
	do := func(serverName, host string, cert *testca.Leaf, header http.Header) (int, string, error) {
		tc := &tls.Config{RootCAs: roots, ServerName: serverName}
		if serverName == "" {
			tc.InsecureSkipVerify = true // an IP: no name to verify, and none sent
		}
		if cert != nil {
			tc.Certificates = []tls.Certificate{cert.TLS(t)}
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}, Timeout: 10 * time.Second}
		defer c.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodGet, "https://"+ln.Addr().String()+"/api/v1/namespaces/default/pods", nil)
		req.Host = host
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), nil
	}

	tests := []struct {
		name       string
		serverName string
		host       string
		cert       *testca.Leaf
		header     http.Header
		wantCode   int // 0: the handshake fails
		wantSeen   *seen
		wantMsg    string
	}{
		{name: "member-a's admin on member-a's name", serverName: "member-a.example.com", host: "member-a.example.com", cert: &adminA,
			wantCode: 200, wantSeen: &seen{"member-a", "admin", []string{"system:masters", "system:authenticated"}}},
		{name: "the Host may be the address dialed", serverName: "member-a.example.com", host: ln.Addr().String(), cert: &adminA,
			wantCode: 200, wantSeen: &seen{"member-a", "admin", []string{"system:masters", "system:authenticated"}}},
		{name: "member-b's admin on member-b's name", serverName: "member-b.example.com", host: "member-b.example.com", cert: &adminB,
			wantCode: 200, wantSeen: &seen{"member-b", "admin", []string{"system:masters", "system:authenticated"}}},
		{name: "member-b's certificate on member-a's name", serverName: "member-a.example.com", host: "member-a.example.com", cert: &adminB,
			wantCode: 401, wantMsg: `upstream cluster \"member-a\": client certificate: x509: certificate signed by unknown authority`},
		{name: "an expired certificate", serverName: "member-a.example.com", host: "member-a.example.com", cert: &expiredA,
			wantCode: 401, wantMsg: "expired"},
		{name: "no credential", serverName: "member-a.example.com", host: "member-a.example.com",
			wantCode: 401, wantMsg: "needs a client certificate of the member's CA, or a bearer token"},
		{name: "member-a's token", serverName: "member-a.example.com", host: "member-a.example.com", header: http.Header{"Authorization": {"Bearer good-member-a"}},
			wantCode: 200, wantSeen: &seen{"member-a", "system:serviceaccount:alice:sa", []string{"system:serviceaccounts", "system:authenticated"}}},
		{name: "member-b's token on member-a's name", serverName: "member-a.example.com", host: "member-a.example.com", header: http.Header{"Authorization": {"Bearer good-member-b"}},
			wantCode: 401, wantMsg: `upstream cluster \"member-a\": the member does not accept the bearer token`},
		{name: "the member cannot review", serverName: "member-a.example.com", host: "member-a.example.com", header: http.Header{"Authorization": {"Bearer boom"}},
			wantCode: 503, wantMsg: "could not review the bearer token"},
		{name: "a Host naming another cluster", serverName: "member-a.example.com", host: "member-b.example.com", cert: &adminA,
			wantCode: 421, wantMsg: `not \"member-b.example.com\"`},
		{name: "impersonation the member allows", serverName: "member-a.example.com", host: "member-a.example.com", cert: &adminA,
			header: http.Header{"Impersonate-User": {"someone"}}, wantCode: 200, wantSeen: &seen{"member-a", "someone", []string{"system:authenticated"}}},
		{name: "impersonation the member refuses", serverName: "member-a.example.com", host: "member-a.example.com",
			header: http.Header{"Authorization": {"Bearer good-member-a"}, "Impersonate-User": {"admin"}}, wantCode: 403, wantMsg: "cannot impersonate resource"},
		{name: "a name no cluster serves", serverName: "member-c.example.com", host: "member-c.example.com", cert: &adminA},
		{name: "no server name", host: "127.0.0.1", cert: &adminA},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body, err := do(tt.serverName, tt.host, tt.cert, tt.header)
			if tt.wantCode == 0 {
				if err == nil {
					t.Fatalf("answered %d %s, want a failed handshake", code, body)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode {
				t.Fatalf("status %d %s, want %d", code, body, tt.wantCode)
			}
			if tt.wantSeen == nil {
				var st metav1.Status
				if err := json.Unmarshal([]byte(body), &st); err != nil || st.Kind != "Status" || st.Code != int32(code) {
					t.Errorf("body %s is not a Status with code %d", body, code)
				}
				if !strings.Contains(body, tt.wantMsg) {
					t.Errorf("body %s does not say %q", body, tt.wantMsg)
				}
				select {
				case s := <-got:
					t.Errorf("forwarded as %+v", s)
				default:
				}
				return
			}
			select {
			case s := <-got:
				if s.cluster != tt.wantSeen.cluster || s.user != tt.wantSeen.user || strings.Join(s.groups, ",") != strings.Join(tt.wantSeen.groups, ",") {
					t.Errorf("forwarded as %+v, want %+v", s, *tt.wantSeen)
				}
			default:
				t.Error("not forwarded")
			}
		})
	}

	// HTTP/2 as on the gateway's own port: the streams per connection it is
	// given, not net/http's default.
	if n := maxConcurrentStreams(t, ln.Addr().String(), "member-a.example.com", roots); n != doorStreams {
		t.Errorf("the door announces %d streams per connection, want %d", n, doorStreams)
	}
}

// doorStreams is the door's streams per connection in TestDoor.
const doorStreams = 1000

// maxConcurrentStreams is what an HTTP/2 server at addr announces in its
// first SETTINGS frame.
func maxConcurrentStreams(t *testing.T, addr, serverName string, roots *x509.CertPool) uint32 {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: serverName, NextProtos: []string{http2.NextProtoTLS}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	settings, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("first frame %T, want SETTINGS", f)
	}
	n, _ := settings.Value(http2.SettingMaxConcurrentStreams)
	return n
}

func TestCompileRefusesAnUnusableSecret(t *testing.T) {
	ca := testca.New(t, "ca")
	serving := ca.Issue(t, testca.Spec{CommonName: "a.example.com", SANs: []string{"a.example.com"}, Usage: x509.ExtKeyUsageServerAuth})
	uc := &gatewayv1alpha1.UpstreamCluster{ObjectMeta: metav1.ObjectMeta{Name: "member-a"}}
	uc.Spec.SecureServing = &gatewayv1alpha1.SecureServing{ServerNames: []string{"a.example.com"}, SecretRef: gatewayv1alpha1.SecretReference{Namespace: "kube-gateway", Name: "door"}}
	for _, tt := range []struct {
		name   string
		secret *corev1.Secret
		want   string
	}{
		{"missing", nil, "kube-gateway/door was not found"},
		{"no key", &corev1.Secret{Data: map[string][]byte{CertKey: serving.CertPEM, ClientCAKey: ca.PEM}}, "tls.crt and tls.key"},
		{"no client CA", &corev1.Secret{Data: map[string][]byte{CertKey: serving.CertPEM, KeyKey: serving.KeyPEM}}, "ca.crt holds no PEM certificate"},
	} {
		if _, err := Compile(uc, tt.secret, nil, Options{}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one saying %q", tt.name, err, tt.want)
		}
	}
	uc.Spec.SecureServing = nil
	if d, err := Compile(uc, nil, nil, Options{}); d != nil || err != nil {
		t.Errorf("no secureServing: %v, %v; want no door", d, err)
	}
}

// A token the member answered for is not reviewed again within the cache's
// lifetime, good or bad; one it could not answer for is.
func TestTokenReviewsAreCached(t *testing.T) {
	member := newFakeMember(t, "member-a")
	d := doorOf(t, "member-a", member, []string{"member-a.example.com"}, testca.New(t, "serving"), testca.New(t, "client"))
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		for _, token := range []string{"good-member-a", "bad"} {
			if _, ok, err := d.tokens.AuthenticateToken(ctx, token); err != nil || ok != (token == "good-member-a") {
				t.Fatalf("token %s, round %d: %v, %v", token, i, ok, err)
			}
		}
	}
	if n := member.reviews.Load(); n != 2 {
		t.Errorf("%d TokenReviews for two tokens asked five times each, want 2", n)
	}
	for i := 0; i < 2; i++ {
		if _, _, err := d.tokens.AuthenticateToken(ctx, "boom"); err == nil {
			t.Fatal("no error when the member could not review")
		}
	}
	if n := member.reviews.Load(); n != 4 {
		t.Errorf("%d TokenReviews after two that failed, want 4 (errors are not kept)", n)
	}
}

// A door whose token reviews are off refuses a bearer token with 401 and
// says how to get in; a certificate still would.
func TestTokensOff(t *testing.T) {
	member := newFakeMember(t, "member-a")
	serving := testca.New(t, "serving")
	d := doorOf(t, "member-a", member, []string{"member-a.example.com"}, serving, testca.New(t, "client"))
	uc := &gatewayv1alpha1.UpstreamCluster{ObjectMeta: metav1.ObjectMeta{Name: "member-a"}}
	leaf := serving.Issue(t, testca.Spec{CommonName: "member-a.example.com", SANs: []string{"member-a.example.com"}, Usage: x509.ExtKeyUsageServerAuth})
	uc.Spec.SecureServing = &gatewayv1alpha1.SecureServing{ServerNames: d.ServerNames, SecretRef: gatewayv1alpha1.SecretReference{Namespace: "kube-gateway", Name: "door"},
		TokenReview: &gatewayv1alpha1.TokenReview{Disabled: true}}
	off, err := Compile(uc, &corev1.Secret{Data: map[string][]byte{CertKey: leaf.CertPEM, KeyKey: leaf.KeyPEM, ClientCAKey: testca.New(t, "client").PEM}}, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(fakeDoors{"member-a.example.com": off}, nil, nil)
	req := httptest.NewRequest(http.MethodGet, "https://member-a.example.com/api", nil)
	req.TLS = &tls.ConnectionState{ServerName: "member-a.example.com"}
	req.Header.Set("Authorization", "Bearer good-member-a")
	_, _, err = s.authenticate(req)
	if !apierrors.IsUnauthorized(err) || !strings.Contains(err.Error(), "tokenReview.disabled") {
		t.Errorf("a token at a door without token reviews: %v, want 401 naming spec.secureServing.tokenReview.disabled", err)
	}
	if n := member.reviews.Load(); n != 0 {
		t.Errorf("%d TokenReviews sent by a door without token reviews", n)
	}
}

// With clientCA Member the door trusts the member's own client CA, read
// from the member: until it is read a certificate gets 503, then it
// verifies; another CA's does not.
func TestMemberClientCA(t *testing.T) {
	memberCA, other := testca.New(t, "member-a-client-ca"), testca.New(t, "other-ca")
	member := newFakeMember(t, "member-a")
	c := clustertest.Compile(t, "member-a", "gw-token", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: member.Certificate().Raw}), nil, member.URL)
	serving := testca.New(t, "serving").Issue(t, testca.Spec{CommonName: "member-a.example.com", SANs: []string{"member-a.example.com"}, Usage: x509.ExtKeyUsageServerAuth})
	uc := &gatewayv1alpha1.UpstreamCluster{ObjectMeta: metav1.ObjectMeta{Name: "member-a"}}
	uc.Spec.SecureServing = &gatewayv1alpha1.SecureServing{ServerNames: []string{"member-a.example.com"}, ClientCA: gatewayv1alpha1.ClientCAFromMember,
		SecretRef: gatewayv1alpha1.SecretReference{Namespace: "kube-gateway", Name: "door"}}
	// No ca.crt in the Secret: the member's CA is enough.
	d, err := Compile(uc, &corev1.Secret{Data: map[string][]byte{CertKey: serving.CertPEM, KeyKey: serving.KeyPEM}}, c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(fakeDoors{"member-a.example.com": d}, nil, nil)
	request := func(ca *testca.CA) error {
		leaf := ca.Issue(t, testca.Spec{CommonName: "admin", Usage: x509.ExtKeyUsageClientAuth})
		req := httptest.NewRequest(http.MethodGet, "https://member-a.example.com/api", nil)
		req.TLS = &tls.ConnectionState{ServerName: "member-a.example.com", PeerCertificates: []*x509.Certificate{leaf.Cert}}
		_, _, err := s.authenticate(req)
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan struct{})
	go func() { // the member does not publish its CA yet
		defer close(ran)
		d.Run(ctx)
	}()
	if err := request(memberCA); !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "client CA is not read yet") {
		t.Fatalf("before the member's CA is read: %v, want 503", err)
	}
	cancel()
	<-ran // one Run at a time, as the controller runs a door

	member.clientCA.Store(&memberCA.PEM)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go d.Run(ctx)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return d.clientCAs.Load() != nil, nil
	}); err != nil {
		t.Fatalf("the member's client CA was not read: %v", d.memberCA.lastError())
	}
	if err := request(memberCA); err != nil {
		t.Errorf("a certificate of the member's CA: %v", err)
	}
	if err := request(other); !apierrors.IsUnauthorized(err) {
		t.Errorf("a certificate of another CA: %v, want 401", err)
	}
}
