package cluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/transport"
	"k8s.io/utils/clock"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/health"
	"github.com/kubewharf/kube-gateway/proxy/impersonate"
	"github.com/kubewharf/kube-gateway/proxy/request"
	gwtransport "github.com/kubewharf/kube-gateway/proxy/transport"
	"github.com/kubewharf/kube-gateway/test/testca"
)

const token = "gateway-token-5f2b9c"

// issue returns a PEM certificate and key signed by c; sans are IP addresses
// or DNS names.
func issue(t *testing.T, c *testca.CA, cn string, usage x509.ExtKeyUsage, sans ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	l := c.Issue(t, testca.Spec{CommonName: cn, Usage: usage, SANs: sans})
	return l.CertPEM, l.KeyPEM
}

// seen is what a member server observed of one request.
type seen struct {
	authorization string
	clientCN      string
}

// member is an https server with a certificate signed by serverCA that accepts
// (but does not require) client certificates signed by clientCA.
type member struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
	// accepted counts the connections accepted, open those not closed yet.
	accepted, open int
}

// conns returns how many connections m accepted and how many are open.
func (m *member) conns() (accepted, open int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.accepted, m.open
}

func newMember(t *testing.T, serverCA, clientCA *testca.CA) *member {
	t.Helper()
	m := &member{}
	m.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{authorization: r.Header.Get("Authorization")}
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			s.clientCN = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		m.mu.Lock()
		m.reqs = append(m.reqs, s)
		m.mu.Unlock()
		_, _ = w.Write([]byte("ok"))
	}))
	certPEM, keyPEM := issue(t, serverCA, "member", x509.ExtKeyUsageServerAuth, "127.0.0.1", "member.internal")
	serving, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(clientCA.Cert)
	m.TLS = &tls.Config{
		Certificates: []tls.Certificate{serving},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    pool,
	}
	m.EnableHTTP2 = true // as member apiservers do
	// Failed handshakes are expected.
	m.Config.ErrorLog = log.New(io.Discard, "", 0)
	m.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		m.mu.Lock()
		defer m.mu.Unlock()
		switch state {
		case http.StateNew:
			m.accepted++
			m.open++
		case http.StateClosed, http.StateHijacked:
			m.open--
		}
	}
	m.StartTLS()
	t.Cleanup(m.Close)
	return m
}

func (m *member) last(t *testing.T) seen {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.reqs) == 0 {
		t.Fatal("the member received no request")
	}
	return m.reqs[len(m.reqs)-1]
}

func upstreamCluster(endpoints ...string) *gatewayv1alpha1.UpstreamCluster {
	uc := &gatewayv1alpha1.UpstreamCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "member-a", Generation: 1},
		Spec: gatewayv1alpha1.UpstreamClusterSpec{
			ClientConfig: gatewayv1alpha1.ClientConfig{
				SecretRef: gatewayv1alpha1.SecretReference{Namespace: "kube-gateway", Name: "member-a-cred"},
			},
		},
	}
	for _, e := range endpoints {
		uc.Spec.Servers = append(uc.Spec.Servers, gatewayv1alpha1.UpstreamServer{Endpoint: e})
	}
	return uc
}

func secret(data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-gateway", Name: "member-a-cred"},
		Data:       data,
	}
}

// withIdentity is the context of a proxied request: the transports refuse
// requests without an identity to impersonate.
func withIdentity() context.Context {
	return impersonate.WithIdentity(context.Background(), transport.ImpersonationConfig{UserName: "alice"})
}

// transportsTo returns the transports of c toward its server endpoint.
func transportsTo(t *testing.T, c *cluster.Cluster, endpoint string) *gwtransport.Transports {
	t.Helper()
	for _, e := range c.Endpoints {
		if e.URL.String() == endpoint {
			return c.Transports(e)
		}
	}
	t.Fatalf("%s is not an enabled server of the cluster", endpoint)
	return nil
}

func get(t *testing.T, c *cluster.Cluster, endpoint string) error {
	t.Helper()
	req, err := http.NewRequestWithContext(withIdentity(), http.MethodGet, endpoint+"/version", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := transportsTo(t, c, endpoint).RoundTripper.RoundTrip(req)
	if err != nil {
		return err
	}
	// Read to the end, so that the connection goes back to the pool.
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

func TestCompileCredentials(t *testing.T) {
	serverCA, clientCA := testca.New(t, "server-ca"), testca.New(t, "client-ca")
	m := newMember(t, serverCA, clientCA)
	clientCert, clientKey := issue(t, clientCA, "kube-gateway", x509.ExtKeyUsageClientAuth)

	tests := []struct {
		name      string
		data      map[string][]byte
		wantErr   []string // substrings of the Compile error; nil: success
		wantAuthz string   // Authorization seen by the member
		wantCN    string   // client certificate seen by the member
	}{
		{
			name:      "token",
			data:      map[string][]byte{"token": []byte(token), "ca.crt": serverCA.PEM},
			wantAuthz: "Bearer " + token,
		},
		{
			name:   "client certificate",
			data:   map[string][]byte{"tls.crt": clientCert, "tls.key": clientKey, "ca.crt": serverCA.PEM},
			wantCN: "kube-gateway",
		},
		{
			name:    "token and client certificate",
			data:    map[string][]byte{"token": []byte(token), "tls.crt": clientCert, "tls.key": clientKey},
			wantErr: []string{"kube-gateway/member-a-cred", "token", "tls.crt"},
		},
		{
			name:    "token and a stray tls.key",
			data:    map[string][]byte{"token": []byte(token), "tls.key": clientKey},
			wantErr: []string{"kube-gateway/member-a-cred"},
		},
		{
			name:    "neither",
			data:    map[string][]byte{"ca.crt": serverCA.PEM},
			wantErr: []string{"kube-gateway/member-a-cred", "no credential"},
		},
		{
			name:    "empty Secret",
			data:    nil,
			wantErr: []string{"kube-gateway/member-a-cred", "no credential"},
		},
		{
			name:    "certificate without key",
			data:    map[string][]byte{"tls.crt": clientCert},
			wantErr: []string{"kube-gateway/member-a-cred"},
		},
		{
			name:    "key that does not match the certificate",
			data:    map[string][]byte{"tls.crt": clientCert, "tls.key": mustSecondKey(t, clientCA)},
			wantErr: []string{"kube-gateway/member-a-cred"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := cluster.Compile(upstreamCluster(m.URL), secret(tt.data), nil, nil, cluster.Options{})
			if tt.wantErr != nil {
				if err == nil {
					t.Fatal("Compile succeeded, want an error")
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				if strings.Contains(err.Error(), token) {
					t.Errorf("error reveals the token: %q", err)
				}
				if strings.Contains(err.Error(), "PRIVATE KEY") {
					t.Errorf("error reveals the key: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			if c.Name != "member-a" {
				t.Errorf("Name = %q", c.Name)
			}
			if c.Impersonation == nil {
				t.Error("Impersonation policy is nil")
			}
			if err := get(t, c, m.URL); err != nil {
				t.Fatalf("request to the member: %v", err)
			}
			got := m.last(t)
			if got.authorization != tt.wantAuthz {
				t.Errorf("member saw Authorization %q, want %q", got.authorization, tt.wantAuthz)
			}
			if got.clientCN != tt.wantCN {
				t.Errorf("member saw client certificate %q, want %q", got.clientCN, tt.wantCN)
			}

			// The upgrade transport carries the same credential.
			req, _ := http.NewRequestWithContext(withIdentity(), http.MethodGet, m.URL+"/x", nil)
			wrapped, err := transportsTo(t, c, m.URL).Upgrade.WrapRequest(req)
			if err != nil {
				t.Fatalf("WrapRequest: %v", err)
			}
			if got := wrapped.Header.Get("Authorization"); got != tt.wantAuthz {
				t.Errorf("upgrade request Authorization = %q, want %q", got, tt.wantAuthz)
			}
			if req.Header.Get("Authorization") != "" {
				t.Error("WrapRequest mutated the input request")
			}
			c.Release(nil)
		})
	}
}

// mustSecondKey returns a private key that belongs to another certificate.
func mustSecondKey(t *testing.T, c *testca.CA) []byte {
	_, key := issue(t, c, "other", x509.ExtKeyUsageClientAuth)
	return key
}

func TestCompileCA(t *testing.T) {
	serverCA, otherCA := testca.New(t, "server-ca"), testca.New(t, "other-ca")
	m := newMember(t, serverCA, testca.New(t, "client-ca"))

	tests := []struct {
		name       string
		caData     []byte
		secretCA   []byte
		serverName string
		wantOK     bool
	}{
		{name: "caData only", caData: serverCA.PEM, wantOK: true},
		{name: "Secret ca.crt only", secretCA: serverCA.PEM, wantOK: true},
		{name: "both the same", caData: serverCA.PEM, secretCA: serverCA.PEM, wantOK: true},
		{name: "caData right, Secret wrong: both trusted", caData: serverCA.PEM, secretCA: otherCA.PEM, wantOK: true},
		{name: "caData wrong, Secret right: both trusted", caData: otherCA.PEM, secretCA: serverCA.PEM, wantOK: true},
		{name: "only an unrelated CA", caData: otherCA.PEM, secretCA: otherCA.PEM, wantOK: false},
		{name: "no CA: host roots do not know the member", wantOK: false},
		{name: "serverName in the certificate", caData: serverCA.PEM, serverName: "member.internal", wantOK: true},
		{name: "serverName not in the certificate", caData: serverCA.PEM, serverName: "member.example.com", wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uc := upstreamCluster(m.URL)
			uc.Spec.ClientConfig.CAData = tt.caData
			uc.Spec.ClientConfig.ServerName = tt.serverName
			data := map[string][]byte{"token": []byte(token)}
			if tt.secretCA != nil {
				data["ca.crt"] = tt.secretCA
			}
			c, err := cluster.Compile(uc, secret(data), nil, nil, cluster.Options{})
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			defer c.Release(nil)
			err = get(t, c, m.URL)
			if tt.wantOK && err != nil {
				t.Fatalf("request failed: %v", err)
			}
			if !tt.wantOK {
				var verr *tls.CertificateVerificationError
				if !errors.As(err, &verr) {
					t.Fatalf("request error = %v, want a certificate verification error", err)
				}
			}
		})
	}
}

func TestCompileInsecure(t *testing.T) {
	m := newMember(t, testca.New(t, "server-ca"), testca.New(t, "client-ca"))
	uc := upstreamCluster(m.URL)
	uc.Spec.ClientConfig.Insecure = true
	c, err := cluster.Compile(uc, secret(map[string][]byte{"token": []byte(token)}), nil, nil, cluster.Options{})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	if err := get(t, c, m.URL); err != nil {
		t.Fatalf("insecure request failed: %v", err)
	}
}

func TestCompileEndpoints(t *testing.T) {
	tests := []struct {
		name    string
		servers []gatewayv1alpha1.UpstreamServer
		want    []string
		wantErr bool
	}{
		{
			name: "disabled servers skipped, spec order kept",
			servers: []gatewayv1alpha1.UpstreamServer{
				{Endpoint: "https://192.0.2.10:6443"},
				{Endpoint: "https://192.0.2.11:6443", Disabled: true},
				{Endpoint: "https://[2001:db8::1]:6443"},
				{Endpoint: "https://192.0.2.13:6443", Disabled: true},
				{Endpoint: "https://member.example.com"},
			},
			want: []string{"https://192.0.2.10:6443", "https://[2001:db8::1]:6443", "https://member.example.com"},
		},
		{
			name:    "all disabled",
			servers: []gatewayv1alpha1.UpstreamServer{{Endpoint: "https://192.0.2.10:6443", Disabled: true}},
			want:    nil,
		},
		{
			name:    "unparsable endpoint",
			servers: []gatewayv1alpha1.UpstreamServer{{Endpoint: "https://[2001:db8::1"}},
			wantErr: true,
		},
		{
			name:    "unparsable but disabled endpoint is ignored",
			servers: []gatewayv1alpha1.UpstreamServer{{Endpoint: "https://[2001:db8::1", Disabled: true}, {Endpoint: "https://192.0.2.10"}},
			want:    []string{"https://192.0.2.10"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uc := upstreamCluster()
			uc.Spec.Servers = tt.servers
			c, err := cluster.Compile(uc, secret(map[string][]byte{"token": []byte(token)}), nil, nil, cluster.Options{})
			if tt.wantErr {
				if err == nil {
					t.Fatal("Compile succeeded, want an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			var got []string
			for _, e := range c.Endpoints {
				got = append(got, e.URL.String())
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("Endpoints = %v, want %v", got, tt.want)
			}
			if len(tt.want) == 0 {
				if p := pick(c); p != nil {
					t.Errorf("Pick() = %v, want nil without enabled servers", p)
				}
			}
		})
	}
}

// pick picks a server for a request no dispatch policy matches.
func pick(c *cluster.Cluster) *url.URL {
	e := c.Route(&request.Attributes{Verb: "get", Path: "/version"}).Pick(nil)
	if e == nil {
		return nil
	}
	return e.URL
}

func TestPickRoundRobin(t *testing.T) {
	uc := upstreamCluster()
	uc.Spec.Servers = []gatewayv1alpha1.UpstreamServer{
		{Endpoint: "https://192.0.2.10:6443"},
		{Endpoint: "https://192.0.2.11:6443", Disabled: true},
		{Endpoint: "https://192.0.2.12:6443"},
		{Endpoint: "https://192.0.2.13:6443"},
	}
	c, err := cluster.Compile(uc, secret(map[string][]byte{"token": []byte(token)}), nil, nil, cluster.Options{})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	want := []string{"192.0.2.10:6443", "192.0.2.12:6443", "192.0.2.13:6443"}
	for i := 0; i < 3*len(want); i++ {
		if got := pick(c).Host; got != want[i%len(want)] {
			t.Fatalf("pick %d = %s, want %s", i, got, want[i%len(want)])
		}
	}

	// Concurrent picks share the load evenly and never pick a disabled server.
	const perWorker, workers = 300, 8
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := map[string]int{}
			for i := 0; i < perWorker; i++ {
				local[pick(c).Host]++
			}
			mu.Lock()
			for k, v := range local {
				counts[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(counts) != len(want) {
		t.Fatalf("picked %v, want only %v", counts, want)
	}
	for _, h := range want {
		if counts[h] != perWorker*workers/len(want) {
			t.Errorf("%s picked %d times, want %d (all: %v)", h, counts[h], perWorker*workers/len(want), counts)
		}
	}
}

// Pick returns shared URLs: a caller that modifies one would change where later
// requests go. forward copies it; this guards the contract that the compiled
// endpoints are not modified by a Pick.
func TestPickReturnsCompiledEndpoint(t *testing.T) {
	c, err := cluster.Compile(upstreamCluster("https://192.0.2.10:6443"), secret(map[string][]byte{"token": []byte(token)}), nil, nil, cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := pick(c)
	if p.Path != "" || p.RawQuery != "" || p.Scheme != "https" || p.Host != "192.0.2.10:6443" {
		t.Errorf("Pick() = %#v", p)
	}
}

// Every configuration problem is a ConfigError with a reason for status and
// Events, and a message without credential data.
func TestCompileConfigErrors(t *testing.T) {
	serverCA, clientCA := testca.New(t, "server-ca"), testca.New(t, "client-ca")
	clientCert, clientKey := issue(t, clientCA, "kube-gateway", x509.ExtKeyUsageClientAuth)
	garbageCA := []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")
	tests := []struct {
		name       string
		mutate     func(*gatewayv1alpha1.UpstreamCluster)
		data       map[string][]byte // nil Secret when nil
		wantReason string
		wantErr    string
	}{
		{name: "Secret missing", wantReason: cluster.ReasonSecretNotFound,
			wantErr: "its credential Secret kube-gateway/member-a-cred was not found on the hub"},
		{name: "no credential", data: map[string][]byte{"ca.crt": serverCA.PEM}, wantReason: cluster.ReasonInvalidSecret, wantErr: "no credential"},
		{name: "empty token", data: map[string][]byte{"token": {}, "ca.crt": serverCA.PEM}, wantReason: cluster.ReasonInvalidSecret,
			wantErr: `"token" of credential Secret kube-gateway/member-a-cred is empty`},
		{name: "empty tls.key", data: map[string][]byte{"tls.crt": clientCert, "tls.key": {}}, wantReason: cluster.ReasonInvalidSecret,
			wantErr: `"tls.key" of credential Secret kube-gateway/member-a-cred is empty`},
		{name: "empty ca.crt", data: map[string][]byte{"token": []byte(token), "ca.crt": {}}, wantReason: cluster.ReasonInvalidCAData,
			wantErr: `"ca.crt" of credential Secret kube-gateway/member-a-cred is empty`},
		{name: "two credentials", data: map[string][]byte{"token": []byte(token), "tls.crt": clientCert, "tls.key": clientKey},
			wantReason: cluster.ReasonInvalidSecret, wantErr: "keep exactly one credential"},
		{name: "key of another certificate", data: map[string][]byte{"tls.crt": clientCert, "tls.key": mustSecondKey(t, clientCA)},
			wantReason: cluster.ReasonInvalidSecret, wantErr: "not a usable certificate and key"},
		{name: "ca.crt not PEM", data: map[string][]byte{"token": []byte(token), "ca.crt": []byte("not a certificate")},
			wantReason: cluster.ReasonInvalidCAData, wantErr: `"ca.crt" of credential Secret kube-gateway/member-a-cred`},
		{name: "ca.crt PEM of garbage", data: map[string][]byte{"token": []byte(token), "ca.crt": garbageCA},
			wantReason: cluster.ReasonInvalidCAData, wantErr: "not a PEM bundle"},
		{name: "caData garbage (validation bypassed)", mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.CAData = garbageCA },
			data: map[string][]byte{"token": []byte(token)}, wantReason: cluster.ReasonInvalidCAData, wantErr: "spec.clientConfig.caData"},
		{name: "insecure with ca.crt", mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.Insecure = true },
			data: map[string][]byte{"token": []byte(token), "ca.crt": serverCA.PEM}, wantReason: cluster.ReasonInvalidConfiguration, wantErr: "either on or off"},
		{name: "proxy username without password", mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ProxyURL = "http://127.0.0.1:3128" },
			data: map[string][]byte{"token": []byte(token), "proxy-username": []byte("gw")}, wantReason: cluster.ReasonInvalidSecret,
			wantErr: `has only one of "proxy-username" and "proxy-password"`},
		{name: "proxy password without username", mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ProxyURL = "http://127.0.0.1:3128" },
			data: map[string][]byte{"token": []byte(token), "proxy-password": []byte(token + "-proxy")}, wantReason: cluster.ReasonInvalidSecret,
			wantErr: `has only one of "proxy-username" and "proxy-password"`},
		{name: "empty proxy password", mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ProxyURL = "socks5://127.0.0.1:1080" },
			data: map[string][]byte{"token": []byte(token), "proxy-username": []byte("gw"), "proxy-password": {}}, wantReason: cluster.ReasonInvalidSecret,
			wantErr: `"proxy-password" of credential Secret kube-gateway/member-a-cred is empty`},
		{name: "proxy-ca.crt with an http proxy", mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ProxyURL = "http://127.0.0.1:3128" },
			data: map[string][]byte{"token": []byte(token), "proxy-ca.crt": serverCA.PEM}, wantReason: cluster.ReasonInvalidConfiguration,
			wantErr: "not an https URL"},
		{name: "proxy-ca.crt not PEM", mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ProxyURL = "https://127.0.0.1:3128" },
			data: map[string][]byte{"token": []byte(token), "proxy-ca.crt": garbageCA}, wantReason: cluster.ReasonInvalidCAData,
			wantErr: `"proxy-ca.crt" of credential Secret kube-gateway/member-a-cred is not a PEM bundle`},
		{name: "proxyURL with user info (validation bypassed)", mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
			uc.Spec.ClientConfig.ProxyURL = "http://gw:" + token + "@127.0.0.1:3128"
		}, data: map[string][]byte{"token": []byte(token)}, wantReason: cluster.ReasonInvalidConfiguration, wantErr: "spec.clientConfig.proxyURL must not contain user info"},
		{name: "unknown flow-control schema", mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
			uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{Name: "p", Rules: []gatewayv1alpha1.DispatchPolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}}, FlowControlSchemaName: "none"}}
		}, data: map[string][]byte{"token": []byte(token)}, wantReason: cluster.ReasonInvalidConfiguration, wantErr: `unknown flow-control schema "none"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uc := upstreamCluster("https://127.0.0.1:1")
			if tt.mutate != nil {
				tt.mutate(uc)
			}
			var s *corev1.Secret
			if tt.data != nil {
				s = secret(tt.data)
			}
			c, err := cluster.Compile(uc, s, nil, nil, cluster.Options{})
			if err == nil {
				c.Release(nil)
				t.Fatal("Compile succeeded")
			}
			var ce *cluster.ConfigError
			if !errors.As(err, &ce) || ce.Reason != tt.wantReason || cluster.ConfigErrorReason(err) != tt.wantReason {
				t.Fatalf("error %T %v, want a ConfigError with reason %s", err, err, tt.wantReason)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tt.wantErr)
			}
			for _, secretData := range [][]byte{[]byte(token), clientKey, []byte("bm90IGEgY2VydGlmaWNhdGU")} {
				if strings.Contains(err.Error(), string(secretData)) {
					t.Fatalf("error %q reveals data of the Secret", err)
				}
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Fatalf("error %q reveals a key", err)
			}
		})
	}
	if got := cluster.ConfigErrorReason(errors.New("other")); got != cluster.ReasonInvalidConfiguration {
		t.Fatalf("reason of a plain error: %s", got)
	}
}

// TestTransportsPerServer checks that the servers of a cluster share their
// pooled transports, a connection each: a change of spec.servers keeps them,
// a removed server has its idle connections closed at once (and with them
// those of the servers that stay, which reopen on their next request), a
// change that leaves the credential alone keeps every connection, and a new
// credential generation builds new transports.
func TestTransportsPerServer(t *testing.T) {
	serverCA := testca.New(t, "server-ca")
	m1, m2 := newMember(t, serverCA, serverCA), newMember(t, serverCA, serverCA)
	sec := secret(map[string][]byte{"token": []byte(token), "ca.crt": serverCA.PEM})
	sec.UID, sec.ResourceVersion = "uid-1", "1"

	both, err := cluster.Compile(upstreamCluster(m1.URL, m2.URL), sec, nil, nil, cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if both.Transports(both.Endpoints[0]) != both.Transports(both.Endpoints[1]) {
		t.Fatal("two servers of one cluster have transports of their own")
	}
	for _, m := range []*member{m1, m2} {
		if err := get(t, both, m.URL); err != nil {
			t.Fatal(err)
		}
		if accepted, open := m.conns(); accepted != 1 || open != 1 {
			t.Fatalf("%s: %d connections accepted, %d open; want 1 and 1", m.URL, accepted, open)
		}
	}

	// m2 leaves spec.servers: its connection closes, and so does m1's idle
	// one, which the next request reopens.
	one, err := cluster.Compile(upstreamCluster(m1.URL), sec, both, nil, cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if one.Endpoints[0] != both.Endpoints[0] || one.Transports(one.Endpoints[0]) != both.Transports(both.Endpoints[0]) {
		t.Error("the server that stayed got a new endpoint or new transports")
	}
	both.Release(one)
	waitConns(t, m2, 0)
	waitConns(t, m1, 0)
	if err := get(t, one, m1.URL); err != nil {
		t.Fatal(err)
	}
	if accepted, open := m1.conns(); accepted != 2 || open != 1 {
		t.Errorf("%s after m2 left: %d connections accepted, %d open; want 2 and 1", m1.URL, accepted, open)
	}

	// A new Secret version with the same credential (a label changed): the
	// same transports, the connection stays.
	sec = sec.DeepCopy()
	sec.ResourceVersion = "2"
	sec.Labels = map[string]string{"touched": "yes"}
	relabeled, err := cluster.Compile(upstreamCluster(m1.URL), sec, one, nil, cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if relabeled.Transports(relabeled.Endpoints[0]) != one.Transports(one.Endpoints[0]) {
		t.Fatal("a Secret version with the same credential replaced the transports")
	}
	one.Release(relabeled)
	one = relabeled
	if err := get(t, one, m1.URL); err != nil {
		t.Fatal(err)
	}
	if accepted, open := m1.conns(); accepted != 2 || open != 1 {
		t.Errorf("%s after a relabeled Secret: %d connections accepted, %d open; want 2 and 1", m1.URL, accepted, open)
	}

	// A new credential: new transports, the old connection closes.
	sec = sec.DeepCopy()
	sec.ResourceVersion = "3"
	sec.Data = maps.Clone(sec.Data)
	sec.Data["token"] = []byte(token + "-rotated")
	rotated, err := cluster.Compile(upstreamCluster(m1.URL), sec, one, nil, cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Transports(rotated.Endpoints[0]) == one.Transports(one.Endpoints[0]) {
		t.Fatal("a new credential kept the old transports")
	}
	one.Release(rotated)
	waitConns(t, m1, 0)
	if err := get(t, rotated, m1.URL); err != nil {
		t.Fatal(err)
	}
	if accepted, open := m1.conns(); accepted != 3 || open != 1 {
		t.Errorf("%s after rotation: %d connections accepted, %d open; want 3 and 1", m1.URL, accepted, open)
	}

	// Deleted: nothing stays open.
	rotated.Release(nil)
	waitConns(t, m1, 0)
}

// waitConns waits until m has want open connections.
func waitConns(t *testing.T, m *member, want int) {
	t.Helper()
	var open int
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, open = m.conns()
		return open == want, nil
	})
	if err != nil {
		t.Fatalf("%s has %d open connections, want %d", m.URL, open, want)
	}
}

// Healthy servers take the requests while any is healthy; with none healthy,
// every enabled server does (the member's own answer beats the gateway's 503),
// but never the one that just failed the request.
func TestPickWhenNoServerIsHealthy(t *testing.T) {
	uc := upstreamCluster("https://192.0.2.10:6443", "https://192.0.2.11:6443")
	c, err := cluster.Compile(uc, secret(map[string][]byte{"token": []byte(token)}), nil, nil, cluster.Options{})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	route := c.Route(&request.Attributes{Verb: "get", Path: "/version"})
	a, b := c.Endpoints[0], c.Endpoints[1]

	a.SetHealthy(false)
	for range 4 {
		if got := route.Pick(nil); got != b {
			t.Fatalf("one healthy server: Pick() = %v, want %v", got.URL, b.URL)
		}
	}
	b.SetHealthy(false)
	seen := map[string]bool{}
	for range 20 {
		e := route.Pick(nil)
		if e == nil {
			t.Fatal("no healthy server: Pick() = nil, want any enabled server")
		}
		seen[e.URL.Host] = true
	}
	if len(seen) != 2 {
		t.Errorf("no healthy server: picked %v, want both servers in turn", seen)
	}
	if got := route.Pick(a); got != b {
		t.Errorf("no healthy server, a just failed: Pick(a) = %v, want %v", got, b.URL)
	}
	one := upstreamCluster("https://192.0.2.10:6443")
	c1, err := cluster.Compile(one, secret(map[string][]byte{"token": []byte(token)}), nil, nil, cluster.Options{})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	only := c1.Endpoints[0]
	only.SetHealthy(false)
	r1 := c1.Route(&request.Attributes{Verb: "get", Path: "/version"})
	if got := r1.Pick(only); got != nil {
		t.Errorf("the only server just failed: Pick = %v, want nil (no other server to try)", got.URL)
	}
}

// A server's status is Unknown until its health checker judges it, and a
// recompilation that keeps the server keeps what was judged.
func TestServersUnknownUntilJudged(t *testing.T) {
	member := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(member.Close)
	uc := upstreamCluster(member.URL, "https://192.0.2.11:6443")
	uc.Spec.Servers[1].Disabled = true
	uc.Spec.ClientConfig.Insecure = true
	cred := secret(map[string][]byte{"token": []byte(token)})
	judged := make(chan health.ServerHealth, 10)
	onTransition := func(_ *cluster.Cluster, h health.ServerHealth) { judged <- h }
	c, err := cluster.Compile(uc, cred, nil, onTransition, cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	servers := c.Servers()
	if s := servers[0]; !s.Unknown || !s.Healthy || s.Reason != health.ReasonNotChecked {
		t.Errorf("server before its first probe: %+v, want Unknown and taking requests", s)
	}
	if s := servers[1]; s.Unknown || s.Healthy || s.Reason != gatewayv1alpha1.ServerReasonDisabled {
		t.Errorf("disabled server: %+v", s)
	}

	ctx, cancel := context.WithCancel(context.Background())
	sched := health.NewScheduler(clock.RealClock{})
	scheduling := make(chan struct{})
	go func() { sched.Run(ctx); close(scheduling) }()
	c.Health.Start(ctx, sched)
	defer func() { cancel(); <-scheduling; <-c.Health.Done() }()
	select {
	case h := <-judged:
		if h.Endpoint != member.URL || !h.Healthy || h.Reason != health.ReasonProbeSucceeded {
			t.Fatalf("transition %+v", h)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no transition after the first probe")
	}
	if s := c.Servers()[0]; s.Unknown || !s.Healthy || s.Reason != health.ReasonProbeSucceeded {
		t.Errorf("server after its first probe: %+v", s)
	}

	uc.Generation++
	uc.Spec.DispatchPolicies = nil // any spec change recompiles
	next, err := cluster.Compile(uc, cred, c, onTransition, cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s := next.Servers()[0]; s.Unknown || !s.Healthy {
		t.Errorf("server after a recompilation: %+v, want what was judged before", s)
	}
}

// With ProbeOwnConnections the probes of an idle server open connections of
// their own and leave none open; while the server serves a request they ride
// on its pooled connection and open none.
func TestProbeConnectionsFollowUse(t *testing.T) {
	serverCA := testca.New(t, "server-ca")
	m := newMember(t, serverCA, serverCA)
	uc := upstreamCluster(m.URL)
	uc.Spec.HealthCheck = &gatewayv1alpha1.HealthCheck{IntervalSeconds: 1}
	var count gwtransport.ProbeCount
	c, err := cluster.Compile(uc, secret(map[string][]byte{"token": []byte(token), "ca.crt": serverCA.PEM}), nil, nil,
		cluster.Options{ProbeOwnConnections: true, ProbeCount: &count})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sched := health.NewScheduler(clock.RealClock{})
	scheduling := make(chan struct{})
	go func() { sched.Run(ctx); close(scheduling) }()
	c.Health.Start(ctx, sched)
	defer func() { cancel(); <-scheduling; <-c.Health.Done(); c.Release(nil) }()
	requests := func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.reqs)
	}
	waitRequests := func(n int) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return requests() >= n, nil
		})
		if err != nil {
			t.Fatalf("%d requests reached the member, want %d", requests(), n)
		}
	}

	waitRequests(2) // two probes
	waitConns(t, m, 0)
	if accepted, _ := m.conns(); accepted < 2 {
		t.Fatalf("two probes of an idle server over %d connections, want one each", accepted)
	}
	pooledBefore, ownBefore := count.Sent()
	if pooledBefore != 0 || ownBefore < 2 {
		t.Errorf("probes of an idle server counted over pooled and own connections: %d and %d", pooledBefore, ownBefore)
	}

	done := c.Endpoints[0].Start() // a request in flight, say a watch
	defer done()
	if err := get(t, c, m.URL); err != nil {
		t.Fatal(err)
	}
	before, _ := m.conns()
	waitRequests(requests() + 2) // two probes more
	if accepted, open := m.conns(); accepted != before || open != 1 {
		t.Errorf("probes of a busy server: %d connections accepted (%d before them), %d open; want none more and the pooled one", accepted, before, open)
	}
	if pooled, _ := count.Sent(); pooled < 2 {
		t.Errorf("%d probes of a busy server counted over the pooled connection, want 2 or more", pooled)
	}
}
