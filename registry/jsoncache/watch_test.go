package jsoncache

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/endpoints/handlers"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// watcher serves watches whose events are copies of objects, as the watch
// cache sends a watch's initial events, through wrap when it is set; with
// fromList, wrap gets the objects themselves as initial events, as a LIST of
// the watch cache shares them, and a watch with no events.
type watcher struct {
	objects  []gatewayv1alpha1.UpstreamCluster
	wrap     func([]watch.Event, watch.Interface) watch.Interface
	fromList bool
}

func (s *watcher) New() runtime.Object     { return &gatewayv1alpha1.UpstreamCluster{} }
func (s *watcher) Destroy()                {}
func (s *watcher) NewList() runtime.Object { return &gatewayv1alpha1.UpstreamClusterList{} }
func (s *watcher) List(context.Context, *metainternalversion.ListOptions) (runtime.Object, error) {
	return &gatewayv1alpha1.UpstreamClusterList{Items: s.objects}, nil
}
func (s *watcher) ConvertToTable(ctx context.Context, obj runtime.Object, opts runtime.Object) (*metav1.Table, error) {
	return rest.NewDefaultTableConvertor(gatewayv1alpha1.Resource("upstreamclusters")).ConvertToTable(ctx, obj, opts)
}

func (s *watcher) Watch(context.Context, *metainternalversion.ListOptions) (watch.Interface, error) {
	w := watch.NewFakeWithChanSize(len(s.objects), false)
	var initial []watch.Event
	for i := range s.objects {
		if s.fromList {
			initial = append(initial, watch.Event{Type: watch.Added, Object: &s.objects[i]})
		} else {
			w.Add(s.objects[i].DeepCopy())
		}
	}
	w.Stop() // the events sent, the watch ends
	if s.wrap != nil {
		return s.wrap(initial, w), nil
	}
	return w, nil
}

// serveWatch runs a watch through k8s.io/apiserver's own handler, served
// with ns, and returns the body.
func serveWatch(t *testing.T, ns runtime.NegotiatedSerializer, store *watcher, accept string) []byte {
	t.Helper()
	scheme, _ := codecs(t)
	scope := &handlers.RequestScope{
		Namer:            handlers.ContextBasedNaming{Namer: meta.NewAccessor(), ClusterScoped: true},
		Serializer:       ns,
		ParameterCodec:   runtime.NewParameterCodec(scheme),
		Creater:          scheme,
		Convertor:        scheme,
		Defaulter:        scheme,
		Typer:            scheme,
		UnsafeConvertor:  scheme,
		TableConvertor:   store,
		Resource:         gatewayv1alpha1.SchemeGroupVersion.WithResource("upstreamclusters"),
		Kind:             gatewayv1alpha1.SchemeGroupVersion.WithKind("UpstreamCluster"),
		MetaGroupVersion: metav1.SchemeGroupVersion,
	}
	h := handlers.ListResource(store, store, scope, true, time.Minute)
	req := httptest.NewRequest(http.MethodGet, "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters?watch=true", nil)
	req.Header.Set("Accept", accept)
	req = req.WithContext(request.WithRequestInfo(req.Context(), &request.RequestInfo{
		IsResourceRequest: true, Verb: "watch", APIPrefix: "apis", APIGroup: gatewayv1alpha1.GroupName,
		APIVersion: gatewayv1alpha1.SchemeGroupVersion.Version, Resource: "upstreamclusters",
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("watch: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

func newCache(t *testing.T) (*Cache, runtime.NegotiatedSerializer) {
	t.Helper()
	_, plain := codecs(t)
	c, err := New(plain, gatewayv1alpha1.SchemeGroupVersion, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	return c, plain
}

func TestWatchEventsAreWrittenAsTheAPIServerWritesThem(t *testing.T) {
	c, plain := newCache(t)
	objects := clusters(20).Items
	objects[3].UID = "" // not kept
	want := serveWatch(t, plain, &watcher{objects: objects}, runtime.ContentTypeJSON)
	if n := bytes.Count(want, []byte(`"type":"ADDED"`)); n != len(objects) {
		t.Fatalf("%d events, want %d:\n%s", n, len(objects), want)
	}
	kept := &watcher{objects: objects, wrap: c.Watch}
	for round := range 2 {
		if got := serveWatch(t, c.NegotiatedSerializer(), kept, runtime.ContentTypeJSON); !bytes.Equal(got, want) {
			t.Fatalf("round %d:\n got %s\nwant %s", round, got, want)
		}
	}
	if got, want := c.Writes(), (Writes{WatchEncoded: 19, WatchKept: 19}); got != want {
		t.Fatalf("writes %+v, want %+v", got, want)
	}
	// Initial events from a LIST: the same bytes, from the same kept JSON,
	// and the shared objects left as they were.
	before := clusters(20).Items
	before[3].UID = ""
	listed := &watcher{objects: objects, wrap: c.Watch, fromList: true}
	if got := serveWatch(t, c.NegotiatedSerializer(), listed, runtime.ContentTypeJSON); !bytes.Equal(got, want) {
		t.Fatalf("initial events from a LIST:\n got %s\nwant %s", got, want)
	}
	if got, want := c.Writes(), (Writes{WatchEncoded: 19, WatchKept: 38}); got != want {
		t.Fatalf("writes %+v, want %+v", got, want)
	}
	if !apiequality.Semantic.DeepEqual(objects, before) {
		t.Fatal("writing the initial events changed the objects they share")
	}

	// Same UID and resourceVersion: the bytes written before, although the
	// object differs (storage never does that; this shows the cache answered).
	objects[1].Spec.Servers[0].Endpoint = "https://127.0.0.9:6443"
	if got := serveWatch(t, c.NegotiatedSerializer(), kept, runtime.ContentTypeJSON); bytes.Contains(got, []byte("127.0.0.9")) {
		t.Fatal("an unchanged resourceVersion was encoded again")
	}
	// A new resourceVersion is encoded again.
	objects[1].ResourceVersion = "99999"
	want = serveWatch(t, plain, &watcher{objects: objects}, runtime.ContentTypeJSON)
	if got := serveWatch(t, c.NegotiatedSerializer(), kept, runtime.ContentTypeJSON); !bytes.Equal(got, want) {
		t.Fatalf("after an update:\n got %s\nwant %s", got, want)
	}
}

// A Table holds relative times and PartialObjectMetadata is another object:
// watches that convert are encoded every time.
func TestConvertingWatchesAreNotKept(t *testing.T) {
	c, _ := newCache(t)
	kept := &watcher{objects: clusters(5).Items, wrap: c.Watch}
	for _, accept := range []string{
		"application/json;as=Table;v=v1;g=meta.k8s.io",
		"application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
	} {
		for range 2 {
			body := serveWatch(t, c.NegotiatedSerializer(), kept, accept)
			kind := accept[strings.Index(accept, "as=")+3 : strings.Index(accept, ";v=")]
			if !bytes.Contains(body, []byte(`"kind":"`+kind+`"`)) {
				t.Fatalf("%s: no %s in %s", accept, kind, body)
			}
		}
	}
	if got := c.Writes(); got != (Writes{}) {
		t.Fatalf("writes %+v, want none", got)
	}
}

func TestKeptWatchStops(t *testing.T) {
	c, _ := newCache(t)
	in := watch.NewFake()
	w := c.Watch(nil, in)
	obj := cluster(1)
	go in.Add(&obj)
	ev := <-w.ResultChan()
	if _, ok := ev.Object.(runtime.CacheableObject); !ok {
		t.Fatalf("event object %T is not wrapped", ev.Object)
	}
	if m, err := meta.Accessor(ev.Object); err != nil || m.GetName() != obj.Name {
		t.Fatalf("metadata of the wrapped object: %v %v", m, err)
	}
	w.Stop()
	if !in.IsStopped() {
		t.Fatal("the inner watch was not stopped")
	}
	for range w.ResultChan() {
	}
	w.Stop() // twice is fine
}

// A watch stopped while it sends its initial events ends: it sends no more
// of them and stops the watch they precede.
func TestKeptWatchStopsDuringInitialEvents(t *testing.T) {
	c, _ := newCache(t)
	list := clusters(3 * eventBuffer).Items
	initial := make([]watch.Event, len(list))
	for i := range list {
		initial[i] = watch.Event{Type: watch.Added, Object: &list[i]}
	}
	in := watch.NewFake()
	w := c.Watch(initial, in)
	if ev := <-w.ResultChan(); ev.Type != watch.Added {
		t.Fatalf("first event %s, want ADDED", ev.Type)
	}
	w.Stop()
	n := 1
	for range w.ResultChan() {
		n++
	}
	if n >= len(initial) {
		t.Fatalf("all %d initial events sent after Stop", n)
	}
	if !in.IsStopped() {
		t.Fatal("the inner watch was not stopped")
	}
}
