package upstreamcluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	goruntime "runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	restclient "k8s.io/client-go/rest"
	basecompatibility "k8s.io/component-base/compatibility"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/chain"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/cluster/clustertest"
	"github.com/kubewharf/kube-gateway/proxy/controller/clusterset"
	"github.com/kubewharf/kube-gateway/proxy/forward"
	"github.com/kubewharf/kube-gateway/proxy/handler"
	"github.com/kubewharf/kube-gateway/proxy/metrics"
	gatewayopenapi "github.com/kubewharf/kube-gateway/registry/upstreamcluster/openapi"
)

// hostileSeen is one request as a member (or a bystander server) saw it.
type hostileSeen struct {
	host, path, requestURI, rawQuery, impersonateUser string
}

// hostileSink records every request it serves; handle, if set, answers, else
// it answers 200 "sink".
type hostileSink struct {
	*httptest.Server
	handle func(w http.ResponseWriter, r *http.Request)
	mu     sync.Mutex
	seen   []hostileSeen
}

func (s *hostileSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.seen = append(s.seen, hostileSeen{r.Host, r.URL.Path, r.RequestURI, r.URL.RawQuery, r.Header.Get("Impersonate-User")})
	s.mu.Unlock()
	if s.handle != nil {
		s.handle(w, r)
		return
	}
	_, _ = io.WriteString(w, "sink")
}

func (s *hostileSink) all() []hostileSeen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hostileSeen(nil), s.seen...)
}

func (s *hostileSink) reset() {
	s.mu.Lock()
	s.seen = nil
	s.mu.Unlock()
}

func newHostileSink(t *testing.T, tls bool, handle func(w http.ResponseWriter, r *http.Request)) *hostileSink {
	t.Helper()
	s := &hostileSink{handle: handle}
	s.Server = httptest.NewUnstartedServer(s)
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	if tls {
		s.EnableHTTP2 = true
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

// hostileObjects is the main upstreamclusters storage of the test server: a
// getter that knows every name (Connect asks it only for unknown clusters).
type hostileObjects struct{}

func (hostileObjects) New() runtime.Object     { return &gatewayv1alpha1.UpstreamCluster{} }
func (hostileObjects) Destroy()                {}
func (hostileObjects) NamespaceScoped() bool   { return false }
func (hostileObjects) GetSingularName() string { return "upstreamcluster" }
func (hostileObjects) Get(_ context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	return &gatewayv1alpha1.UpstreamCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil
}

// hostileClusters knows one compiled cluster, member-a, and records lookups.
type hostileClusters struct {
	c       *cluster.Cluster
	mu      sync.Mutex
	lookups []string
}

func (h *hostileClusters) Lookup(name string) (*cluster.Cluster, error) {
	h.mu.Lock()
	h.lookups = append(h.lookups, name)
	h.mu.Unlock()
	if name != h.c.Name {
		return nil, clusterset.ErrUnknown
	}
	return h.c, nil
}

// hostileGateway is a real k8s.io/apiserver generic server, built like the
// binary's (proxy paths on the short chain of proxy/chain, everything else on
// DefaultBuildHandlerChain), serving upstreamclusters/proxy with the data
// plane's entry (proxy/handler) and ProxyREST installed as the binary does.
type hostileGateway struct {
	*httptest.Server
	cluster  *cluster.Cluster
	clusters *hostileClusters
	mu       sync.Mutex
	authz    []authorizer.Attributes
}

func newHostileGateway(t *testing.T, member *hostileSink) *hostileGateway {
	t.Helper()
	c := clustertest.Compile(t, "member-a", "gw-token", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: member.Certificate().Raw}), nil, member.URL)

	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	scheme.AddUnversionedTypes(schema.GroupVersion{Group: "", Version: "v1"},
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
	codecs := serializer.NewCodecFactory(scheme)

	g := &hostileGateway{cluster: c, clusters: &hostileClusters{c: c}}
	cfg := genericapiserver.NewConfig(codecs)
	cfg.ExternalAddress = "127.0.0.1:443"
	cfg.PublicAddress = net.ParseIP("127.0.0.1")
	cfg.LoopbackClientConfig = &restclient.Config{}
	cfg.EffectiveVersion = basecompatibility.NewEffectiveVersionFromString("1.37", "", "")
	cfg.Authentication.Authenticator = authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
		return &authenticator.Response{User: &user.DefaultInfo{Name: "alice", Groups: []string{"dev", user.AllAuthenticated}}}, true, nil
	})
	cfg.Authorization.Authorizer = authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		g.mu.Lock()
		g.authz = append(g.authz, a)
		g.mu.Unlock()
		return authorizer.DecisionAllow, "", nil
	})
	namer := openapi.NewDefinitionNamer(scheme)
	cfg.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(gatewayopenapi.GetOpenAPIDefinitions, namer)
	cfg.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(gatewayopenapi.GetOpenAPIDefinitions, namer)
	cfg.LongRunningFunc = genericfilters.BasicLongRunningRequestCheck(sets.NewString("watch"), sets.NewString("proxy"))
	proxy := handler.New(handler.Config{Clusters: g.clusters, Objects: hostileObjects{}, Forwarder: forward.NewForwarder(metrics.New()), Scheme: scheme, Serializer: codecs})
	cfg.BuildHandlerChainFunc = func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		return chain.New(genericapiserver.DefaultBuildHandlerChain(apiHandler, c), proxy.Serve, c, chain.Options{})
	}
	s, err := cfg.Complete(nil).New("kube-gateway-hostile-test", genericapiserver.NewEmptyDelegate())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	info := genericapiserver.NewDefaultAPIGroupInfo(gatewayv1alpha1.GroupName, scheme, runtime.NewParameterCodec(scheme), codecs)
	info.VersionedResourcesStorageMap[gatewayv1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"upstreamclusters":       hostileObjects{},
		"upstreamclusters/proxy": ProxyREST{},
	}
	if err := s.InstallAPIGroup(&info); err != nil {
		t.Fatalf("InstallAPIGroup: %v", err)
	}
	g.Server = httptest.NewUnstartedServer(s.Handler)
	g.Config.ErrorLog = log.New(io.Discard, "", 0)
	g.Start()
	t.Cleanup(g.Close)
	return g
}

// take returns and forgets the names the authorizer was asked about (for
// upstreamclusters/proxy) and the names looked up in the compiled clusters.
func (g *hostileGateway) take() (authorized, lookedUp []string) {
	g.mu.Lock()
	for _, a := range g.authz {
		authorized = append(authorized, a.GetResource()+"/"+a.GetSubresource()+":"+a.GetName())
	}
	g.authz = nil
	g.mu.Unlock()
	g.clusters.mu.Lock()
	lookedUp, g.clusters.lookups = g.clusters.lookups, nil
	g.clusters.mu.Unlock()
	return authorized, lookedUp
}

// rawGet sends target verbatim as the request-target of a GET with the given
// Host header, so that no client library cleans or re-encodes it.
func rawGet(t *testing.T, addr, target, host string) (int, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, host); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the response to %.100q: %v", target, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

const (
	hostileAPI    = "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/"
	hostilePrefix = hostileAPI + "member-a/proxy"
)

// TestHostileProxyPaths sends each hostile sub-path form, byte for byte, through
// a real k8s.io/apiserver handler chain (request info, authentication,
// authorization, chain.Split that finds the sub-path as the generic Connect
// handler would, proxy/handler, forward); a path that took the generic chain
// to ProxyREST.Connect would get a 500.
// Each either is refused before anything is sent, or reaches the configured
// member endpoint only, with the member's Host, at a path under the member's
// root without dot or empty segments. The cluster looked up is always the one
// the authorizer was asked about, and a bystander server named in the paths is
// never contacted.
func TestHostileProxyPaths(t *testing.T) {
	member := newHostileSink(t, true, nil)
	bystander := newHostileSink(t, false, nil)
	g := newHostileGateway(t, member)
	addr := strings.TrimPrefix(g.URL, "http://")
	memberHost := strings.TrimPrefix(member.URL, "https://")
	by := strings.TrimPrefix(bystander.URL, "http://")
	long := "/" + strings.Repeat("a", 64<<10)

	const refused = "" // wantPath of a request the member must not see
	tests := []struct {
		name     string
		target   string // the request-target, verbatim
		wantCode int
		wantPath string // decoded, as the member sees it
		wantAuth string // the name authorized and looked up; "" for none
		why      string
	}{
		{"plain", hostilePrefix + "/api", 200, "/api", "member-a", "baseline"},
		{"no sub-path", hostilePrefix, 200, "/", "member-a", "the member's root"},
		{"dot-dot", hostilePrefix + "/..", 400, refused, "member-a", "request.Parse: .. segment"},
		{"dot-dot then a name", hostilePrefix + "/../x", 400, refused, "member-a", ".. segment"},
		{"%2e%2e", hostilePrefix + "/%2e%2e", 400, refused, "member-a", "the apiserver decodes it to .. before the Connecter: .. segment"},
		{"%2E%2E/", hostilePrefix + "/%2E%2E/", 400, refused, "member-a", ".. segment"},
		{".%2e inside", hostilePrefix + "/a/.%2e/b", 400, refused, "member-a", ".. segment once decoded"},
		{"%2F alone", hostilePrefix + "/%2F", 200, "/", "member-a", "decodes to proxy//: request info trims the slashes, the member's root"},
		{"%2F inside", hostilePrefix + "/a%2Fb", 200, "/a/b", "member-a", "decoded by the apiserver: two segments, still under the member's root"},
		{"%2F..%2F", hostilePrefix + "/a%2F..%2F..%2Fb", 400, refused, "member-a", "decoded to /a/../../b"},
		{"//", hostilePrefix + "//", 200, "/", "member-a", "request info trims the slashes: the member's root"},
		{"//x", hostilePrefix + "//x", 200, "/x", "member-a", "one leading empty segment is dropped by the apiserver's subpath join: /x on the member"},
		{"///x", hostilePrefix + "///x", 400, refused, "member-a", "two empty segments leave one: refused"},
		{"/a//b", hostilePrefix + "/a//b", 400, refused, "member-a", "empty segment"},
		{"empty segments at the end", hostilePrefix + "/a//", 200, "/a/", "member-a", "request info trims trailing slashes and the subpath keeps one: /a/ on the member"},
		{"trailing slash", hostilePrefix + "/a/", 200, "/a/", "member-a", "kept, as kubectl get --raw /api/ expects"},
		{"/.", hostilePrefix + "/.", 400, refused, "member-a", ". segment"},
		{"/./x", hostilePrefix + "/./x", 400, refused, "member-a", ". segment"},
		{"/a/%2e/b", hostilePrefix + "/a/%2e/b", 400, refused, "member-a", ". segment once decoded"},
		{"absolute URL in the sub-path", hostilePrefix + "/http://" + by + "/x", 400, refused, "member-a", "the // of the scheme is an empty segment"},
		{"absolute https URL in the sub-path", hostilePrefix + "/https://127.0.0.1:1/x", 400, refused, "member-a", "empty segment"},
		{"escaped absolute URL in the sub-path", hostilePrefix + "/http:%2F%2F" + by + "%2Fx", 400, refused, "member-a", "decoded: empty segment"},
		{"absolute-form request-target", "http://" + by + hostilePrefix + "/x", 200, "/x", "member-a", "the Go server takes the path of an absolute-form target; the member's host is used, never the target's"},
		{"absolute-form https request-target", "https://127.0.0.1:1" + hostilePrefix + "/x", 200, "/x", "member-a", "as above"},
		{"@ in the sub-path", hostilePrefix + "/@evil.example/x", 200, "/@evil.example/x", "member-a", "an ordinary path character: the host stays the endpoint's"},
		{"@ of the bystander", hostilePrefix + "/@" + by + "/x", 200, "/@" + by + "/x", "member-a", "an ordinary path character"},
		{"%3F", hostilePrefix + "/a%3Fb=c", 200, "/a?b=c", "member-a", "part of the path at the member (sent as %3F), no query"},
		{"%23", hostilePrefix + "/a%23b", 200, "/a#b", "member-a", "part of the path at the member (sent as %23), no fragment"},
		{"backslash", hostilePrefix + `/a\..\b`, 200, `/a\..\b`, "member-a", "one segment: neither the apiserver nor a Go member splits on backslashes (sent as %5C)"},
		{"%5C", hostilePrefix + "/a%5C..%5Cb", 200, `/a\..\b`, "member-a", "as above"},
		{"%00", hostilePrefix + "/a%00b", 200, "/a\x00b", "member-a", "sent as %00, one segment"},
		{"%0D%0A", hostilePrefix + "/a%0D%0AHost:%20" + by + "%0D%0A", 200, "/a\r\nHost: " + by + "\r\n", "member-a", "sent escaped: no header injection"},
		{"64 KiB", hostilePrefix + long, 200, long, "member-a", "long but canonical"},
		{"64 KiB then dot-dot", hostilePrefix + long + "/..", 400, refused, "member-a", ".. segment"},
		{"path query parameter on the bare proxy", hostilePrefix + "?path=http://" + by + "/x", 200, "/", "member-a", "the Connecter sets path from the URL, a query parameter cannot"},
		{"path query parameter", hostilePrefix + "/x?path=/../../evil", 200, "/x", "member-a", "as above"},
		{"into another cluster", hostilePrefix + "/../../member-b/proxy/x", 400, refused, "member-a", "the apiserver does not clean paths: member-a is authorized and looked up, the .. is refused"},
		{"into another cluster, escaped", hostileAPI + "member-a%2Fproxy%2F..%2F..%2Fmember-b%2Fproxy/x", 400, refused, "member-a", "decoded before request info: as above"},
		{"out of another cluster", hostileAPI + "member-b/proxy/../../member-a/proxy/x", 503, refused, "member-b", "member-b is authorized and looked up (unknown: 503), member-a never"},
		{"dot-dot before proxy", hostileAPI + "member-a/../member-a/proxy/x", 404, refused, "", "no such subresource: nothing looked up"},
		{"namespaced form", "/apis/gateway.kubewharf.io/v1alpha1/namespaces/default/upstreamclusters/member-a/proxy/x", 404, refused, "", "upstreamclusters are cluster-scoped: no route"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			member.reset()
			g.take()
			// A Host the client chose must never reach the member.
			code, body := rawGet(t, addr, tt.target, by)
			if len(body) > 300 {
				body = body[:300]
			}
			if code != tt.wantCode {
				t.Errorf("status = %d %q, want %d (%s)", code, body, tt.wantCode, tt.why)
			}
			got := member.all()
			if tt.wantPath == refused {
				if len(got) != 0 {
					t.Errorf("the member received %+v (%s)", got, tt.why)
				}
			} else if len(got) != 1 {
				t.Errorf("the member received %d requests, want 1 (%s)", len(got), tt.why)
			} else {
				s := got[0]
				if s.host != memberHost {
					t.Errorf("the member saw Host %q, want its own %q", s.host, memberHost)
				}
				if s.path != tt.wantPath {
					t.Errorf("the member saw the path %.100q, want %.100q (%s)", s.path, tt.wantPath, tt.why)
				}
				segs := strings.Split(strings.TrimSuffix(strings.TrimPrefix(s.path, "/"), "/"), "/")
				for _, seg := range segs {
					if seg == ".." || seg == "." || (seg == "" && len(segs) > 1) {
						t.Errorf("the member saw the path %.100q with a %q segment", s.path, seg)
					}
				}
				if u, err := url.ParseRequestURI(s.requestURI); err != nil || u.Path != s.path || strings.HasPrefix(s.requestURI, "//") {
					t.Errorf("the member's request-target %.100q does not decode to %.100q: %v", s.requestURI, s.path, err)
				}
				if s.impersonateUser != "alice" {
					t.Errorf("the member saw Impersonate-User %q, want alice", s.impersonateUser)
				}
			}
			authorized, lookedUp := g.take()
			switch {
			case tt.wantAuth == "":
				if len(lookedUp) != 0 {
					t.Errorf("looked up %v, want nothing", lookedUp)
				}
			default:
				if len(authorized) != 1 || authorized[0] != "upstreamclusters/proxy:"+tt.wantAuth {
					t.Errorf("authorized %v, want upstreamclusters/proxy of %s", authorized, tt.wantAuth)
				}
				if len(lookedUp) != 1 || lookedUp[0] != tt.wantAuth {
					t.Errorf("looked up %v, want only the authorized %s", lookedUp, tt.wantAuth)
				}
			}
			if n := len(bystander.all()); n != 0 {
				t.Fatalf("the bystander received %d requests", n)
			}
		})
	}
}

// TestHostileVanishingWatcher: a client that goes away in the middle of a
// proxied watch, through the whole generic apiserver chain, ends the member's
// request, and every goroutine the request started ends too.
func TestHostileVanishingWatcher(t *testing.T) {
	started, cancelled := make(chan struct{}, 1), make(chan struct{}, 1)
	member := newHostileSink(t, true, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"type":"ADDED"}`+"\n")
		w.(http.Flusher).Flush()
		started <- struct{}{}
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-time.After(20 * time.Second): // bounded: never outlive the test
		}
	})
	g := newHostileGateway(t, member)
	addr := strings.TrimPrefix(g.URL, "http://")
	baseline := goruntime.NumGoroutine()

	conn, err := net.DialTimeout("tcp", addr, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET %s/api/v1/namespaces/default/pods?watch=true HTTP/1.1\r\nHost: %s\r\n\r\n", hostilePrefix, addr); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("response: %v, %v", resp, err)
	}
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != `{"type":"ADDED"}`+"\n" {
		t.Fatalf("first event = %q, %v", line, err)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the member never started the watch")
	}
	conn.Close()
	select {
	case <-cancelled:
	case <-time.After(20 * time.Second):
		t.Fatal("the member's watch was not cancelled after the client went away")
	}

	// The pooled connection to the member outlives the request: close it
	// once it is idle. The member may see the cancellation before the
	// gateway's side of the stream is cleaned up, so ask until it is.
	// context.Background: a context of the test's would add a goroutine.
	err = wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		if goruntime.NumGoroutine() <= baseline {
			return true, nil
		}
		g.cluster.CloseIdleConnections()
		return false, nil
	})
	if err != nil {
		var stacks bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		t.Fatalf("%d goroutines, baseline %d:\n%s", goruntime.NumGoroutine(), baseline, stacks.String())
	}
}
