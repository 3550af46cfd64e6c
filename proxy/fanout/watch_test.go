package fanout

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// endStream, sent to a fake member, ends its current watch response.
const endStream = "END"

// watchMembers serves member watches from per-cluster channels of JSON
// lines, and records every request.
type watchMembers struct {
	mu      sync.Mutex
	queries map[string][]url.Values
	lines   map[string]chan string
	// fail answers a cluster's watch with this status code.
	fail    map[string]int
	running atomic.Int32
}

func newWatchMembers(clusters ...string) *watchMembers {
	m := &watchMembers{queries: map[string][]url.Values{}, lines: map[string]chan string{}, fail: map[string]int{}}
	for _, c := range clusters {
		m.lines[c] = make(chan string, 16)
	}
	return m
}

func (m *watchMembers) serve(w http.ResponseWriter, req *http.Request, name, path string) {
	m.running.Add(1)
	defer m.running.Add(-1)
	m.mu.Lock()
	m.queries[name] = append(m.queries[name], req.URL.Query())
	code, lines := m.fail[name], m.lines[name]
	m.mu.Unlock()
	if code != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: int32(code), Message: "member says no"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = http.NewResponseController(w).Flush()
	for {
		select {
		case l := <-lines:
			if l == endStream {
				return
			}
			_, _ = w.Write([]byte(l + "\n"))
			_ = http.NewResponseController(w).Flush()
		case <-req.Context().Done():
			return
		}
	}
}

func (m *watchMembers) asked(cluster string) []url.Values {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.queries[cluster]
}

func podEvent(typ, name, rv string) string {
	return fmt.Sprintf(`{"type":%q,"object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":%q,"resourceVersion":%q}}}`, typ, name, rv)
}

func bookmark(rv string, initialEnd bool) string {
	ann := ""
	if initialEnd {
		ann = `,"annotations":{"k8s.io/initial-events-end":"true"}`
	}
	return `{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"` + rv + `"` + ann + `}}}`
}

// watchServer serves h as the gateway's chain would, to user alice.
// threeMembers serves a Handler over members a, b and c, whose watches the
// test feeds.
func threeMembers(t *testing.T) (*watchMembers, *httptest.Server) {
	h, _ := newHandler(nil)
	m := newWatchMembers("a", "b", "c")
	h.Member = m.serve
	return m, watchServer(t, h)
}

func watchServer(t *testing.T, h *Handler) *httptest.Server {
	srv := httptest.NewServer(genericapifilters.WithWarningRecorder(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(genericapirequest.WithUser(r.Context(), &user.DefaultInfo{Name: "alice"}))
		name, path, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/"), "/proxy")
		name, _ = url.PathUnescape(name)
		h.Serve(w, r, name, path)
	})))
	t.Cleanup(srv.Close)
	return srv
}

// watchClient is one fan-out watch as a client sees it.
type watchClient struct {
	resp   *http.Response
	dec    *json.Decoder
	cancel context.CancelFunc
	mark   string // see nextChange
}

type clientEvent struct {
	Type   string
	Object struct {
		Kind     string
		Code     int32
		Reason   metav1.StatusReason
		Message  string
		Metadata metav1.ObjectMeta
		Rows     []struct{ Cells []any }
		Columns  []metav1.TableColumnDefinition `json:"columnDefinitions"`
	}
}

func startWatch(t *testing.T, srv *httptest.Server, segment, query string) *watchClient {
	t.Helper()
	// A bound on the whole watch: a missing event fails the test, not hangs it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/"+url.PathEscape(segment)+"/proxy/api/v1/pods?"+query, nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return &watchClient{resp: resp, dec: json.NewDecoder(resp.Body), cancel: cancel}
}

func (c *watchClient) next(t *testing.T) clientEvent {
	t.Helper()
	var ev clientEvent
	if err := c.dec.Decode(&ev); err != nil {
		t.Fatalf("reading the watch: %v", err)
	}
	return ev
}

// nextChange is next without the bookmarks a client that asked for them gets
// before every flush; the last one's resourceVersion is kept in mark.
func (c *watchClient) nextChange(t *testing.T) clientEvent {
	t.Helper()
	for {
		ev := c.next(t)
		if ev.Type != "BOOKMARK" || ev.Object.Metadata.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
			return ev
		}
		c.mark = ev.Object.Metadata.ResourceVersion
	}
}

func composite(t *testing.T, rv string) map[string]string {
	t.Helper()
	v, err := ParseCompositeResourceVersion(rv)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", rv, err)
	}
	return v
}

// A watch resumes each member at its own resourceVersion, annotates every
// object with its cluster, and gives each event a composite resourceVersion
// that resumes every member where it was, bookmarks included.
func TestWatchMerges(t *testing.T) {
	m, srv := threeMembers(t)
	from := CompositeResourceVersion(map[string]string{"a": "5", "b": "7", "c": "9"})
	c := startWatch(t, srv, "*", "watch=true&timeoutSeconds=600&resourceVersion="+from)
	if c.resp.StatusCode != http.StatusOK {
		t.Fatalf("watch: %d", c.resp.StatusCode)
	}
	for cluster, rv := range map[string]string{"a": "5", "b": "7", "c": "9"} {
		q := m.asked(cluster)
		if len(q) != 1 || q[0].Get("resourceVersion") != rv || q[0].Get("allowWatchBookmarks") != "true" || q[0].Has("timeoutSeconds") || q[0].Get("watch") != "true" {
			t.Errorf("%s asked %v, want resourceVersion %s, bookmarks, no timeoutSeconds", cluster, q, rv)
		}
	}
	m.lines["a"] <- podEvent("ADDED", "p1", "6")
	ev := c.next(t)
	if ev.Type != "ADDED" || ev.Object.Metadata.Name != "p1" || ev.Object.Metadata.Annotations[ClusterAnnotation] != "a" {
		t.Fatalf("first event %+v", ev)
	}
	if got := composite(t, ev.Object.Metadata.ResourceVersion); got["a"] != "6" || got["b"] != "7" || got["c"] != "9" {
		t.Errorf("composite after a's event: %v", got)
	}
	// The client did not ask for bookmarks: c's moves the composite on only
	// (members' events interleave freely, so b's events go on until it shows).
	m.lines["c"] <- bookmark("12", false)
	for i := 0; ; i++ {
		m.lines["b"] <- podEvent("DELETED", "p2", fmt.Sprint(8+i))
		ev = c.next(t)
		if ev.Type != "DELETED" || ev.Object.Metadata.Annotations[ClusterAnnotation] != "b" {
			t.Fatalf("event %+v, want b's DELETED", ev)
		}
		got := composite(t, ev.Object.Metadata.ResourceVersion)
		if got["a"] != "6" || got["b"] != fmt.Sprint(8+i) {
			t.Fatalf("composite after b's event: %v", got)
		}
		if got["c"] == "12" {
			break
		}
		if i == 100 {
			t.Fatalf("c's bookmark never reached the composite: %v", got)
		}
	}
}

// A client that asks for bookmarks, as client-go's reflectors do, gets the
// objects of events with their own resourceVersions (its store keeps no
// composite in every object), and a bookmark with the composite after every
// burst of events; a member's bookmark moves it on.
func TestWatchBookmarks(t *testing.T) {
	m, srv := threeMembers(t)
	c := startWatch(t, srv, "*", "watch=true&allowWatchBookmarks=true")
	m.lines["a"] <- podEvent("ADDED", "p1", "6")
	if ev := c.next(t); ev.Type != "ADDED" || ev.Object.Metadata.ResourceVersion != "6" || ev.Object.Metadata.Annotations[ClusterAnnotation] != "a" {
		t.Fatalf("event %+v, want a's ADDED with its own resourceVersion", ev)
	}
	ev := c.next(t)
	if ev.Type != "BOOKMARK" || ev.Object.Kind != "Pod" || composite(t, ev.Object.Metadata.ResourceVersion)["a"] != "6" {
		t.Fatalf("after the event %+v, want a bookmark with the composite resourceVersion", ev)
	}
	m.lines["c"] <- bookmark("12", false)
	ev = c.next(t)
	if got := composite(t, ev.Object.Metadata.ResourceVersion); ev.Type != "BOOKMARK" || got["a"] != "6" || got["c"] != "12" {
		t.Errorf("bookmark %+v (%v)", ev, got)
	}
}

func TestWatchInitialEvents(t *testing.T) {
	m, srv := threeMembers(t)
	c := startWatch(t, srv, "*", "watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan")
	m.lines["a"] <- podEvent("ADDED", "pa", "3")
	m.lines["a"] <- bookmark("3", true)
	if ev := c.nextChange(t); ev.Type != "ADDED" {
		t.Fatalf("%+v", ev)
	}
	m.lines["b"] <- bookmark("4", true)
	m.lines["c"] <- podEvent("ADDED", "pc", "5")
	if ev := c.nextChange(t); ev.Type != "ADDED" || ev.Object.Metadata.Name != "pc" {
		t.Fatalf("a member's initial-events bookmark reached the client before the others ended: %+v", ev)
	}
	m.lines["c"] <- bookmark("6", true)
	ev := c.nextChange(t)
	if ev.Type != "BOOKMARK" || ev.Object.Metadata.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
		t.Fatalf("want the initial-events bookmark, got %+v", ev)
	}
	if got := composite(t, ev.Object.Metadata.ResourceVersion); got["a"] != "3" || got["b"] != "4" || got["c"] != "6" {
		t.Errorf("initial-events bookmark at %v", got)
	}
}

// A member watch that ends is re-opened from its last resourceVersion; its
// initial events are not asked again.
func TestWatchReopensMember(t *testing.T) {
	m, srv := threeMembers(t)
	c := startWatch(t, srv, "*", "watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan")
	for _, cl := range []string{"a", "b", "c"} {
		m.lines[cl] <- bookmark("20", true)
	}
	c.nextChange(t)
	m.lines["a"] <- podEvent("ADDED", "p1", "21")
	c.nextChange(t)
	m.lines["a"] <- endStream
	m.lines["a"] <- podEvent("MODIFIED", "p1", "22")
	ev := c.nextChange(t)
	if ev.Type != "MODIFIED" || ev.Object.Metadata.Annotations[ClusterAnnotation] != "a" {
		t.Fatalf("after a's watch ended: %+v", ev)
	}
	q := m.asked("a")
	if len(q) != 2 || q[1].Get("resourceVersion") != "21" || q[1].Has("sendInitialEvents") || q[1].Has("resourceVersionMatch") {
		t.Errorf("a re-opened with %v, want a plain watch from 21", q)
	}
}

// An ERROR event (410 Expired) of one member ends the whole watch with it,
// and every member's watch.
func TestWatchExpiredEndsEverything(t *testing.T) {
	for _, query := range []string{"watch=true", "watch=true&allowWatchBookmarks=true"} {
		m, srv := threeMembers(t)
		c := startWatch(t, srv, "*", query)
		m.lines["b"] <- podEvent("ADDED", "p", "4")
		m.lines["b"] <- `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired","message":"too old resource version: 1 (5)"}}`
		ev := c.next(t)
		for ev.Type != "ERROR" {
			ev = c.next(t)
		}
		if ev.Object.Code != http.StatusGone || ev.Object.Reason != metav1.StatusReasonExpired || !strings.Contains(ev.Object.Message, `upstream cluster "b"`) {
			t.Fatalf("%s: want a 410 ERROR naming b, got %+v", query, ev)
		}
		var more clientEvent
		if err := c.dec.Decode(&more); err == nil {
			t.Errorf("%s: the watch went on after the ERROR: %+v", query, more)
		}
		waitFor(t, "member watches to end", func() bool { return m.running.Load() == 0 })
	}
}

func TestWatchMemberFailsToOpen(t *testing.T) {
	h, _ := newHandler(nil)
	m := newWatchMembers("a", "b", "c")
	m.fail["b"] = http.StatusServiceUnavailable
	h.Member = m.serve
	srv := watchServer(t, h)
	c := startWatch(t, srv, "*", "watch=true")
	if c.resp.StatusCode != http.StatusOK || !strings.Contains(strings.Join(c.resp.Header.Values("Warning"), ""), `upstream cluster \"b\": 503`) {
		t.Fatalf("%d, warnings %q", c.resp.StatusCode, c.resp.Header.Values("Warning"))
	}
	m.lines["c"] <- podEvent("ADDED", "p", "1")
	if ev := c.next(t); ev.Object.Metadata.Annotations[ClusterAnnotation] != "c" {
		t.Errorf("%+v", ev)
	}
	// b comes back: it joins the watch.
	m.mu.Lock()
	m.fail["b"] = 0
	m.mu.Unlock()
	m.lines["b"] <- podEvent("ADDED", "pb", "5")
	if ev := c.next(t); ev.Object.Metadata.Annotations[ClusterAnnotation] != "b" {
		t.Errorf("after b came back: %+v", ev)
	}
	m.mu.Lock()
	m.fail["b"] = http.StatusServiceUnavailable
	m.mu.Unlock()
	strict := startWatch(t, srv, "*", "watch=true&"+StrictParam+"=true")
	if strict.resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("strict: %d", strict.resp.StatusCode)
	}
	m.mu.Lock()
	m.fail["b"] = http.StatusGone
	m.mu.Unlock()
	if expired := startWatch(t, srv, "*", "watch=true"); expired.resp.StatusCode != http.StatusGone {
		t.Errorf("a member's 410: %d, want 410", expired.resp.StatusCode)
	}
	// A member that refuses the user is left out for good.
	c.cancel() // the fake's lines go to one watch at a time
	waitFor(t, "member watches to end", func() bool { return m.running.Load() == 0 })
	m.mu.Lock()
	m.fail["b"] = http.StatusForbidden
	m.mu.Unlock()
	asked := len(m.asked("b"))
	c = startWatch(t, srv, "*", "watch=true")
	if w := strings.Join(c.resp.Header.Values("Warning"), ""); !strings.Contains(w, `upstream cluster \"b\": 403`) || strings.Contains(w, "retried") {
		t.Errorf("warnings %q, want b's 403, not retried", w)
	}
	m.lines["c"] <- podEvent("ADDED", "p", "2")
	c.next(t)
	if n := len(m.asked("b")); n != asked+1 {
		t.Errorf("b asked %d times, want once", n-asked)
	}
}

// An ERROR event other than 410 (a restarted server whose cache is not
// ready) ends that member's watch only: it is re-opened from its last
// resourceVersion.
func TestWatchMemberErrorReopens(t *testing.T) {
	m, srv := threeMembers(t)
	c := startWatch(t, srv, "*", "watch=true")
	m.lines["a"] <- podEvent("ADDED", "p1", "21")
	c.next(t)
	m.lines["a"] <- `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":504,"reason":"Timeout","message":"Too large resource version"}}`
	// The old response has ended once a is asked again (the fake's lines
	// would go to whichever reads first).
	waitFor(t, "a to be re-opened", func() bool { return len(m.asked("a")) == 2 })
	m.lines["a"] <- podEvent("MODIFIED", "p1", "22")
	if ev := c.next(t); ev.Type != "MODIFIED" {
		t.Fatalf("after a's 504 ERROR: %+v, want a's next event", ev)
	}
	if q := m.asked("a"); len(q) != 2 || q[1].Get("resourceVersion") != "21" {
		t.Errorf("a re-opened with %v, want from 21", q)
	}
}

func TestWatchResourceVersions(t *testing.T) {
	m, srv := threeMembers(t)
	for rv, want := range map[string]int{
		"123": http.StatusGone, // an object's own: list again
		"e30": http.StatusOK,   // {}: every member from its current state
		CompositeResourceVersion(map[string]string{"a": "1", "gone": "2"}): http.StatusGone,
	} {
		c := startWatch(t, srv, "*", "watch=true&resourceVersion="+rv)
		if c.resp.StatusCode != want {
			t.Errorf("resourceVersion %q: %d, want %d", rv, c.resp.StatusCode, want)
		}
		c.cancel()
	}
	for _, rv := range []string{"", "0"} {
		c := startWatch(t, srv, "env=prod", "watch=true&resourceVersion="+rv)
		c.cancel()
		if q := m.asked("b"); q[len(q)-1].Get("resourceVersion") != rv {
			t.Errorf("resourceVersion %q reached b as %q", rv, q[len(q)-1].Get("resourceVersion"))
		}
	}
}

// kubectl get --watch asks for Tables: the columns come once, with Cluster
// first; every row has its cluster.
func TestWatchTable(t *testing.T) {
	m, srv := threeMembers(t)
	c := startWatch(t, srv, "*", "watch=true")
	table := func(name string, columns bool) string {
		cols := ""
		if columns {
			cols = `"columnDefinitions":[{"name":"Name","type":"string"}],`
		}
		return `{"type":"ADDED","object":{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"3"},` + cols + `"rows":[{"cells":["` + name + `"],"object":{"kind":"PartialObjectMetadata","metadata":{"name":"` + name + `"}}}]}}`
	}
	m.lines["a"] <- table("pa", true)
	ev := c.next(t)
	if len(ev.Object.Columns) != 2 || ev.Object.Columns[0].Name != "Cluster" || fmt.Sprint(ev.Object.Rows[0].Cells) != "[a pa]" {
		t.Fatalf("first table event %+v", ev)
	}
	m.lines["b"] <- table("pb", true)
	ev = c.next(t)
	if len(ev.Object.Columns) != 0 || fmt.Sprint(ev.Object.Rows[0].Cells) != "[b pb]" {
		t.Errorf("second table event %+v: want no columns again", ev)
	}
}

// When the client goes away, every member watch ends and no goroutine is
// left behind.
// An open member watch holds one goroutine of the fan-out: the member
// request's own, which takes the events out of the response as it is
// written. (Through the gateway, the HTTP/2 client's stream of the request
// is the only other.)
func TestMemberWatchHoldsOneGoroutine(t *testing.T) {
	const n = 50
	h, _ := newHandler(nil)
	var names []string
	h.Clusters = clusters{}
	for i := range n {
		names = append(names, fmt.Sprintf("m%02d", i))
		h.Clusters = append(h.Clusters.(clusters), uc(names[i], map[string]string{"first": strconv.FormatBool(i == 0)}, true))
	}
	m := newWatchMembers(names...)
	h.Member = m.serve
	srv := watchServer(t, h)
	// One watch over one member first: the server's and the client's
	// goroutines for a watch are there before counting.
	one := startWatch(t, srv, "first=true", "watch=true")
	waitFor(t, "the single watch", func() bool { return m.running.Load() == 1 })
	before := runtime.NumGoroutine()
	c := startWatch(t, srv, "*", "watch=true")
	waitFor(t, "every member watch", func() bool { return m.running.Load() == n+1 })
	m.lines[names[n-1]] <- podEvent("ADDED", "p", "1")
	if ev := c.next(t); ev.Object.Metadata.Annotations[ClusterAnnotation] != names[n-1] {
		t.Fatalf("event %+v", ev)
	}
	// The merged watch's handler and its connection: a few; per member: one.
	if added := runtime.NumGoroutine() - before; added > n+5 {
		t.Errorf("%d goroutines for a watch over %d members, want about one per member", added, n)
	}
	one.cancel()
}

func TestWatchClientGoneLeavesNothing(t *testing.T) {
	m, srv := threeMembers(t)
	before := runtime.NumGoroutine()
	for range 3 {
		c := startWatch(t, srv, "*", "watch=true")
		m.lines["a"] <- podEvent("ADDED", "p", "1")
		c.next(t)
		if m.running.Load() != 3 {
			t.Fatalf("%d member watches running, want 3", m.running.Load())
		}
		c.cancel()
		waitFor(t, "member watches to end", func() bool { return m.running.Load() == 0 })
	}
	srv.CloseClientConnections()
	srv.Client().CloseIdleConnections()
	// Connections' goroutines of the test server and client end too.
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// A member answer that breaks off makes the reverse proxy panic with
// http.ErrAbortHandler in the fan-out's goroutine: the list warns, the watch
// re-opens the member; the gateway goes on.
func TestMemberAnswerBreaksOff(t *testing.T) {
	h, _ := newHandler(nil)
	m := newWatchMembers("a", "b", "c")
	var broke atomic.Bool
	h.Member = func(w http.ResponseWriter, req *http.Request, name, path string) {
		if name == "b" && broke.CompareAndSwap(false, true) {
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"kind":`))
			panic(http.ErrAbortHandler)
		}
		m.serve(w, req, name, path)
	}
	c := startWatch(t, watchServer(t, h), "*", "watch=true")
	m.lines["b"] <- podEvent("ADDED", "pb", "2")
	if ev := c.next(t); ev.Object.Metadata.Annotations[ClusterAnnotation] != "b" {
		t.Errorf("after b broke off: %+v", ev)
	}
	if q := m.asked("b"); len(q) != 1 {
		t.Errorf("b re-opened %d times, want once", len(q))
	}

	h, _ = newHandler(nil)
	members := &members{asked: map[string]*http.Request{}, paths: map[string]string{}}
	h.Member = func(w http.ResponseWriter, req *http.Request, name, path string) {
		if name == "b" {
			_, _ = w.Write([]byte(`{"kind":`))
			panic(http.ErrAbortHandler)
		}
		members.serve(w, req, name, path)
	}
	rec := do(h, "*", "/api/v1/pods", "", nil)
	if got := strings.Join(itemClusters(t, rec), ","); got != "a,c" || !strings.Contains(strings.Join(rec.Header().Values("Warning"), ""), `upstream cluster \"b\": 502 its answer broke off`) {
		t.Errorf("items of %s, warnings %q", got, rec.Header().Values("Warning"))
	}
}

// kubectl get --watch asks for Tables: so are members.
func TestWatchAsksMembersForTables(t *testing.T) {
	h, _ := newHandler(nil)
	var accept, encoding atomic.Value
	m := newWatchMembers("a", "b", "c")
	h.Member = func(w http.ResponseWriter, req *http.Request, name, path string) {
		accept.Store(req.Header.Get("Accept"))
		encoding.Store(req.Header.Get("Accept-Encoding"))
		m.serve(w, req, name, path)
	}
	srv := watchServer(t, h)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/*/proxy/api/v1/pods?watch=true", nil)
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if a, _ := accept.Load().(string); !strings.HasPrefix(a, "application/json;as=Table;v=v1;g=meta.k8s.io") {
		t.Errorf("members asked with Accept %q, want a Table", a)
	}
	// Not compressed: a decompressor per member watch would hold ~40 KiB.
	if e, _ := encoding.Load().(string); e != "identity" {
		t.Errorf("members asked with Accept-Encoding %q, want identity", e)
	}
}

// A member whose watch ended and whose history is gone when it is re-opened
// (410) ends the whole watch with a 410 ERROR event: the client relists.
func TestWatchReopenExpired(t *testing.T) {
	m, srv := threeMembers(t)
	c := startWatch(t, srv, "*", "watch=true")
	m.lines["a"] <- podEvent("ADDED", "p1", "21")
	c.next(t)
	m.mu.Lock()
	m.fail["a"] = http.StatusGone
	m.mu.Unlock()
	m.lines["a"] <- endStream
	ev := c.next(t)
	if ev.Type != "ERROR" || ev.Object.Code != http.StatusGone || ev.Object.Reason != metav1.StatusReasonExpired || !strings.Contains(ev.Object.Message, `upstream cluster "a"`) {
		t.Fatalf("want a 410 ERROR naming a, got %+v", ev)
	}
	if q := m.asked("a"); len(q) != 2 || q[1].Get("resourceVersion") != "21" {
		t.Errorf("a re-opened with %v, want from 21", q)
	}
	waitFor(t, "member watches to end", func() bool { return m.running.Load() == 0 })
}

// A member's warnings when its watch opens reach the client, naming it.
func TestWatchMemberWarnings(t *testing.T) {
	h, _ := newHandler(nil)
	m := newWatchMembers("a", "b", "c")
	h.Member = func(w http.ResponseWriter, req *http.Request, name, path string) {
		if name == "c" {
			w.Header().Add("Warning", `299 - "v1 pods are deprecated"`)
		}
		m.serve(w, req, name, path)
	}
	c := startWatch(t, watchServer(t, h), "*", "watch=true")
	if w := c.resp.Header.Values("Warning"); len(w) != 1 || w[0] != `299 - "upstream cluster \"c\": v1 pods are deprecated"` {
		t.Errorf("warnings %q", w)
	}
}

func TestParseEvent(t *testing.T) {
	for _, c := range []struct {
		line string
		want event // object: the raw object expected
		err  string
	}{
		{line: `{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","resourceVersion":"7"},"spec":{"n":12345678901234567890}}}`,
			want: event{typ: "ADDED", kind: "Pod", apiVersion: "v1", resourceVersion: "7",
				object: jsontext.Value(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","resourceVersion":"7"},"spec":{"n":12345678901234567890}}`)}},
		{line: "{ \"object\" :\n {\"metadata\":{\"resourceVersion\":\"9\",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}} , \"type\":\"BOOKMARK\"}",
			want: event{typ: "BOOKMARK", resourceVersion: "9", initialEnd: true,
				object: jsontext.Value(`{"metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}`)}},
		{line: `{"type":"BOOKMARK","object":{"metadata":{"annotations":{"k8s.io/initial-events-end":"false"}}}}`,
			want: event{typ: "BOOKMARK", object: jsontext.Value(`{"metadata":{"annotations":{"k8s.io/initial-events-end":"false"}}}`)}},
		{line: `{"type":"ADDED","object":"text"}`, err: "object is not a JSON object"},
		{line: `{"type":"ADDED"}`, err: "no type or no object"},
		{line: `{"type":1,"object":{}}`, err: "type is not a string"},
		{line: `{"type":"ADDED","object":{"metadata":{"resourceVersion":5}}}`, err: "resourceVersion is not a string"},
		{line: `{"type":"ADDED","object":{"a":}}`, err: "invalid character"},
	} {
		got, err := parseEvent([]byte(c.line))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.line, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.line, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\ngot  %+v (object %s)\nwant %+v (object %s)", c.line, got, got.object, c.want, c.want.object)
		}
	}
}

// TestWatchEventKeepsTheObject: an event's object reaches the client as the
// member sent it, but for its cluster annotation and its resourceVersion.
func TestWatchEventKeepsTheObject(t *testing.T) {
	ev, err := parseEvent([]byte(`{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"p","resourceVersion":"7","annotations":{"k":"\u003cv\u003e","gateway.kubewharf.io/cluster":"forged"}},"spec":{"n":12345678901234567890}}}`))
	if err != nil {
		t.Fatal(err)
	}
	ev.cluster = "a"
	var out bytes.Buffer
	if err := newCopier(&out).writeEvent(&ev, jsontext.Value(`"composite"`), &tableColumns{}); err != nil {
		t.Fatal(err)
	}
	want := `{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"p","annotations":{"k":"<v>","gateway.kubewharf.io/cluster":"a"},"resourceVersion":"composite"},"spec":{"n":12345678901234567890}}}` + "\n"
	if out.String() != want {
		t.Errorf("wrote\n%s\nwant\n%s", out.String(), want)
	}
}

// TestVersionSet: the composite a watch keeps up to date event by event reads
// back as the members' resourceVersions, and is the one CompositeResourceVersion
// makes of them.
func TestVersionSet(t *testing.T) {
	v := &versionSet{}
	want := map[string]string{}
	check := func(step string) {
		t.Helper()
		q := v.composite()
		var rv string
		if err := json.Unmarshal(q, &rv); err != nil {
			t.Fatalf("%s: %s is not a JSON string: %v", step, q, err)
		}
		if got, err := ParseCompositeResourceVersion(rv); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %s reads back as %v (%v), want %v", step, rv, got, err, want)
		}
		if rv != CompositeResourceVersion(want) {
			t.Errorf("%s: %s, want %s", step, rv, CompositeResourceVersion(want))
		}
	}
	check("none")
	// Names and resourceVersions of every length modulo 3, inserted before,
	// between and after the others, and changed.
	for i, c := range []struct{ cluster, rv string }{
		{"member-b", "10"}, {"member-a", "7"}, {"member-c", "3"}, {"member-a", "8"}, {"member-b", "11"},
		{"a", "1"}, {"ab", "12"}, {"abc", "123"}, {"member-bb", "1234"}, {"z", ""}, {"a", "100"},
	} {
		v.set(c.cluster, c.rv)
		want[c.cluster] = c.rv
		check(fmt.Sprintf("after %d sets", i+1))
	}
	// A member's resourceVersion is opaque: whatever it holds reads back.
	v.set("member-d", "a\"b\\c<d>\u00e9\n")
	want["member-d"] = "a\"b\\c<d>\u00e9\n"
	check("opaque")
	// The unpadded form of earlier gateways reads back as well.
	b, _ := json.Marshal(want)
	if got, err := ParseCompositeResourceVersion(base64.RawURLEncoding.EncodeToString(b)); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("unpadded: read back %v (%v), want %v", got, err, want)
	}
}

// TestRelayFlushes: a burst of events waiting is written, then flushed once;
// an event followed by one that is not passed on (a bookmark the client did
// not ask for) is flushed all the same.
func TestRelayFlushes(t *testing.T) {
	events := make(chan event, 8)
	for _, typ := range []string{"ADDED", "ADDED", "ADDED", "BOOKMARK"} {
		events <- event{typ: typ}
	}
	type call struct {
		flush bool
		typ   string
	}
	calls := make(chan call, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		relay(ctx, events, func(ev *event) (bool, bool) {
			calls <- call{typ: ev.typ}
			return ev.typ != "BOOKMARK", false
		}, func() { calls <- call{flush: true} })
	}()
	defer func() { cancel(); <-done }()
	var got []string
	for len(got) < 5 {
		select {
		case c := <-calls:
			if c.flush {
				got = append(got, "flush")
			} else {
				got = append(got, c.typ)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("calls %v, then nothing: what was written is not flushed", got)
		}
	}
	if want := []string{"ADDED", "ADDED", "ADDED", "BOOKMARK", "flush"}; !reflect.DeepEqual(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
}

// A member's events are taken out of the response however the reverse proxy
// writes it: split across writes, several in one write, with or without the
// newline Kubernetes ends them with, indented (pretty=true). What is not an event, or an event larger
// than maxEventBytes, ends the member's request (to be opened again), and not
// the merged watch.
func TestEventWriterFraming(t *testing.T) {
	newWriter := func() (*eventWriter, chan event, *bool) {
		events := make(chan event, 16)
		stopped := new(bool)
		m := &memberWatch{cluster: "a", events: events}
		w := &eventWriter{header: http.Header{}, m: m, ctx: context.Background(), stop: func() { *stopped = true }, onAnswer: func() {}}
		return w, events, stopped
	}
	w, events, stopped := newWriter()
	a, b, c, d := podEvent("ADDED", "pa", "1"), podEvent("MODIFIED", "pb", "2"), podEvent("ADDED", "pc", "3"), podEvent("DELETED", "pd", "4")
	var pretty bytes.Buffer // as a member asked with pretty=true writes it
	_ = json.Indent(&pretty, []byte(podEvent("MODIFIED", "pe", "5")), "", "  ")
	e := pretty.String()
	cut := strings.Index(e, "\n  \"object\"")
	for _, chunk := range []string{a[:10], a[10:40], a[40:] + "\n" + b + "\n" + c[:5], c[5:] + d, " \n", e[:cut+1], e[cut+1:] + "\n"} {
		if n, err := w.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	var got []string
	for len(events) > 0 {
		ev := <-events
		var obj struct{ Metadata metav1.ObjectMeta }
		_ = json.Unmarshal(ev.object, &obj)
		got = append(got, ev.typ+" "+obj.Metadata.Name+" "+ev.cluster+" "+ev.resourceVersion)
	}
	want := []string{"ADDED pa a 1", "MODIFIED pb a 2", "ADDED pc a 3", "DELETED pd a 4", "MODIFIED pe a 5"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if w.m.last != "5" || *stopped || w.done || w.buf != nil {
		t.Errorf("last %q, stopped %v, done %v, buffer %d of %d bytes kept; want none between events", w.m.last, *stopped, w.done, len(w.buf), cap(w.buf))
	}
	if _, _ = w.Write([]byte("{]\n")); !*stopped || !w.done || w.ended {
		t.Errorf("after a broken event: stopped %v, done %v, ended %v; want the member's request stopped, the merged watch on", *stopped, w.done, w.ended)
	}

	w, _, stopped = newWriter()
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	_, _ = w.Write([]byte(`{"type":"ADDED","object":{"data":"`))
	for i := 0; i <= maxEventBytes>>20 && !w.done; i++ {
		_, _ = w.Write(chunk)
	}
	if !*stopped || !w.done || w.buf != nil {
		t.Errorf("an event of more than %d bytes: stopped %v, done %v, %d bytes kept", maxEventBytes, *stopped, w.done, len(w.buf))
	}
}

// A watch that ends (its timeoutSeconds) while events keep coming still
// flushes what it wrote, and so writes the bookmark that keeps it resumable.
// The end and the next event are both ready at once: relay may see either
// first, so it is tried 20 times.
func TestRelayFlushesAtTheEnd(t *testing.T) {
	for range 20 {
		events := make(chan event, 2)
		events <- event{typ: "ADDED"}
		ctx, cancel := context.WithCancel(context.Background())
		var calls []string
		relay(ctx, events, func(ev *event) (bool, bool) {
			calls = append(calls, ev.typ)
			if len(calls) == 1 {
				events <- event{typ: "MODIFIED"} // the next event is ready as the watch ends
				cancel()
			}
			return true, false
		}, func() { calls = append(calls, "flush") })
		if calls[len(calls)-1] != "flush" {
			t.Fatalf("calls %v: the watch ended without flushing what it wrote", calls)
		}
	}
}
