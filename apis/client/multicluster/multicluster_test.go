package multicluster

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const proxyA = "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-a/proxy"

func TestProxyPath(t *testing.T) {
	if got := ProxyPath("member-a"); got != proxyA {
		t.Fatalf("ProxyPath = %q, want %q", got, proxyA)
	}
	// Invalid names are still escaped, never path segments of their own.
	if got, want := ProxyPath("a/b"), "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/a%2Fb/proxy"; got != want {
		t.Fatalf("ProxyPath(a/b) = %q, want %q", got, want)
	}
}

func TestValidateClusterName(t *testing.T) {
	for _, ok := range []string{"member-a", "a", "a.b.c", "0abc", strings.Repeat("a", 253)} {
		if err := ValidateClusterName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "A", "a/b", "..", "../x", "a b", "a%2Fb", "-a", "a_b", "a?b", strings.Repeat("a", 254)} {
		if err := ValidateClusterName(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestConfigForHost(t *testing.T) {
	ca := []byte("not parsed here")
	for _, tc := range []struct {
		name string
		hub  rest.Config
		want string
	}{
		{"url", rest.Config{Host: "https://hub.example:6443"}, "https://hub.example:6443" + proxyA},
		{"trailing slash", rest.Config{Host: "https://hub.example:6443/"}, "https://hub.example:6443" + proxyA},
		{"host path prefix", rest.Config{Host: "https://hub.example/k8s/clusters/c1"}, "https://hub.example/k8s/clusters/c1" + proxyA},
		{"escaped host path prefix", rest.Config{Host: "https://hub.example/a%2Fb/"}, "https://hub.example/a%2Fb" + proxyA},
		{"host:port with TLS", rest.Config{Host: "hub.example:6443", TLSClientConfig: rest.TLSClientConfig{CAData: ca}}, "https://hub.example:6443" + proxyA},
		{"host:port insecure", rest.Config{Host: "hub.example:6443", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, "https://hub.example:6443" + proxyA},
		{"host:port without TLS", rest.Config{Host: "127.0.0.1:8080"}, "http://127.0.0.1:8080" + proxyA},
		{"http url", rest.Config{Host: "http://127.0.0.1:8080"}, "http://127.0.0.1:8080" + proxyA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub := tc.hub
			hub.BearerToken = "hub-token"
			before := hub.Host
			cfg, err := ConfigFor(&hub, "member-a")
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.want {
				t.Fatalf("Host = %q, want %q", cfg.Host, tc.want)
			}
			if hub.Host != before {
				t.Fatalf("the hub config was modified: Host %q", hub.Host)
			}
			if cfg.BearerToken != "hub-token" || string(cfg.CAData) != string(hub.CAData) || cfg.Insecure != hub.Insecure {
				t.Fatalf("credentials or TLS settings not copied: %+v", cfg)
			}
			if cfg == &hub {
				t.Fatal("ConfigFor returned the hub config itself")
			}
		})
	}
}

func TestConfigForErrors(t *testing.T) {
	hub := &rest.Config{Host: "https://hub.example"}
	for _, name := range []string{"", "Member-A", "a/b", "..", "a%2Fb", "a?b"} {
		if cfg, err := ConfigFor(hub, name); err == nil {
			t.Errorf("cluster %q: got Host %q, want an error", name, cfg.Host)
		}
	}
	for _, h := range []*rest.Config{nil, {}, {Host: "https://hub.example/?a=b"}, {Host: "https://hub.example/#x"}, {Host: "hub.example/path"}} {
		if cfg, err := ConfigFor(h, "member-a"); err == nil {
			t.Errorf("hub %+v: got Host %q, want an error", h, cfg.Host)
		}
	}
}

// fakeServer answers like a hub for the few calls the tests make and records
// every request URI (escaped path and query) and Authorization header.
type fakeServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string
	auth     []string
}

func newFakeServer(t *testing.T, tls bool) *fakeServer {
	f := &fakeServer{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, r.URL.RequestURI())
		f.auth = append(f.auth, r.Header.Get("Authorization"))
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		switch {
		case strings.HasSuffix(r.URL.Path, "/version"):
			_ = enc.Encode(version.Info{GitVersion: "v1.99.0-" + r.URL.Path})
		case r.URL.Query().Get("watch") == "true":
			obj, _ := json.Marshal(corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "watched"}})
			_ = enc.Encode(metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: obj}})
		case strings.HasSuffix(r.URL.Path, "/api/v1/namespaces"):
			_ = enc.Encode(corev1.NamespaceList{
				TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "NamespaceList"},
				Items:    []corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "seen-at-" + r.URL.Path}}},
			})
		default:
			http.NotFound(w, r)
		}
	})
	if tls {
		f.Server = httptest.NewTLSServer(h)
	} else {
		f.Server = httptest.NewServer(h)
	}
	t.Cleanup(f.Close)
	return f
}

func (f *fakeServer) take() (requests, auth []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	requests, auth = f.requests, f.auth
	f.requests, f.auth = nil, nil
	return requests, auth
}

// hubConfig is a config for the fake server as a verified TLS hub.
func (f *fakeServer) hubConfig() *rest.Config {
	cfg := &rest.Config{Host: f.URL, BearerToken: "hub-token", QPS: -1}
	if f.TLS != nil {
		cfg.CAData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw})
	}
	return cfg
}

func TestConfigForWithClients(t *testing.T) {
	srv := newFakeServer(t, true)
	cfg, err := ConfigFor(srv.hubConfig(), "member-a")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "seen-at-"+proxyA+"/api/v1/namespaces" {
		t.Fatalf("list: %+v", list.Items)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != "v1.99.0-"+proxyA+"/version" {
		t.Fatalf("version: %+v", v)
	}
	requests, auth := srv.take()
	for i, r := range requests {
		requests[i], _, _ = strings.Cut(r, "?")
	}
	want := []string{proxyA + "/api/v1/namespaces", proxyA + "/version"}
	if strings.Join(requests, " ") != strings.Join(want, " ") {
		t.Fatalf("requests %q, want %q", requests, want)
	}
	for _, a := range auth {
		if a != "Bearer hub-token" {
			t.Fatalf("Authorization %q, want the hub token", a)
		}
	}
}

func TestWithCluster(t *testing.T) {
	ctx := context.Background()
	if name, ok := ClusterFrom(ctx); ok || name != "" {
		t.Fatalf("empty context: %q %v", name, ok)
	}
	a := WithCluster(ctx, "member-a")
	if name, ok := ClusterFrom(a); !ok || name != "member-a" {
		t.Fatalf("got %q %v", name, ok)
	}
	if name, ok := ClusterFrom(WithCluster(a, "")); ok || name != "" {
		t.Fatalf("cleared: %q %v", name, ok)
	}
	if name, ok := ClusterFrom(WithCluster(a, Local)); !ok || name != Local {
		t.Fatalf("local: %q %v", name, ok)
	}
}

func TestRoutingConfigRoutesByContext(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prefix string // path prefix of the hub Host
	}{
		{"no host prefix", ""},
		{"host prefix", "/k8s/clusters/c1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer(t, true)
			hub := srv.hubConfig()
			hub.Host += tc.prefix
			cfg := RoutingConfig(hub)
			if hub.WrapTransport != nil {
				t.Fatal("RoutingConfig modified the hub config")
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			bg := context.Background()
			for _, call := range []struct {
				ctx  context.Context
				want string
			}{
				{bg, tc.prefix + "/api/v1/namespaces"},
				{WithCluster(bg, "member-a"), tc.prefix + proxyA + "/api/v1/namespaces"},
				{WithCluster(bg, Local), tc.prefix + "/api/v1/namespaces"},
				{WithCluster(WithCluster(bg, "member-a"), ""), tc.prefix + "/api/v1/namespaces"},
				{WithCluster(bg, "member-b"), tc.prefix + "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-b/proxy/api/v1/namespaces"},
			} {
				list, err := cs.CoreV1().Namespaces().List(call.ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if len(list.Items) != 1 || list.Items[0].Name != "seen-at-"+call.want {
					t.Fatalf("list answered by %+v, want %s", list.Items, call.want)
				}
			}
			// Discovery and watch take the same route.
			dc, err := discovery.NewDiscoveryClientForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if v, err := dc.RESTClient().Get().AbsPath("/version").Do(WithCluster(bg, "member-a")).Raw(); err != nil || !strings.Contains(string(v), tc.prefix+proxyA+"/version") {
				t.Fatalf("version through member-a: %s %v", v, err)
			}
			ctx, cancel := context.WithTimeout(WithCluster(bg, "member-a"), 10*time.Second)
			defer cancel()
			w, err := cs.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case ev := <-w.ResultChan():
				if ns, ok := ev.Object.(*corev1.Namespace); !ok || ns.Name != "watched" {
					t.Fatalf("watch event %+v", ev)
				}
			case <-ctx.Done():
				t.Fatal("no watch event")
			}
			w.Stop()
			requests, auth := srv.take()
			if last := requests[len(requests)-1]; !strings.HasPrefix(last, tc.prefix+proxyA+"/api/v1/namespaces?") || !strings.Contains(last, "watch=true") {
				t.Fatalf("watch request %q", last)
			}
			for _, a := range auth {
				if a != "Bearer hub-token" {
					t.Fatalf("Authorization %q, want the hub token", a)
				}
			}
		})
	}
}

func TestRoutingConfigRefusesInvalidClusters(t *testing.T) {
	srv := newFakeServer(t, false)
	cs, err := kubernetes.NewForConfig(RoutingConfig(srv.hubConfig()))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a/b", "..", "Member-A", "a%2Fb"} {
		_, err := cs.CoreV1().Namespaces().List(WithCluster(context.Background(), name), metav1.ListOptions{})
		if err == nil || !strings.Contains(err.Error(), "invalid cluster name") {
			t.Errorf("cluster %q: err %v, want an invalid cluster name", name, err)
		}
	}
	if requests, _ := srv.take(); len(requests) != 0 {
		t.Fatalf("requests with invalid cluster names were sent: %q", requests)
	}
}

// capture is a RoundTripper that keeps the request it was given.
type capture struct{ req *http.Request }

func (c *capture) RoundTrip(req *http.Request) (*http.Response, error) {
	c.req = req
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

func TestRoutingRoundTripperPaths(t *testing.T) {
	for _, tc := range []struct {
		name, prefix, url string
		wantPath, wantRaw string // wantRaw: the escaped path sent
	}{
		{"plain", "", "https://hub/api/v1/namespaces/alice/pods?limit=1", "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-a/proxy/api/v1/namespaces/alice/pods", proxyA + "/api/v1/namespaces/alice/pods"},
		{"escaped slash kept", "", "https://hub/api/v1/namespaces/alice/configmaps/a%2Fb", proxyA + "/api/v1/namespaces/alice/configmaps/a/b", proxyA + "/api/v1/namespaces/alice/configmaps/a%2Fb"},
		{"host prefix", "/pre", "https://hub/pre/version", "/pre" + proxyA + "/version", "/pre" + proxyA + "/version"},
		{"host prefix alone", "/pre", "https://hub/pre", "/pre" + proxyA, "/pre" + proxyA},
		{"escaped host prefix", "/p%2Fq", "https://hub/p%2Fq/api/v1/x%2Fy", "/p/q" + proxyA + "/api/v1/x/y", "/p%2Fq" + proxyA + "/api/v1/x%2Fy"},
		{"root", "", "https://hub/", proxyA + "/", proxyA + "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := &capture{}
			rt := NewRoutingRoundTripper(tc.prefix, next)
			req, err := http.NewRequestWithContext(WithCluster(context.Background(), "member-a"), http.MethodGet, tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			orig := *req.URL
			if _, err := rt.RoundTrip(req); err != nil {
				t.Fatal(err)
			}
			got := next.req.URL
			if got.Path != tc.wantPath || got.EscapedPath() != tc.wantRaw {
				t.Fatalf("sent Path %q escaped %q, want %q and %q", got.Path, got.EscapedPath(), tc.wantPath, tc.wantRaw)
			}
			u, _ := url.Parse(tc.url)
			if got.RawQuery != u.RawQuery || got.Host != u.Host {
				t.Fatalf("query or host changed: %s", got)
			}
			if *req.URL != orig || next.req == req {
				t.Fatalf("the caller's request was modified: %s", req.URL)
			}
		})
	}
}

func TestRoutingRoundTripperOutsideThePrefix(t *testing.T) {
	next := &capture{}
	rt := NewRoutingRoundTripper("/pre", next)
	for _, u := range []string{"https://hub/other/api", "https://hub/prefix/api"} {
		req, _ := http.NewRequestWithContext(WithCluster(context.Background(), "member-a"), http.MethodGet, u, nil)
		if _, err := rt.RoundTrip(req); err == nil {
			t.Errorf("%s: sent as %s", u, next.req.URL)
		}
	}
	// Without a cluster nothing is checked or changed.
	req, _ := http.NewRequest(http.MethodGet, "https://hub/other/api", nil)
	if _, err := rt.RoundTrip(req); err != nil || next.req != req {
		t.Fatalf("request without a cluster: %v, sent %v", err, next.req.URL)
	}
}
