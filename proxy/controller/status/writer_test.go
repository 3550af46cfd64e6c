package status

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	clocktesting "k8s.io/utils/clock/testing"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1/validation"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/health"
)

// fakeStorage is an in-memory status storage with optimistic concurrency, like
// the generic registry behind StatusREST: an update must carry the stored
// resourceVersion, only the status changes, and the status is validated.
type fakeStorage struct {
	mu        sync.Mutex
	objects   map[string]*gatewayv1alpha1.UpstreamCluster
	rv        int
	updates   map[string]int // successful updates per name
	attempts  map[string]int // update calls per name
	conflicts int            // the next this many updates meet a concurrent writer
	// blockGet, if set, is waited for by the Get of blockName.
	blockName string
	blockGet  chan struct{}
	blocked   chan struct{} // if set, told when a Get starts waiting
}

var _ Storage = &fakeStorage{}

func newFakeStorage(names ...string) *fakeStorage {
	s := &fakeStorage{objects: map[string]*gatewayv1alpha1.UpstreamCluster{}, updates: map[string]int{}, attempts: map[string]int{}}
	for _, n := range names {
		s.rv++
		s.objects[n] = &gatewayv1alpha1.UpstreamCluster{ObjectMeta: metav1.ObjectMeta{
			Name: n, UID: types.UID("uid-" + n), Generation: 1, ResourceVersion: strconv.Itoa(s.rv),
		}}
	}
	return s
}

func (s *fakeStorage) New() runtime.Object { return &gatewayv1alpha1.UpstreamCluster{} }

func (s *fakeStorage) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	if err := requireNamespace(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	block, blocked := s.blockGet, s.blocked
	if name != s.blockName {
		block = nil
	}
	s.mu.Unlock()
	if block != nil {
		if blocked != nil {
			blocked <- struct{}{}
		}
		select {
		case <-block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	obj, ok := s.objects[name]
	if !ok {
		return nil, apierrors.NewNotFound(gatewayv1alpha1.Resource("upstreamclusters"), name)
	}
	return obj.DeepCopy(), nil
}

func (s *fakeStorage) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, _ *metav1.UpdateOptions) (runtime.Object, bool, error) {
	if err := requireNamespace(ctx); err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts[name]++
	gr := gatewayv1alpha1.Resource("upstreamclusters")
	old, ok := s.objects[name]
	if !ok {
		return nil, false, apierrors.NewNotFound(gr, name)
	}
	if s.conflicts > 0 { // another writer got there first
		s.conflicts--
		s.rv++
		old.ResourceVersion = strconv.Itoa(s.rv)
	}
	obj, err := objInfo.UpdatedObject(ctx, old.DeepCopy())
	if err != nil {
		return nil, false, err
	}
	uc := obj.(*gatewayv1alpha1.UpstreamCluster)
	if p := objInfo.Preconditions(); p != nil && p.UID != nil && *p.UID != old.UID {
		return nil, false, apierrors.NewConflict(gr, name, errors.New("UID precondition failed"))
	}
	if uc.ResourceVersion != old.ResourceVersion {
		return nil, false, apierrors.NewConflict(gr, name, errors.New("the object has been modified"))
	}
	if err := updateValidation(ctx, uc, old); err != nil {
		return nil, false, err
	}
	// The status strategy: everything but the status comes from the stored object.
	next := old.DeepCopy()
	next.Status = uc.Status
	if errs := validation.ValidateUpstreamClusterStatusUpdate(next, old); len(errs) > 0 {
		return nil, false, apierrors.NewInvalid(schema.GroupKind{Group: gatewayv1alpha1.GroupName, Kind: "UpstreamCluster"}, name, errs)
	}
	s.rv++
	next.ResourceVersion = strconv.Itoa(s.rv)
	s.objects[name] = next
	s.updates[name]++
	return next.DeepCopy(), false, nil
}

func (s *fakeStorage) stored(name string) *gatewayv1alpha1.UpstreamCluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objects[name].DeepCopy()
}

func (s *fakeStorage) counts(name string) (updates, attempts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updates[name], s.attempts[name]
}

type syncEvent struct {
	cluster string
	wrote   bool
	err     error
}

// startWriter runs a Writer over s until the test ends; its events are every
// processed cluster.
func startWriter(t *testing.T, s *fakeStorage, clk *clocktesting.FakePassiveClock) (*Writer, <-chan syncEvent, context.CancelFunc, <-chan struct{}) {
	t.Helper()
	w := NewWriter(s, clk)
	events := make(chan syncEvent, 100)
	w.onSync = func(cluster string, wrote bool, err error) { events <- syncEvent{cluster, wrote, err} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return w, events, cancel, done
}

// next waits for the next processed cluster.
func next(t *testing.T, events <-chan syncEvent) syncEvent {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no cluster processed within 10s")
		return syncEvent{}
	}
}

// waitFor fails the test if ch yields nothing within 10s.
func waitFor[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out after 10s waiting for %s", what)
	}
}

func expectSync(t *testing.T, events <-chan syncEvent, cluster string, wrote bool) {
	t.Helper()
	ev := next(t, events)
	if ev.cluster != cluster || ev.wrote != wrote || ev.err != nil {
		t.Fatalf("processed %+v, want cluster %s wrote=%v without error", ev, cluster, wrote)
	}
}

func ready(t *testing.T, uc *gatewayv1alpha1.UpstreamCluster) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(uc.Status.Conditions, gatewayv1alpha1.ConditionReady)
	if c == nil {
		t.Fatalf("no Ready condition in %+v", uc.Status)
	}
	return *c
}

func server(t *testing.T, uc *gatewayv1alpha1.UpstreamCluster, endpoint string) gatewayv1alpha1.ServerStatus {
	t.Helper()
	for _, s := range uc.Status.Servers {
		if s.Endpoint == endpoint {
			return s
		}
	}
	t.Fatalf("no server %s in %+v", endpoint, uc.Status.Servers)
	return gatewayv1alpha1.ServerStatus{}
}

const (
	epA = "https://192.0.2.10:6443"
	epB = "https://192.0.2.11:6443"
)

var t0 = time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)

func TestWriter(t *testing.T) {
	s := newFakeStorage("member-a")
	clk := clocktesting.NewFakePassiveClock(t0)
	w, events, _, _ := startWriter(t, s, clk)

	// First observation: servers, Ready and observedGeneration are written.
	both := []health.ServerHealth{
		{Endpoint: epA, Healthy: true, Reason: "ProbeSucceeded"},
		{Endpoint: epB, Healthy: true, Reason: "ProbeSucceeded"},
	}
	w.Observe("member-a", 1, both)
	expectSync(t, events, "member-a", true)
	uc := s.stored("member-a")
	if uc.Status.ObservedGeneration != 1 || len(uc.Status.Servers) != 2 ||
		uc.Status.Servers[0].Endpoint != epA || uc.Status.Servers[1].Endpoint != epB {
		t.Fatalf("status after the first observation: %+v", uc.Status)
	}
	for _, ep := range []string{epA, epB} {
		if s := server(t, uc, ep); !ptr.Deref(s.Healthy, false) || s.Reason != "ProbeSucceeded" || !s.LastTransitionTime.Time.Equal(t0) {
			t.Errorf("server %s: %+v", ep, s)
		}
	}
	r := ready(t, uc)
	if r.Status != metav1.ConditionTrue || r.Reason != ReasonServersHealthy || r.Message != "2 of 2 servers healthy" ||
		r.ObservedGeneration != 1 || !r.LastTransitionTime.Time.Equal(t0) {
		t.Fatalf("Ready: %+v", r)
	}

	// The same observation later writes nothing.
	clk.SetTime(t0.Add(time.Minute))
	w.Observe("member-a", 1, both)
	expectSync(t, events, "member-a", false)
	if n, _ := s.counts("member-a"); n != 1 {
		t.Fatalf("%d updates after an identical observation, want 1", n)
	}

	// One endpoint turns unhealthy: one write; only its transition time moves.
	t1 := t0.Add(2 * time.Minute)
	clk.SetTime(t1)
	w.Observe("member-a", 1, []health.ServerHealth{
		{Endpoint: epA, Healthy: true, Reason: "ProbeSucceeded"},
		{Endpoint: epB, Healthy: false, Reason: "ProbeFailed", Message: "connection refused"},
	})
	expectSync(t, events, "member-a", true)
	if n, _ := s.counts("member-a"); n != 2 {
		t.Fatalf("%d updates after one transition, want 2", n)
	}
	uc = s.stored("member-a")
	if a := server(t, uc, epA); !ptr.Deref(a.Healthy, false) || !a.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("server A changed: %+v", a)
	}
	if b := server(t, uc, epB); !isFalse(b.Healthy) || b.Reason != "ProbeFailed" || b.Message != "connection refused" || !b.LastTransitionTime.Time.Equal(t1) {
		t.Errorf("server B: %+v", b)
	}
	r = ready(t, uc)
	if r.Status != metav1.ConditionTrue || r.Reason != ReasonSomeServersHealthy || r.Message != "1 of 2 servers healthy" ||
		!r.LastTransitionTime.Time.Equal(t0) {
		t.Fatalf("Ready: %+v", r)
	}

	// Every endpoint unhealthy, at a new generation; the data plane's own
	// transition time is used.
	t2 := t0.Add(3 * time.Minute)
	clk.SetTime(t2.Add(time.Second))
	w.Observe("member-a", 2, []health.ServerHealth{
		{Endpoint: epA, Healthy: false, Reason: "ConnectionFailed", Since: t2},
		{Endpoint: epB, Healthy: false, Reason: "ProbeFailed", Message: "connection refused"},
	})
	expectSync(t, events, "member-a", true)
	uc = s.stored("member-a")
	if uc.Status.ObservedGeneration != 2 {
		t.Errorf("observedGeneration %d, want 2", uc.Status.ObservedGeneration)
	}
	if a := server(t, uc, epA); !isFalse(a.Healthy) || !a.LastTransitionTime.Time.Equal(t2) {
		t.Errorf("server A: %+v", a)
	}
	if b := server(t, uc, epB); !b.LastTransitionTime.Time.Equal(t1) {
		t.Errorf("server B changed: %+v", b)
	}
	r = ready(t, uc)
	// The message says why, from the first server judged unhealthy.
	if r.Status != metav1.ConditionFalse || r.Reason != ReasonNoHealthyServer || r.Message != "0 of 2 servers healthy; "+epA+": ConnectionFailed" ||
		r.ObservedGeneration != 2 || !r.LastTransitionTime.Time.Equal(t2.Add(time.Second)) {
		t.Fatalf("Ready: %+v", r)
	}

	// A disabled server is not why: the first enabled one that failed is.
	w.Observe("member-a", 3, []health.ServerHealth{
		{Endpoint: epA, Healthy: false, Reason: gatewayv1alpha1.ServerReasonDisabled, Message: "disabled in spec.servers"},
		{Endpoint: epB, Healthy: false, Reason: "ProbeFailed", Message: "GET /readyz: connection refused"},
	})
	expectSync(t, events, "member-a", true)
	if r := ready(t, s.stored("member-a")); r.Message != "0 of 2 servers healthy; "+epB+": ProbeFailed: GET /readyz: connection refused" {
		t.Fatalf("Ready message %q", r.Message)
	}

	// An older generation's report is ignored.
	w.Observe("member-a", 1, both)
	if o, _ := w.observation("member-a"); o.generation != 3 {
		t.Fatalf("observation of generation 1 replaced generation 3")
	}
}

func TestWriterRetriesConflicts(t *testing.T) {
	s := newFakeStorage("member-a")
	s.conflicts = 2
	w, events, _, _ := startWriter(t, s, clocktesting.NewFakePassiveClock(t0))
	w.Observe("member-a", 1, []health.ServerHealth{{Endpoint: epA, Healthy: true}})
	expectSync(t, events, "member-a", true)
	if updates, attempts := s.counts("member-a"); updates != 1 || attempts != 3 {
		t.Fatalf("%d updates in %d attempts, want 1 in 3", updates, attempts)
	}
	if r := ready(t, s.stored("member-a")); r.Status != metav1.ConditionTrue {
		t.Fatalf("Ready: %+v", r)
	}
}

func TestWriterForget(t *testing.T) {
	s := newFakeStorage("member-a", "member-b")
	w, events, _, _ := startWriter(t, s, clocktesting.NewFakePassiveClock(t0))
	healthy := []health.ServerHealth{{Endpoint: epA, Healthy: true}}
	w.Observe("member-a", 1, healthy)
	expectSync(t, events, "member-a", true)

	// Hold the worker on member-b while member-a changes and is forgotten:
	// member-a is still queued but must not be written.
	release := make(chan struct{})
	s.mu.Lock()
	s.blockName, s.blockGet = "member-b", release
	s.mu.Unlock()
	w.Observe("member-b", 1, healthy)
	w.Observe("member-a", 1, []health.ServerHealth{{Endpoint: epA, Healthy: false}})
	w.Forget("member-a")
	close(release)
	// Another worker may take member-a before member-b's write ends.
	got := map[string]syncEvent{}
	for range 2 {
		ev := next(t, events)
		got[ev.cluster] = ev
	}
	if b, a := got["member-b"], got["member-a"]; !b.wrote || b.err != nil || a.cluster != "member-a" || a.wrote || a.err != nil {
		t.Fatalf("processed %+v, want member-b written and member-a not, without errors", got)
	}
	if n, _ := s.counts("member-a"); n != 1 {
		t.Fatalf("%d updates of member-a, want 1 (none after Forget)", n)
	}
	if r := ready(t, s.stored("member-a")); r.Status != metav1.ConditionTrue {
		t.Fatalf("member-a written after Forget: %+v", r)
	}
}

// A cluster deleted from the storage before Forget is skipped without error.
func TestWriterDeletedCluster(t *testing.T) {
	s := newFakeStorage()
	w, events, _, _ := startWriter(t, s, clocktesting.NewFakePassiveClock(t0))
	w.Observe("gone", 1, []health.ServerHealth{{Endpoint: epA, Healthy: true}})
	expectSync(t, events, "gone", false)
}

// Observations made while not leading are written when Run starts.
func TestWriterWritesObservedOnStart(t *testing.T) {
	s := newFakeStorage("member-a", "member-b", "member-c")
	clk := clocktesting.NewFakePassiveClock(t0)
	w := NewWriter(s, clk)
	for _, c := range []string{"member-a", "member-b", "member-c"} {
		w.Observe(c, 1, []health.ServerHealth{{Endpoint: epA, Healthy: true}})
	}
	w.Forget("member-c")
	events := make(chan syncEvent, 10)
	w.onSync = func(cluster string, wrote bool, err error) { events <- syncEvent{cluster, wrote, err} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	got := map[string]bool{}
	for range 2 {
		ev := next(t, events)
		if ev.err != nil || !ev.wrote {
			t.Fatalf("processed %+v", ev)
		}
		got[ev.cluster] = true
	}
	if !got["member-a"] || !got["member-b"] {
		t.Fatalf("written: %v", got)
	}
	if n, _ := s.counts("member-c"); n != 0 {
		t.Fatalf("forgotten member-c written %d times", n)
	}
}

func TestWriterRunExitsOnCancel(t *testing.T) {
	s := newFakeStorage("member-a")
	w, events, cancel, done := startWriter(t, s, clocktesting.NewFakePassiveClock(t0))
	w.Observe("member-a", 1, []health.ServerHealth{{Endpoint: epA, Healthy: true}})
	expectSync(t, events, "member-a", true)

	// Also while a storage call is in flight.
	blocked := make(chan struct{}, 1)
	s.mu.Lock()
	s.blockName, s.blockGet, s.blocked = "member-a", make(chan struct{}), blocked // never released
	s.mu.Unlock()
	w.Observe("member-a", 1, []health.ServerHealth{{Endpoint: epA, Healthy: false}})
	waitFor(t, blocked, "the Get of member-a")
	cancel()
	waitFor(t, done, "Run to return after its context ended")
	// Not leading any more: observing still works and writes nothing.
	w.Observe("member-a", 1, []health.ServerHealth{{Endpoint: epB, Healthy: true}})
	if n, _ := s.counts("member-a"); n != 1 {
		t.Fatalf("%d updates, want 1", n)
	}
}

// What the member's discovery said about the dispatch rules survives later
// health observations of the same generation, not a new generation; rules that
// name nothing drop the condition.
func TestObserveServed(t *testing.T) {
	w := NewWriter(nil, clocktesting.NewFakePassiveClock(t0))
	servers := []health.ServerHealth{{Endpoint: epA, Healthy: true}}
	condition := func() *metav1.Condition {
		w.mu.Lock()
		o := w.observed["member-a"]
		w.mu.Unlock()
		return meta.FindStatusCondition(desiredStatus(&gatewayv1alpha1.UpstreamClusterStatus{}, o, nil, metav1.NewTime(t0)).Conditions,
			gatewayv1alpha1.ConditionDispatchResourcesServed)
	}
	w.ObserveServed("member-a", 1, true, []string{"x"}) // before any observation: ignored
	w.Observe("member-a", 1, servers)
	if c := condition(); c != nil {
		t.Fatalf("condition %+v before the check", c)
	}
	w.ObserveServed("member-a", 1, true, []string{`dispatch policy "p" rule 0: resource "namespace" of API group ""`})
	w.Observe("member-a", 1, servers) // new health, same generation
	if c := condition(); c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonUnservedResources || !strings.Contains(c.Message, `"namespace"`) {
		t.Fatalf("condition %+v, want False naming namespace", c)
	}
	w.ObserveServed("member-a", 0, true, nil) // an older generation: ignored
	if c := condition(); c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("condition %+v after a stale check", c)
	}
	w.Observe("member-a", 2, servers)
	if c := condition(); c != nil {
		t.Fatalf("condition %+v carried to a new generation", c)
	}
	w.ObserveServed("member-a", 2, true, nil)
	if c := condition(); c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonResourcesServed {
		t.Fatalf("condition %+v, want True", c)
	}
	st := desiredStatus(&gatewayv1alpha1.UpstreamClusterStatus{Conditions: []metav1.Condition{*condition()}},
		observation{generation: 3, servers: servers, served: &servedCheck{}}, nil, metav1.NewTime(t0))
	if c := meta.FindStatusCondition(st.Conditions, gatewayv1alpha1.ConditionDispatchResourcesServed); c != nil {
		t.Fatalf("condition %+v kept although the rules name nothing", c)
	}
}

// An outcome observed again unchanged (the caches' periodic report, a rule
// check or door check repeated) queues nothing: the writer would read the
// cluster only to find nothing to write.
func TestObserveUnchangedQueuesNothing(t *testing.T) {
	w := NewWriter(nil, clocktesting.NewFakePassiveClock(t0))
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer q.ShutDown()
	w.queue = q // as Run sets it; nobody takes from it here
	w.Observe("member-a", 1, []health.ServerHealth{{Endpoint: epA, Healthy: true}})
	caches := []gatewayv1alpha1.UpstreamClusterCacheStatus{{CachedResource: "cms", Objects: 3}}
	observe := map[string]func(){
		"caches": func() { w.ObserveCaches("member-a", caches) },
		"served": func() { w.ObserveServed("member-a", 1, true, []string{"x"}) },
		"door": func() {
			w.ObserveDoor("member-a", 1, true, &cluster.ConfigError{Reason: cluster.ReasonInvalidConfiguration, Err: errors.New("no")})
		},
	}
	for what, fn := range observe {
		fn()
		if q.Len() != 1 {
			t.Fatalf("%s: %d queued after a new outcome, want 1", what, q.Len())
		}
		c, _ := q.Get()
		q.Done(c)
		fn()
		if q.Len() != 0 {
			t.Errorf("%s: the same outcome again queued the cluster", what)
		}
	}
	caches[0].Objects = 4
	w.ObserveCaches("member-a", caches)
	if q.Len() != 1 {
		t.Errorf("changed caches: %d queued, want 1", q.Len())
	}
}

// A server not checked yet has no healthy field, and the cluster is Ready only
// once a server is known to be healthy.
func TestDesiredStatusNotChecked(t *testing.T) {
	now := metav1.NewTime(t0)
	notChecked := health.ServerHealth{Endpoint: epB, Healthy: true, Unknown: true, Reason: health.ReasonNotChecked, Message: "no probe has answered yet"}
	for _, tc := range []struct {
		name        string
		servers     []health.ServerHealth
		ready       metav1.ConditionStatus
		reason, msg string
	}{
		{"none checked", []health.ServerHealth{notChecked}, metav1.ConditionUnknown, ReasonNotChecked, "0 of 1 servers healthy, 1 not checked yet"},
		{"one healthy", []health.ServerHealth{{Endpoint: epA, Healthy: true, Reason: health.ReasonProbeSucceeded}, notChecked},
			metav1.ConditionTrue, ReasonSomeServersHealthy, "1 of 2 servers healthy, 1 not checked yet"},
		{"one unhealthy", []health.ServerHealth{{Endpoint: epA, Reason: health.ReasonProbeFailed}, notChecked},
			metav1.ConditionUnknown, ReasonNotChecked, "0 of 2 servers healthy, 1 not checked yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := desiredStatus(&gatewayv1alpha1.UpstreamClusterStatus{}, observation{generation: 1, servers: tc.servers}, nil, now)
			ready := meta.FindStatusCondition(st.Conditions, gatewayv1alpha1.ConditionReady)
			if ready == nil || ready.Status != tc.ready || ready.Reason != tc.reason || ready.Message != tc.msg {
				t.Errorf("Ready %+v, want %s %s %q", ready, tc.ready, tc.reason, tc.msg)
			}
			for _, s := range st.Servers {
				if s.Endpoint == epB && (s.Healthy != nil || s.Reason != health.ReasonNotChecked) {
					t.Errorf("server not checked yet: healthy=%v reason %s, want unset and NotChecked", *s.Healthy, s.Reason)
				}
				if s.Endpoint == epA && s.Healthy == nil {
					t.Errorf("checked server without healthy: %+v", s)
				}
			}
		})
	}
}

func TestDesiredStatus(t *testing.T) {
	now := metav1.NewTime(t0)
	t.Run("no servers", func(t *testing.T) {
		st := desiredStatus(&gatewayv1alpha1.UpstreamClusterStatus{}, observation{generation: 3}, nil, now)
		c := meta.FindStatusCondition(st.Conditions, gatewayv1alpha1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonNoHealthyServer || c.Message != "0 of 0 servers healthy" {
			t.Fatalf("Ready: %+v", c)
		}
	})
	t.Run("duplicates and long messages", func(t *testing.T) {
		long := string(make([]byte, 2*maxMessageLen))
		st := desiredStatus(&gatewayv1alpha1.UpstreamClusterStatus{}, observation{generation: 1, servers: []health.ServerHealth{
			{Endpoint: epA, Healthy: true, Message: long}, {Endpoint: epA, Healthy: false},
		}}, nil, now)
		if len(st.Servers) != 1 || !ptr.Deref(st.Servers[0].Healthy, false) || len(st.Servers[0].Message) != maxMessageLen {
			t.Fatalf("servers: %d, first healthy=%v message length %d", len(st.Servers), st.Servers[0].Healthy, len(st.Servers[0].Message))
		}
	})
	t.Run("removed endpoint", func(t *testing.T) {
		old := desiredStatus(&gatewayv1alpha1.UpstreamClusterStatus{}, observation{generation: 1, servers: []health.ServerHealth{
			{Endpoint: epA, Healthy: true}, {Endpoint: epB, Healthy: true},
		}}, nil, now)
		st := desiredStatus(old, observation{generation: 2, servers: []health.ServerHealth{{Endpoint: epA, Healthy: true}}}, nil, metav1.NewTime(t0.Add(time.Hour)))
		if len(st.Servers) != 1 || st.Servers[0].Endpoint != epA || !st.Servers[0].LastTransitionTime.Equal(&now) {
			t.Fatalf("servers: %+v", st.Servers)
		}
	})
}

// requireNamespace fails like the generic registry store does when the context
// does not say which namespace (none, for UpstreamClusters) the request is in.
func requireNamespace(ctx context.Context) error {
	if _, ok := genericapirequest.NamespaceFrom(ctx); !ok {
		return apierrors.NewInternalError(fmt.Errorf("no namespace information found in request context"))
	}
	return nil
}

// The member door's condition follows ObserveDoor: True while it serves,
// False with the reason and an Event when it cannot, gone without a door.
func TestObserveDoor(t *testing.T) {
	w := NewWriter(nil, clocktesting.NewFakePassiveClock(t0))
	servers := []health.ServerHealth{{Endpoint: epA, Healthy: true}}
	status := func(old *gatewayv1alpha1.UpstreamClusterStatus) *gatewayv1alpha1.UpstreamClusterStatus {
		w.mu.Lock()
		o := w.observed["member-a"]
		w.mu.Unlock()
		return desiredStatus(old, o, nil, metav1.NewTime(t0))
	}
	door := func(st *gatewayv1alpha1.UpstreamClusterStatus) *metav1.Condition {
		return meta.FindStatusCondition(st.Conditions, gatewayv1alpha1.ConditionMemberDoorReady)
	}
	w.ObserveDoor("member-a", 1, true, nil) // before any observation: ignored
	w.Observe("member-a", 1, servers)
	if c := door(status(&gatewayv1alpha1.UpstreamClusterStatus{})); c != nil {
		t.Fatalf("condition %+v before the door was compiled", c)
	}
	w.ObserveDoor("member-a", 1, true, nil)
	serving := status(&gatewayv1alpha1.UpstreamClusterStatus{})
	if c := door(serving); c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonDoorServing {
		t.Fatalf("condition %+v, want True Serving", c)
	}
	missing := &cluster.ConfigError{Reason: cluster.ReasonSecretNotFound, Err: errors.New("its member-door Secret kube-gateway/door was not found on the hub")}
	w.ObserveDoor("member-a", 1, true, missing)
	w.Observe("member-a", 1, servers) // new health, same generation: the door's state stays
	broken := status(serving)
	if c := door(broken); c == nil || c.Status != metav1.ConditionFalse || c.Reason != cluster.ReasonSecretNotFound || !strings.Contains(c.Message, "kube-gateway/door was not found") {
		t.Fatalf("condition %+v, want False SecretNotFound naming the Secret", c)
	}
	var events []string
	for _, e := range transitions(serving, broken) {
		events = append(events, e.reason+": "+e.message)
	}
	if len(events) != 1 || !strings.HasPrefix(events[0], EventMemberDoorUnavailable+": the member door cannot serve: its member-door Secret") {
		t.Errorf("events %q, want one %s naming the Secret", events, EventMemberDoorUnavailable)
	}
	w.ObserveDoor("member-a", 1, false, nil)
	if c := door(status(broken)); c != nil {
		t.Fatalf("condition %+v kept after the door was closed", c)
	}
}

// With shared health checks, a replica writes the status of the clusters it
// owns only; when ownership moves (Reshard), it writes those it took over.
func TestWriterOwnedClusters(t *testing.T) {
	s := newFakeStorage("member-a", "member-b")
	w := NewWriter(s, clocktesting.NewFakePassiveClock(t0))
	var mu sync.Mutex
	owned := map[string]bool{"member-a": true}
	w.Owns = func(c string) bool {
		mu.Lock()
		defer mu.Unlock()
		return owned[c]
	}
	events := make(chan syncEvent, 10)
	w.onSync = func(cluster string, wrote bool, err error) { events <- syncEvent{cluster, wrote, err} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	healthy := []health.ServerHealth{{Endpoint: epA, Healthy: true}}
	w.Observe("member-a", 1, healthy)
	expectSync(t, events, "member-a", true)
	w.Observe("member-b", 1, healthy)
	expectSync(t, events, "member-b", false)
	w.Reshard() // the first: checks every cluster it owns
	expectSync(t, events, "member-a", false)
	if n, _ := s.counts("member-b"); n != 0 {
		t.Fatalf("member-b, owned by another replica, written %d times", n)
	}

	mu.Lock()
	owned = map[string]bool{"member-b": true}
	mu.Unlock()
	w.Reshard()
	expectSync(t, events, "member-b", true)
	w.Observe("member-a", 1, []health.ServerHealth{{Endpoint: epA, Healthy: false}})
	expectSync(t, events, "member-a", false)
	if n, _ := s.counts("member-a"); n != 1 {
		t.Fatalf("member-a written %d times, want once (before it moved)", n)
	}
}

// status.caches is written as reported; a new health observation keeps it,
// and an empty report removes it.
func TestWriterCaches(t *testing.T) {
	s := newFakeStorage("member-a")
	clk := clocktesting.NewFakePassiveClock(t0)
	w, events, _, _ := startWriter(t, s, clk)
	servers := []health.ServerHealth{{Endpoint: epA, Healthy: true}}
	w.Observe("member-a", 1, servers)
	expectSync(t, events, "member-a", true)
	caches := []gatewayv1alpha1.UpstreamClusterCacheStatus{{CachedResource: "cms", Version: "v1", Resource: "configmaps",
		Synced: true, Objects: 3, Bytes: 300, ResourceVersion: "10"}}
	w.ObserveCaches("member-a", caches)
	expectSync(t, events, "member-a", true)
	if got := s.stored("member-a").Status.Caches; len(got) != 1 || got[0] != caches[0] {
		t.Fatalf("status.caches %+v, want %+v", got, caches)
	}
	// An unchanged report queues nothing (TestObserveUnchangedQueuesNothing).
	w.Observe("member-a", 1, []health.ServerHealth{{Endpoint: epA, Healthy: false, Reason: "ProbeFailed"}})
	expectSync(t, events, "member-a", true)
	if got := s.stored("member-a").Status.Caches; len(got) != 1 {
		t.Fatalf("status.caches %+v lost by a health observation", got)
	}
	w.ObserveCaches("member-a", nil)
	expectSync(t, events, "member-a", true)
	if got := s.stored("member-a").Status.Caches; got != nil {
		t.Fatalf("status.caches %+v after an empty report", got)
	}
}

// A cluster whose storage calls are slow does not hold up the others: the
// workers write different clusters at once, one cluster by one at a time.
func TestWriterWritesClustersConcurrently(t *testing.T) {
	s := newFakeStorage("member-a", "member-b")
	blocked, release := make(chan struct{}, 1), make(chan struct{})
	s.mu.Lock()
	s.blockName, s.blockGet, s.blocked = "member-a", release, blocked
	s.mu.Unlock()
	w, events, _, _ := startWriter(t, s, clocktesting.NewFakePassiveClock(t0))
	healthy := []health.ServerHealth{{Endpoint: epA, Healthy: true}}
	w.Observe("member-a", 1, healthy)
	waitFor(t, blocked, "the Get of member-a")
	w.Observe("member-b", 1, healthy)
	expectSync(t, events, "member-b", true)
	close(release)
	expectSync(t, events, "member-a", true)
}
