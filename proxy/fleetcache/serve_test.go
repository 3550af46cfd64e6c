package fleetcache

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kubewharf/kube-gateway/proxy/request"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/tools/cache"
)

func readRequest(ctx context.Context, path, query, accept string) *http.Request {
	req := httptest.NewRequest(http.MethodGet, "https://gateway"+path+"?"+query, nil).WithContext(
		genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: "alice"}))
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	return req
}

// What the cache answers, and what it leaves to the member.

func TestParseRead(t *testing.T) {
	for _, tc := range []struct {
		path, query, accept string
		want                bool
	}{
		{"/api/v1/configmaps", "resourceVersion=0", "application/json", true},
		{"/api/v1/namespaces/ns/configmaps", "limit=10&labelSelector=app%3Da&fieldSelector=metadata.name%3Da", "", true},
		{"/api/v1/configmaps", "watch=true&resourceVersion=5&allowWatchBookmarks=true&timeoutSeconds=30", "", true},
		{"/apis/apps/v1/deployments", "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&watch=1", "", true},
		// Tables: a watch of the changes after a resourceVersion only.
		{"/api/v1/configmaps", "watch=1&resourceVersion=5", request.TableAccept, true},
		{"/api/v1/configmaps", "watch=1&resourceVersion=5&includeObject=Object", request.TableAccept, true},
		{"/api/v1/configmaps", "watch=1&resourceVersion=5&includeObject=All", request.TableAccept, false},
		{"/api/v1/configmaps", "", request.TableAccept, false},
		{"/api/v1/configmaps", "resourceVersion=0", request.TableAccept, false},
		{"/api/v1/configmaps", "watch=1&resourceVersion=0", request.TableAccept, false},
		{"/api/v1/configmaps", "watch=1&resourceVersion=5&allowWatchBookmarks=true", request.TableAccept, true},
		{"/api/v1/configmaps", "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan", request.TableAccept, false},
		// Metadata only: the cache holds whole objects.
		{"/api/v1/configmaps", "resourceVersion=0", "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io", false},
		// Selectors the cache does not apply.
		{"/api/v1/pods", "fieldSelector=spec.nodeName%3Dn1", "", false},
		{"/api/v1/configmaps", "labelSelector=a+in+(", "", false},
		// A past state.
		{"/api/v1/configmaps", "resourceVersion=5&resourceVersionMatch=Exact", "", false},
		// A member's own continue token, other parameters, objects, subresources.
		{"/api/v1/configmaps", "continue=bWVtYmVy", "", false},
		{"/api/v1/configmaps", "shardSelector=x", "", false},
		{"/api/v1/namespaces/ns/configmaps/a", "", "", false},
		{"/api/v1/namespaces/ns/pods/a/log", "", "", false},
		{"/version", "", "", false},
	} {
		_, ok := parseRead(readRequest(context.Background(), tc.path, tc.query, tc.accept), tc.path)
		if ok != tc.want {
			t.Errorf("%s?%s (Accept %q): cache answers %v, want %v", tc.path, tc.query, tc.accept, ok, tc.want)
		}
	}
}

func labelled(ns, name, rv, app string) *unstructured.Unstructured {
	u := configMap(ns, name, rv, "x")
	u.SetLabels(map[string]string{"app": app})
	return u
}

func filledCache(t *testing.T, objects ...any) *resourceCache {
	t.Helper()
	s := NewStore(NewMemory(0), nil)
	s.SetListKind("ConfigMapList")
	if err := s.Replace(objects, "100"); err != nil {
		t.Fatal(err)
	}
	return &resourceCache{store: s}
}

func listFrom(t *testing.T, rc *resourceCache, path, query string) corev1.ConfigMapList {
	t.Helper()
	req := readRequest(context.Background(), path, query, "")
	q, ok := parseRead(req, path)
	if !ok {
		t.Fatalf("%s?%s not for the cache", path, query)
	}
	rec := httptest.NewRecorder()
	(&Reads{}).list(rec, rc, q)
	var l corev1.ConfigMapList
	if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil || rec.Code != http.StatusOK || l.Kind != "ConfigMapList" || l.APIVersion != "v1" {
		t.Fatalf("list %s?%s: %d %v %s", path, query, rec.Code, err, rec.Body)
	}
	return l
}

func names(l corev1.ConfigMapList) string {
	var n []string
	for _, cm := range l.Items {
		n = append(n, cm.Namespace+"/"+cm.Name)
	}
	return strings.Join(n, ",")
}

// Lists from the cache: in key order, filtered by namespace and selectors,
// paged with tokens that go on where the last page ended.
func TestListFromCache(t *testing.T) {
	rc := filledCache(t, labelled("b", "x", "1", "web"), labelled("a", "y", "2", "db"), labelled("a", "x", "3", "web"), labelled("c", "z", "4", "web"))
	for _, tc := range []struct{ path, query, want string }{
		{"/api/v1/configmaps", "resourceVersion=0", "a/x,a/y,b/x,c/z"},
		{"/api/v1/namespaces/a/configmaps", "", "a/x,a/y"},
		{"/api/v1/configmaps", "labelSelector=app%3Dweb", "a/x,b/x,c/z"},
		{"/api/v1/configmaps", "fieldSelector=metadata.name%3Dx", "a/x,b/x"},
		{"/api/v1/configmaps", "fieldSelector=metadata.namespace!%3Da", "b/x,c/z"},
	} {
		l := listFrom(t, rc, tc.path, tc.query)
		if got := names(l); got != tc.want || l.ResourceVersion != "100" {
			t.Errorf("%s?%s: %s at %q, want %s at 100", tc.path, tc.query, got, l.ResourceVersion, tc.want)
		}
	}
	var pages []string
	query := "limit=3"
	for i := 0; ; i++ {
		l := listFrom(t, rc, "/api/v1/configmaps", query)
		pages = append(pages, names(l))
		if l.Continue == "" {
			break
		}
		if l.RemainingItemCount == nil || *l.RemainingItemCount != 1 || i > 0 {
			t.Fatalf("page %d: remaining %v, continue %q", i, l.RemainingItemCount, l.Continue)
		}
		query = "limit=3&continue=" + url.QueryEscape(l.Continue)
	}
	if got := strings.Join(pages, " | "); got != "a/x,a/y,b/x | c/z" {
		t.Errorf("pages %s, want a/x,a/y,b/x | c/z", got)
	}
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{ header http.Header }

func (d discard) Header() http.Header         { return d.header }
func (d discard) WriteHeader(int)             {}
func (d discard) Write(b []byte) (int, error) { return len(b), nil }

// lines reads a watch's events as the handler writes them.
type lines struct {
	header http.Header
	w      *io.PipeWriter
}

func (l *lines) Header() http.Header         { return l.header }
func (l *lines) WriteHeader(int)             {}
func (l *lines) Write(b []byte) (int, error) { return l.w.Write(b) }

type watchEvent struct {
	Type   string           `json:"type"`
	Object corev1.ConfigMap `json:"object"`
}

// startWatch serves a watch of path?query from rc until ctx ends; done
// tells whether the watch started.
func startWatch(ctx context.Context, t *testing.T, rc *resourceCache, path, query, accept string) (*bufio.Scanner, <-chan bool) {
	t.Helper()
	req := readRequest(ctx, path, query, accept)
	q, ok := parseRead(req, path)
	if !ok {
		t.Fatalf("%s?%s not for the cache", path, query)
	}
	pr, pw := io.Pipe()
	done := make(chan bool)
	go func() {
		done <- (&Reads{}).watch(&lines{header: http.Header{}, w: pw}, req, rc, q, time.Hour, func() {})
		pw.Close()
	}()
	return bufio.NewScanner(pr), done
}

// Watches from the cache: the current objects first (from "0"), then the
// changes as the selection sees them: an object that leaves it is DELETED,
// one that comes into it ADDED; bookmarks only when asked for.
func TestWatchFromCache(t *testing.T) {
	rc := filledCache(t, labelled("a", "x", "1", "web"), labelled("a", "y", "2", "db"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, done := startWatch(ctx, t, rc, "/api/v1/configmaps", "watch=true&resourceVersion=0&labelSelector=app%3Dweb&allowWatchBookmarks=true", "")
	expect := func(typ, name, rv string) {
		t.Helper()
		if !events.Scan() {
			t.Fatalf("no event, want %s %s", typ, name)
		}
		var ev watchEvent
		if err := json.Unmarshal(events.Bytes(), &ev); err != nil {
			t.Fatalf("event %s: %v", events.Bytes(), err)
		}
		if ev.Type != typ || ev.Object.Name != name || ev.Object.ResourceVersion != rv {
			t.Fatalf("event %s %s at %s, want %s %s at %s", ev.Type, ev.Object.Name, ev.Object.ResourceVersion, typ, name, rv)
		}
	}
	expect("ADDED", "x", "1")
	s := rc.store
	steps := []func() error{
		func() error { return s.Update(labelled("a", "y", "3", "web")) }, // into the selection
		func() error { return s.Update(labelled("a", "x", "4", "db")) },  // out of it
		func() error { return s.Update(labelled("a", "y", "5", "web")) }, // within it
		func() error { s.UpdateResourceVersion("6"); return nil },
		func() error { return s.Delete(labelled("a", "y", "7", "web")) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	expect("ADDED", "y", "3")
	expect("DELETED", "x", "1") // the object as the watch last saw it
	expect("MODIFIED", "y", "5")
	expect("BOOKMARK", "", "6")
	expect("DELETED", "y", "7") // its final state, at the deletion
	cancel()
	select {
	case ok := <-done:
		if !ok {
			t.Error("watch reported it could not start")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end with its request")
	}
}

// memberSource answers lists of one object at the member's resourceVersion,
// counting them.
type memberSource struct {
	rv    string
	lists int
}

func (m *memberSource) Source(schema.GroupVersionResource) Source {
	return &cache.ListWatch{ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
		m.lists++
		l := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMapList"}}
		l.SetResourceVersion(m.rv)
		return l, nil
	}}
}

func (m *memberSource) Close() {}

// A consistent read asks the member for its resourceVersion, unless the
// cache has not reached what the member said last time.
func TestConsistentReadAsksOncePerAdvance(t *testing.T) {
	rc := filledCache(t) // at 100
	member := &memberSource{rv: "105"}
	r := &Reads{}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	for range 3 {
		if r.caughtUp(context.Background(), rc, member, gvr) {
			t.Fatal("a cache at 100 caught up with a member at 105")
		}
	}
	if member.lists != 1 {
		t.Errorf("%d lists of the member while the cache stayed behind, want 1", member.lists)
	}
	rc.store.UpdateResourceVersion("105")
	if !r.caughtUp(context.Background(), rc, member, gvr) || member.lists != 2 {
		t.Errorf("a cache at the member's 105: not caught up, or not asked again (%d lists)", member.lists)
	}
}

// A watch from a resourceVersion ahead of the cache is the cache's when the
// member has reached it (asked once per advance), the member's when not.
func TestWatchAheadOfTheCache(t *testing.T) {
	rc := filledCache(t) // at 100
	member := &memberSource{rv: "105"}
	r := &Reads{}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	if !r.memberReached(context.Background(), rc, member, gvr, "103") || !r.memberReached(context.Background(), rc, member, gvr, "105") {
		t.Fatal("a member at 105 has not reached 103 or 105")
	}
	if member.lists != 1 {
		t.Errorf("%d lists of the member for resourceVersions it was known to have, want 1", member.lists)
	}
	if r.memberReached(context.Background(), rc, member, gvr, "110") || member.lists != 2 {
		t.Errorf("a member at 105 reached 110, or was not asked again (%d lists)", member.lists)
	}
}

// A page of a list the cache began that the cache cannot answer any more is
// 410, not the member's (which would not know the token).
func TestCachePageWithoutCacheIsExpired(t *testing.T) {
	r := &Reads{Manager: &Manager{members: map[string]*member{}}}
	path := "/api/v1/configmaps"
	token := (&pageToken{Key: "a/x", Cache: true}).encode()
	rec := httptest.NewRecorder()
	if !r.ServeMember(rec, readRequest(context.Background(), path, "limit=1&continue="+url.QueryEscape(token), ""), "member-a", path) {
		t.Fatal("left to the member")
	}
	var st metav1.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || rec.Code != http.StatusGone || st.Reason != metav1.StatusReasonExpired {
		t.Fatalf("%d %s, want a 410 Expired Status", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	if r.ServeMember(rec, readRequest(context.Background(), path, "limit=1", ""), "member-a", path) {
		t.Fatalf("a first page without a cache answered: %d %s", rec.Code, rec.Body)
	}
}

// BenchmarkList is one member's part of a fan-out list from the cache: 100
// ConfigMaps of about 1 KiB, as in make bench-scale's fleet cache phase.
func BenchmarkList(b *testing.B) {
	value := strings.Repeat("x", 900)
	var objects []any
	for i := range 100 {
		objects = append(objects, configMap("ns", fmt.Sprintf("configmap-%06d", i), "1", value))
	}
	s := NewStore(NewMemory(0), nil)
	s.SetListKind("ConfigMapList")
	if err := s.Replace(objects, "100"); err != nil {
		b.Fatal(err)
	}
	rc := &resourceCache{store: s}
	const path = "/api/v1/namespaces/ns/configmaps"
	q, _ := parseRead(readRequest(context.Background(), path, "resourceVersion=0", ""), path)
	w := discard{header: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		(&Reads{}).list(w, rc, q)
	}
}
