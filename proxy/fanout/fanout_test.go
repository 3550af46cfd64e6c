package fanout

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// clusters lists canned UpstreamClusters, filtered by the selector.
type clusters []gatewayv1alpha1.UpstreamCluster

func (c clusters) List(_ context.Context, o *metainternalversion.ListOptions) (runtime.Object, error) {
	out := &gatewayv1alpha1.UpstreamClusterList{}
	for _, uc := range c {
		if o.LabelSelector.Matches(labelSet(uc.Labels)) {
			out.Items = append(out.Items, uc)
		}
	}
	return out, nil
}

type labelSet map[string]string

func (s labelSet) Has(k string) bool              { _, ok := s[k]; return ok }
func (s labelSet) Get(k string) string            { return s[k] }
func (s labelSet) Lookup(k string) (string, bool) { v, ok := s[k]; return v, ok }

func uc(name string, labels map[string]string, ready bool) gatewayv1alpha1.UpstreamCluster {
	c := gatewayv1alpha1.UpstreamCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	c.Status.Conditions = []metav1.Condition{{Type: gatewayv1alpha1.ConditionReady, Status: status}}
	return c
}

// denies forbids upstreamclusters/proxy on the named clusters. As in RBAC,
// a user whose rules name clusters (resourceNames) is not allowed without a
// name: with any denial, the request without a name is denied too.
type denies map[string]bool

func (d denies) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.GetResource() != "upstreamclusters" || a.GetSubresource() != "proxy" || d[a.GetName()] || (a.GetName() == "" && len(d) > 0) {
		return authorizer.DecisionNoOpinion, "", nil
	}
	return authorizer.DecisionAllow, "", nil
}

// members answers each member's request with a canned pod list and records
// what it was asked.
type members struct {
	mu    sync.Mutex
	asked map[string]*http.Request
	paths map[string]string
}

func (m *members) serve(w http.ResponseWriter, req *http.Request, name, path string) {
	m.mu.Lock()
	m.asked[name], m.paths[name] = req, path
	m.mu.Unlock()
	if name == "down" {
		http.Error(w, "connection refused", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"p-` + name + `"}}]}`))
}

func newHandler(d denies) (*Handler, *members) {
	m := &members{asked: map[string]*http.Request{}, paths: map[string]string{}}
	scheme := runtime.NewScheme()
	_ = gatewayv1alpha1.AddToScheme(scheme)
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	return &Handler{
		Member: m.serve,
		Clusters: clusters{
			uc("b", map[string]string{"env": "prod"}, true),
			uc("a", map[string]string{"env": "dev"}, false),
			uc("c", map[string]string{"env": "prod"}, true),
		},
		Authorizer: authorizer.AuthorizerFunc(d.Authorize),
		Serializer: serializer.NewCodecFactory(scheme),
	}, m
}

// do serves one fan-out request as user alice with the warning recorder of
// the real chain.
func do(h *Handler, name, path, query string, header http.Header) *httptest.ResponseRecorder {
	target := "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/" + url.PathEscape(name) + "/proxy" + path
	if query != "" {
		target += "?" + query
	}
	req := httptest.NewRequest(http.MethodGet, target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	req = req.WithContext(genericapirequest.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"}))
	rec := httptest.NewRecorder()
	genericapifilters.WithWarningRecorder(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !IsFanOut(name) {
			panic("a single-cluster name given to the fan-out")
		}
		h.Serve(w, r, name, path)
	})).ServeHTTP(rec, req)
	return rec
}

func itemClusters(t *testing.T, rec *httptest.ResponseRecorder) []string {
	t.Helper()
	var list struct {
		Items []metav1.PartialObjectMetadata
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
		t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
	}
	var got []string
	for _, i := range list.Items {
		got = append(got, i.Annotations[ClusterAnnotation])
	}
	return got
}

func TestSelection(t *testing.T) {
	for _, c := range []struct {
		name string
		want string
	}{
		{"*", "a,b,c"},
		{"env=prod", "b,c"},
		{"env!=prod", "a"},
		{"env in (dev,prod)", "a,b,c"},
	} {
		h, _ := newHandler(nil)
		rec := do(h, c.name, "/api/v1/pods", "", nil)
		if got := strings.Join(itemClusters(t, rec), ","); got != c.want {
			t.Errorf("%q selects %s, want %s", c.name, got, c.want)
		}
	}
}

func TestMembersTheUserMayNotReachAreLeftOut(t *testing.T) {
	h, m := newHandler(denies{"b": true})
	rec := do(h, "*", "/api/v1/pods", "", nil)
	if got := strings.Join(itemClusters(t, rec), ","); got != "a,c" {
		t.Errorf("items of %s, want a,c", got)
	}
	if m.asked["b"] != nil {
		t.Error("b, which the user may not reach, was asked")
	}
	if w := rec.Header().Values("Warning"); len(w) != 1 || !strings.Contains(w[0], `upstream cluster \"b\": left out`) {
		t.Errorf("warnings %q", w)
	}
}

// A user allowed upstreamclusters/proxy without a name (a rule without
// resourceNames) may use every cluster: one authorization, not one per
// member. A user whose rules name clusters is checked member by member.
func TestAuthorizationPerMemberOnlyWhenNeeded(t *testing.T) {
	for _, c := range []struct {
		d     denies
		calls int
		want  string
	}{
		{nil, 1, "a,b,c"},
		{denies{"b": true}, 4, "a,c"}, // without a name, then a, b, c
	} {
		h, _ := newHandler(c.d)
		var calls atomic.Int32
		h.Authorizer = authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			calls.Add(1)
			return c.d.Authorize(ctx, a)
		})
		rec := do(h, "*", "/api/v1/pods", "", nil)
		if got := strings.Join(itemClusters(t, rec), ","); got != c.want || int(calls.Load()) != c.calls {
			t.Errorf("denies %v: items of %s after %d authorizations, want %s after %d", c.d, got, calls.Load(), c.want, c.calls)
		}
	}
}

func TestMemberRequests(t *testing.T) {
	h, m := newHandler(nil)
	rec := do(h, "env=prod", "/api/v1/pods", "labelSelector=app%3Dx&"+StrictParam+"=false",
		http.Header{"Accept": {"application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}, "Accept-Encoding": {"gzip"}})
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	for _, name := range []string{"b", "c"} {
		req := m.asked[name]
		if req == nil {
			t.Fatalf("%s was not asked", name)
		}
		if q := req.URL.RawQuery; q != "labelSelector=app%3Dx" {
			t.Errorf("%s asked with query %q: want the strict parameter removed", name, q)
		}
		if a := req.Header.Get("Accept"); !strings.HasPrefix(a, "application/json;as=Table;v=v1;g=meta.k8s.io") {
			t.Errorf("%s asked with Accept %q, want a Table in JSON", name, a)
		}
		if req.Header.Get("Accept-Encoding") != "" {
			t.Errorf("%s asked with the client's Accept-Encoding", name)
		}
		if m.paths[name] != "/api/v1/pods" {
			t.Errorf("%s asked for %q", name, m.paths[name])
		}
	}
}

func TestStrict(t *testing.T) {
	h, _ := newHandler(nil)
	h.Clusters = append(h.Clusters.(clusters), uc("down", nil, true))
	rec := do(h, "*", "/api/v1/pods", "", nil)
	if got := strings.Join(itemClusters(t, rec), ","); got != "a,b,c" || !strings.Contains(strings.Join(rec.Header().Values("Warning"), ""), `upstream cluster \"down\": 503`) {
		t.Errorf("items of %s, warnings %q", got, rec.Header().Values("Warning"))
	}
	rec = do(h, "*", "/api/v1/pods", StrictParam+"=true", nil)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `\"down\": 503`) {
		t.Errorf("strict: %d %s", rec.Code, rec.Body)
	}
}

func TestDiscoveryFromTheFirstReadyMember(t *testing.T) {
	for _, path := range []string{"/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/openapi/v3", "/openapi/v3/api/v1", "/version"} {
		h, m := newHandler(nil)
		do(h, "*", path, "", nil)
		if len(m.asked) != 1 || m.asked["b"] == nil {
			t.Errorf("%s went to %v, want b only (a is not Ready)", path, m.paths)
		}
	}
}

func TestUnsupported(t *testing.T) {
	for _, c := range []struct {
		method, path, query, upgrade string
		want                         string
	}{
		{"GET", "/api/v1/namespaces/n/pods/p", "", "", "not get pods"},
		{"GET", "/api/v1/namespaces/n/pods/p/log", "", "", "not get pods/log"},
		{"POST", "/api/v1/namespaces/n/pods", "", "", "not create pods"},
		{"DELETE", "/api/v1/namespaces/n/pods", "", "", "not deletecollection pods"},
		{"GET", "/api/v1/namespaces/n/pods/p/exec", "", "SPDY/3.1", "not protocol upgrades"},
		{"GET", "/healthz", "", "", "not GET /healthz"},
	} {
		h, m := newHandler(nil)
		req := httptest.NewRequest(c.method, "/x?"+c.query, nil)
		if c.upgrade != "" {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", c.upgrade)
		}
		req = req.WithContext(genericapirequest.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"}))
		rec := httptest.NewRecorder()
		h.Serve(rec, req, "*", c.path)
		var status metav1.Status
		_ = json.Unmarshal(rec.Body.Bytes(), &status)
		if rec.Code != http.StatusMethodNotAllowed || !strings.Contains(status.Message, c.want) || len(m.asked) != 0 {
			t.Errorf("%s %s?%s: %d %q (asked %v), want 405 saying %q", c.method, c.path, c.query, rec.Code, status.Message, m.paths, c.want)
		}
	}
	h, _ := newHandler(nil)
	if rec := do(h, "env in (prod", "/api/v1/pods", "", nil); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "label selector") {
		t.Errorf("invalid selector: %d %s", rec.Code, rec.Body)
	}
}

func TestIsFanOut(t *testing.T) {
	for name, want := range map[string]bool{
		"member-a": false, "a.b.c": false, "env": false,
		"*": true, "env=prod": true, "env!=prod": true, "!env": true, "a,b": true, "env in (a)": true,
	} {
		if got := IsFanOut(name); got != want {
			t.Errorf("IsFanOut(%q) = %v", name, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { IsFanOut("member-a") }); n != 0 {
		t.Errorf("IsFanOut allocates %v times", n)
	}
}

func TestMemberTimeout(t *testing.T) {
	h, _ := newHandler(nil)
	h.MemberTimeout = 10 * time.Millisecond
	h.Member = func(w http.ResponseWriter, req *http.Request, name, path string) {
		if name == "b" {
			<-req.Context().Done() // a member that never answers
			return
		}
		(&members{asked: map[string]*http.Request{}, paths: map[string]string{}}).serve(w, req, name, path)
	}
	rec := do(h, "*", "/api/v1/pods", "", nil)
	if got := strings.Join(itemClusters(t, rec), ","); got != "a,c" {
		t.Errorf("items of %s, want a,c", got)
	}
	if w := strings.Join(rec.Header().Values("Warning"), "\n"); !strings.Contains(w, `upstream cluster \"b\": no complete answer within 10ms`) {
		t.Errorf("warnings %q", w)
	}
}

// At most Parallel members are asked at once.
func TestParallelBound(t *testing.T) {
	h, _ := newHandler(nil)
	h.Clusters = clusters{uc("a", nil, true), uc("b", nil, true), uc("c", nil, true), uc("d", nil, true), uc("e", nil, true)}
	h.Parallel = 2
	var inFlight, most atomic.Int32
	release := make(chan struct{})
	h.Member = func(w http.ResponseWriter, req *http.Request, name, path string) {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		inFlight.Add(-1)
		(&members{asked: map[string]*http.Request{}, paths: map[string]string{}}).serve(w, req, name, path)
	}
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- do(h, "*", "/api/v1/pods", "", nil) }()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return inFlight.Load() >= 2, nil
	}); err != nil {
		t.Fatalf("members in flight: %d", inFlight.Load())
	}
	close(release)
	if got := strings.Join(itemClusters(t, <-done), ","); got != "a,b,c,d,e" {
		t.Errorf("items of %s", got)
	}
	if most.Load() != 2 {
		t.Errorf("%d members asked at once, want at most Parallel = 2", most.Load())
	}
}

// A member's own warnings reach the client, naming the member.
func TestMemberWarningsArePassedOn(t *testing.T) {
	h, _ := newHandler(nil)
	h.Member = func(w http.ResponseWriter, req *http.Request, name, path string) {
		if name == "c" {
			w.Header().Add("Warning", `299 - "v1 pods are deprecated"`)
		}
		(&members{asked: map[string]*http.Request{}, paths: map[string]string{}}).serve(w, req, name, path)
	}
	rec := do(h, "*", "/api/v1/pods", "", nil)
	if w := rec.Header().Values("Warning"); len(w) != 1 || w[0] != `299 - "upstream cluster \"c\": v1 pods are deprecated"` {
		t.Errorf("warnings %q", w)
	}
}

// TestLargeListIsCompressed: a merged list is compressed as the apiserver
// compresses its own lists, when the client accepts gzip and the list is
// large.
func TestLargeListIsCompressed(t *testing.T) {
	h, _ := newHandler(nil)
	var list []byte
	h.Member = func(w http.ResponseWriter, _ *http.Request, _, _ string) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(list)
	}
	for _, c := range []struct {
		items                        int // per member: 1,000 are about 640 KB
		acceptEncoding, wantEncoding string
	}{{1000, "gzip", "gzip"}, {1000, "deflate, gzip", "gzip"}, {1000, "", ""}, {1000, "deflate", ""}, {10, "gzip", ""}} {
		list = configMapList(c.items)
		rec := do(h, "*", "/api/v1/configmaps", "", http.Header{"Accept-Encoding": {c.acceptEncoding}})
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Encoding") != c.wantEncoding {
			t.Fatalf("%d items, Accept-Encoding %q: %d, Content-Encoding %q, want %q", c.items, c.acceptEncoding, rec.Code, rec.Header().Get("Content-Encoding"), c.wantEncoding)
		}
		body := io.Reader(rec.Body)
		if c.wantEncoding == "gzip" {
			if v := rec.Header().Get("Vary"); v != "Accept-Encoding" {
				t.Errorf("Vary %q, want Accept-Encoding", v)
			}
			zr, err := gzip.NewReader(rec.Body)
			if err != nil {
				t.Fatal(err)
			}
			body = zr
		}
		var got struct {
			Items []metav1.PartialObjectMetadata
		}
		if err := json.NewDecoder(body).Decode(&got); err != nil {
			t.Fatalf("%d items, Accept-Encoding %q: %v", c.items, c.acceptEncoding, err)
		}
		last := fmt.Sprintf("cm-%05d", c.items-1)
		if n := len(got.Items); n != 3*c.items || got.Items[n-1].Annotations[ClusterAnnotation] != "c" || got.Items[n-1].Name != last {
			t.Errorf("%d items, Accept-Encoding %q: %d items, want %d, the last %s of c", c.items, c.acceptEncoding, n, 3*c.items, last)
		}
	}
}
