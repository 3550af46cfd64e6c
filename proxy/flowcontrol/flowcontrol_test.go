package flowcontrol

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	clocktesting "k8s.io/utils/clock/testing"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

var t0 = time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)

func exempt(name string) gatewayv1alpha1.FlowControlSchema {
	return gatewayv1alpha1.FlowControlSchema{Name: name, Exempt: &gatewayv1alpha1.ExemptFlowControl{}}
}

func inflight(name string, max int32, countLongRunning bool) gatewayv1alpha1.FlowControlSchema {
	return gatewayv1alpha1.FlowControlSchema{Name: name, MaxRequestsInflight: &gatewayv1alpha1.MaxRequestsInflightFlowControl{Max: max, CountLongRunning: countLongRunning}}
}

func bucket(name string, qps, burst int32) gatewayv1alpha1.FlowControlSchema {
	return gatewayv1alpha1.FlowControlSchema{Name: name, TokenBucket: &gatewayv1alpha1.TokenBucketFlowControl{QPS: *resource.NewQuantity(int64(qps), resource.DecimalSI), Burst: burst}}
}

func distinguished(s gatewayv1alpha1.FlowControlSchema, d gatewayv1alpha1.FlowDistinguisher) gatewayv1alpha1.FlowControlSchema {
	s.Distinguisher = d
	return s
}

func schema(t testing.TB, s gatewayv1alpha1.FlowControlSchema, clk *clocktesting.FakeClock) *Schema {
	t.Helper()
	set := NewSet(nil, []gatewayv1alpha1.FlowControlSchema{s}, clk, nil)
	sc := set.Schema(s.Name)
	if sc == nil {
		t.Fatalf("schema %q not compiled", s.Name)
	}
	return sc
}

// step is one Admit call of a table test, or a clock step, or the release of an
// earlier admission.
type step struct {
	advance time.Duration // step the clock first
	release int           // release the admission of step number release-1 (1-based) instead of admitting
	req     Request
	wantOK  bool
	wantRA  time.Duration // Retry-After when refused
}

func runSteps(t *testing.T, sc *Schema, clk *clocktesting.FakeClock, steps []step) {
	t.Helper()
	releases := make([]func(), len(steps))
	for i, st := range steps {
		clk.Step(st.advance)
		if st.release > 0 {
			rel := releases[st.release-1]
			if rel == nil {
				t.Fatalf("step %d: step %d holds nothing to release", i, st.release-1)
			}
			rel()
			continue
		}
		rel, ra, ok := sc.Admit(st.req)
		if ok != st.wantOK {
			t.Fatalf("step %d (%+v): ok = %v, want %v", i, st.req, ok, st.wantOK)
		}
		if ok {
			if rel == nil {
				t.Fatalf("step %d: admitted with a nil release", i)
			}
			if ra != 0 {
				t.Errorf("step %d: admitted with Retry-After %v", i, ra)
			}
			releases[i] = rel
			continue
		}
		if ra != st.wantRA {
			t.Errorf("step %d: Retry-After = %v, want %v", i, ra, st.wantRA)
		}
	}
}

func TestSchemaKinds(t *testing.T) {
	short := Request{User: "alice", Namespace: "default"}
	long := Request{User: "alice", Namespace: "default", LongRunning: true}
	ok := func(r Request) step { return step{req: r, wantOK: true} }
	no := func(r Request, ra time.Duration) step { return step{req: r, wantRA: ra} }
	after := func(d time.Duration, s step) step { s.advance = d; return s }
	release := func(i int) step { return step{release: i} }

	tests := []struct {
		name     string
		schema   gatewayv1alpha1.FlowControlSchema
		wantKind Kind
		steps    []step
	}{
		{
			name: "exempt admits everything", schema: exempt("s"), wantKind: KindExempt,
			steps: []step{ok(short), ok(short), ok(long), ok(short), ok(long)},
		},
		{
			name: "no limit set is exempt", schema: gatewayv1alpha1.FlowControlSchema{Name: "s"}, wantKind: KindExempt,
			steps: []step{ok(short), ok(short), ok(short)},
		},
		{
			name: "exempt wins over other limits", wantKind: KindExempt,
			schema: gatewayv1alpha1.FlowControlSchema{Name: "s", Exempt: &gatewayv1alpha1.ExemptFlowControl{},
				MaxRequestsInflight: &gatewayv1alpha1.MaxRequestsInflightFlowControl{Max: 0}},
			steps: []step{ok(short), ok(short)},
		},
		{
			name: "max in-flight 2", schema: inflight("s", 2, false), wantKind: KindMaxInflight,
			steps: []step{
				ok(short), ok(short), no(short, time.Second), no(short, time.Second),
				release(1), ok(short), no(short, time.Second),
				release(2), release(6), ok(short), ok(short), no(short, time.Second),
			},
		},
		{
			name: "max in-flight: release is idempotent", schema: inflight("s", 1, false), wantKind: KindMaxInflight,
			steps: []step{
				ok(short), release(1), release(1), release(1),
				ok(short), no(short, time.Second), no(short, time.Second),
			},
		},
		{
			name: "max in-flight: long-running admitted while a slot is free, holds none", schema: inflight("s", 2, false), wantKind: KindMaxInflight,
			steps: []step{
				ok(long), ok(long), ok(long), // hold nothing
				ok(short), ok(long), ok(short), // now saturated
				no(long, time.Second), no(short, time.Second),
				release(4), ok(long), ok(short), no(long, time.Second),
			},
		},
		{
			name: "max in-flight: countLongRunning holds slots", schema: inflight("s", 2, true), wantKind: KindMaxInflight,
			steps: []step{
				ok(long), ok(long), no(long, time.Second), no(short, time.Second),
				release(1), ok(short), no(long, time.Second),
			},
		},
		{
			name: "max in-flight 0 refuses everything", schema: inflight("s", 0, false), wantKind: KindMaxInflight,
			steps: []step{no(short, time.Second), no(long, time.Second)},
		},
		{
			name: "token bucket qps 1 burst 2", schema: bucket("s", 1, 2), wantKind: KindTokenBucket,
			steps: []step{
				ok(short), ok(long), no(short, time.Second), no(long, time.Second),
				after(500*time.Millisecond, no(short, time.Second)),
				after(500*time.Millisecond, ok(short)), no(short, time.Second),
				after(10*time.Second, ok(short)), ok(short), no(short, time.Second),
			},
		},
		{
			name: "token bucket qps 0.5: one request every two seconds", wantKind: KindTokenBucket,
			schema: gatewayv1alpha1.FlowControlSchema{Name: "s", TokenBucket: &gatewayv1alpha1.TokenBucketFlowControl{QPS: resource.MustParse("500m"), Burst: 1}},
			steps: []step{
				ok(short), no(short, 2*time.Second),
				after(time.Second, no(short, time.Second)),
				after(time.Second, ok(short)), no(short, 2*time.Second),
			},
		},
		{
			name: "token bucket: release is a no-op", schema: bucket("s", 1, 1), wantKind: KindTokenBucket,
			steps: []step{ok(short), release(1), no(short, time.Second)},
		},
		{
			name: "token bucket qps 0 refuses everything", schema: bucket("s", 0, 10), wantKind: KindTokenBucket,
			steps: []step{no(short, time.Second), after(time.Hour, no(short, time.Second))},
		},
		{
			name: "token bucket burst 0 refuses everything", schema: bucket("s", 10, 0), wantKind: KindTokenBucket,
			steps: []step{no(short, time.Second), after(time.Hour, no(short, time.Second))},
		},
		{
			name: "unknown distinguisher is none", schema: distinguished(inflight("s", 1, false), "Verb"), wantKind: KindMaxInflight,
			steps: []step{ok(short), no(Request{User: "bob", Namespace: "other"}, time.Second)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			sc := schema(t, tt.schema, clk)
			if sc.Name() != "s" || sc.Kind() != tt.wantKind {
				t.Fatalf("Name, Kind = %q, %q; want s, %q", sc.Name(), sc.Kind(), tt.wantKind)
			}
			runSteps(t, sc, clk, tt.steps)
		})
	}
}

func TestNilSetAndSchema(t *testing.T) {
	var set *Set
	if set.Schema("x") != nil || set.Len() != 0 {
		t.Fatal("nil set has schemas")
	}
	set = NewSet(nil, []gatewayv1alpha1.FlowControlSchema{exempt("a"), bucket("b", 1, 1)}, nil, nil)
	if set.Len() != 2 || set.Schema("c") != nil {
		t.Fatalf("Len = %d, Schema(c) = %v", set.Len(), set.Schema("c"))
	}
	var sc *Schema
	rel, _, ok := sc.Admit(Request{})
	if !ok || rel == nil || sc.Name() != "" || sc.Kind() != KindExempt {
		t.Fatal("a nil schema must admit everything")
	}
	rel()
}

// The numbers of the end-to-end test, on a fake clock.
func TestTokenBucketBurst30(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	sc := schema(t, bucket("list-pods", 5, 5), clk)
	burst := func() (admitted int) {
		for i := 0; i < 30; i++ {
			rel, ra, ok := sc.Admit(Request{User: "alice"})
			if ok {
				admitted++
				rel()
				continue
			}
			if ra != time.Second {
				t.Fatalf("request %d: Retry-After = %v, want 1s", i, ra)
			}
		}
		return admitted
	}
	if got := burst(); got != 5 {
		t.Fatalf("first burst: %d of 30 admitted, want 5", got)
	}
	clk.Step(200 * time.Millisecond)
	if got := burst(); got != 1 {
		t.Fatalf("after 200ms: %d of 30 admitted, want 1", got)
	}
	clk.Step(time.Second)
	if got := burst(); got != 5 {
		t.Fatalf("after 1s: %d of 30 admitted, want 5", got)
	}
}

func TestMaxInflight2(t *testing.T) {
	sc := schema(t, inflight("heavy", 2, false), clocktesting.NewFakeClock(t0))
	r1, _, ok1 := sc.Admit(Request{})
	r2, _, ok2 := sc.Admit(Request{})
	_, ra, ok3 := sc.Admit(Request{})
	if !ok1 || !ok2 || ok3 || ra != time.Second {
		t.Fatalf("admitted %v %v %v (Retry-After %v), want true true false (1s)", ok1, ok2, ok3, ra)
	}
	r1()
	r3, _, ok := sc.Admit(Request{})
	if !ok {
		t.Fatal("a released slot must readmit")
	}
	if _, _, ok := sc.Admit(Request{}); ok {
		t.Fatal("admitted a third concurrent request")
	}
	r2()
	r3()
}

func TestDistinguisherIsolation(t *testing.T) {
	tests := []struct {
		name   string
		schema gatewayv1alpha1.FlowControlSchema
		a, b   Request // a exhausts its flow, b must still pass
		sameA  Request // shares a's flow
	}{
		{
			name:   "token bucket by user",
			schema: distinguished(bucket("s", 1, 3), gatewayv1alpha1.FlowDistinguisherUser),
			a:      Request{User: "alice", Namespace: "ns1"},
			b:      Request{User: "bob", Namespace: "ns1"},
			sameA:  Request{User: "alice", Namespace: "ns2"},
		},
		{
			name:   "token bucket by namespace",
			schema: distinguished(bucket("s", 1, 3), gatewayv1alpha1.FlowDistinguisherNamespace),
			a:      Request{User: "alice", Namespace: "ns1"},
			b:      Request{User: "alice", Namespace: "ns2"},
			sameA:  Request{User: "bob", Namespace: "ns1"},
		},
		{
			name:   "cluster-scoped requests share the empty namespace",
			schema: distinguished(bucket("s", 1, 3), gatewayv1alpha1.FlowDistinguisherNamespace),
			a:      Request{User: "alice"},
			b:      Request{User: "alice", Namespace: "default"},
			sameA:  Request{User: "bob"},
		},
		{
			name:   "max in-flight by user",
			schema: distinguished(inflight("s", 3, false), gatewayv1alpha1.FlowDistinguisherUser),
			a:      Request{User: "alice"},
			b:      Request{User: "bob"},
			sameA:  Request{User: "alice", Namespace: "x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := schema(t, tt.schema, clocktesting.NewFakeClock(t0))
			for i := 0; i < 3; i++ {
				if _, _, ok := sc.Admit(tt.a); !ok {
					t.Fatalf("a's request %d refused", i)
				}
			}
			if _, _, ok := sc.Admit(tt.a); ok {
				t.Fatal("a's flow is not exhausted")
			}
			if _, _, ok := sc.Admit(tt.sameA); ok {
				t.Fatal("a request of a's flow got through")
			}
			for i := 0; i < 3; i++ {
				if _, _, ok := sc.Admit(tt.b); !ok {
					t.Fatalf("b's request %d refused: a's flow leaked into b's", i)
				}
			}
			if got := sc.flowCount(); got != 2 {
				t.Fatalf("%d flows, want 2", got)
			}
		})
	}
}

func TestNewSetReuse(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	v1 := []gatewayv1alpha1.FlowControlSchema{
		bucket("tb", 5, 5), inflight("mif", 1, false), exempt("free"),
		distinguished(bucket("per-user", 1, 1), gatewayv1alpha1.FlowDistinguisherUser),
	}
	set1 := NewSet(nil, v1, clk, nil)

	// Exhaust the bucket, hold the in-flight slot, exhaust alice's bucket.
	for i := 0; i < 5; i++ {
		if _, _, ok := set1.Schema("tb").Admit(Request{}); !ok {
			t.Fatal("tb refused within its burst")
		}
	}
	relOld, _, ok := set1.Schema("mif").Admit(Request{})
	if !ok {
		t.Fatal("mif refused")
	}
	if _, _, ok := set1.Schema("per-user").Admit(Request{User: "alice"}); !ok {
		t.Fatal("per-user refused")
	}

	// An unrelated change (a new schema) keeps every limiter and its state.
	set2 := NewSet(set1, append(v1[:len(v1):len(v1)], bucket("new", 1, 1)), clk, nil)
	for _, name := range []string{"tb", "mif", "free", "per-user"} {
		if set2.Schema(name) != set1.Schema(name) {
			t.Errorf("unchanged schema %q was not reused", name)
		}
	}
	if _, _, ok := set2.Schema("tb").Admit(Request{}); ok {
		t.Error("the reused bucket lost its state: admitted beyond the burst")
	}
	if _, _, ok := set2.Schema("mif").Admit(Request{}); ok {
		t.Error("the reused in-flight limiter lost its count")
	}
	if _, _, ok := set2.Schema("per-user").Admit(Request{User: "alice"}); ok {
		t.Error("the reused per-user flow lost its state")
	}

	// Changes get fresh limiters at once: qps of tb, max of mif, distinguisher of per-user.
	v3 := []gatewayv1alpha1.FlowControlSchema{
		bucket("tb", 6, 5), inflight("mif", 2, false), exempt("free"),
		distinguished(bucket("per-user", 1, 1), gatewayv1alpha1.FlowDistinguisherNamespace),
	}
	set3 := NewSet(set2, v3, clk, nil)
	if set3.Schema("free") != set1.Schema("free") {
		t.Error("unchanged exempt schema was not reused")
	}
	if set3.Schema("new") != nil {
		t.Error("a removed schema is still there")
	}
	for _, name := range []string{"tb", "mif", "per-user"} {
		if set3.Schema(name) == set2.Schema(name) {
			t.Fatalf("changed schema %q was reused", name)
		}
	}
	for i := 0; i < 5; i++ {
		if _, _, ok := set3.Schema("tb").Admit(Request{}); !ok {
			t.Fatalf("the changed bucket is not fresh: request %d refused", i)
		}
	}
	if _, _, ok := set3.Schema("per-user").Admit(Request{User: "alice"}); !ok {
		t.Error("the changed per-user schema is not fresh")
	}
	rel1, _, ok1 := set3.Schema("mif").Admit(Request{})
	rel2, _, ok2 := set3.Schema("mif").Admit(Request{})
	if _, _, ok3 := set3.Schema("mif").Admit(Request{}); !ok1 || !ok2 || ok3 {
		t.Fatalf("new max 2 limiter admitted %v %v %v, want true true false", ok1, ok2, ok3)
	}
	// The request admitted by the old limiter releases into the old one.
	relOld()
	if _, _, ok := set3.Schema("mif").Admit(Request{}); ok {
		t.Error("releasing an old request freed a slot of the new limiter")
	}
	if _, _, ok := set2.Schema("mif").Admit(Request{}); !ok {
		t.Error("releasing an old request did not free the old limiter's slot")
	}
	rel1()
	rel2()
}

func TestIdleFlowsForgotten(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	tb := schema(t, distinguished(bucket("tb", 1, 100), gatewayv1alpha1.FlowDistinguisherUser), clk)
	mif := schema(t, distinguished(inflight("mif", 1, false), gatewayv1alpha1.FlowDistinguisherUser), clk)

	for i := 0; i < 50; i++ {
		tb.Admit(Request{User: fmt.Sprint("idle-", i)})
		rel, _, _ := mif.Admit(Request{User: fmt.Sprint("idle-", i)})
		rel()
	}
	// drained has a bucket that a minute does not refill; busy holds a slot.
	for i := 0; i < 100; i++ {
		tb.Admit(Request{User: "drained"})
	}
	relBusy, _, _ := mif.Admit(Request{User: "busy"})
	if tb.flowCount() != 51 || mif.flowCount() != 51 {
		t.Fatalf("flows = %d, %d; want 51, 51", tb.flowCount(), mif.flowCount())
	}

	// Not idle for long enough yet: nothing forgotten.
	clk.Step(IdleTimeout)
	tb.Admit(Request{User: "trigger"})
	mif.Admit(Request{User: "trigger"})
	if tb.flowCount() != 52 || mif.flowCount() != 52 {
		t.Fatalf("after %v: flows = %d, %d; want 52, 52", IdleTimeout, tb.flowCount(), mif.flowCount())
	}

	clk.Step(sweepPeriod)
	tb.Admit(Request{User: "trigger"})
	mif.Admit(Request{User: "trigger"})
	// Left: trigger (just used), drained (bucket at 75 of 100) / busy (in flight).
	if tb.flowCount() != 2 || mif.flowCount() != 2 {
		t.Fatalf("after the sweep: flows = %d, %d; want 2, 2", tb.flowCount(), mif.flowCount())
	}
	if _, _, ok := mif.Admit(Request{User: "busy"}); ok {
		t.Fatal("busy's flow lost its in-flight request")
	}
	relBusy()
	// drained's bucket is full again 100s after it was emptied; busy is idle now.
	clk.Step(IdleTimeout + time.Second)
	tb.Admit(Request{User: "trigger"})
	mif.Admit(Request{User: "trigger"})
	if tb.flowCount() != 1 || mif.flowCount() != 1 {
		t.Fatalf("at last: flows = %d, %d; want 1, 1", tb.flowCount(), mif.flowCount())
	}
}

func TestFlowCap(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	sc := schema(t, distinguished(bucket("s", 1, 1), gatewayv1alpha1.FlowDistinguisherUser), clk)
	for i := 0; i < MaxFlows; i++ {
		if _, _, ok := sc.Admit(Request{User: fmt.Sprint("user-", i)}); !ok {
			t.Fatalf("user %d refused", i)
		}
	}
	if got := sc.flowCount(); got != MaxFlows {
		t.Fatalf("%d flows, want %d", got, MaxFlows)
	}
	// Beyond the cap, new keys share the overflow flow: one token for both.
	if _, _, ok := sc.Admit(Request{User: "late-1"}); !ok {
		t.Fatal("the first overflow request was refused")
	}
	if _, _, ok := sc.Admit(Request{User: "late-2"}); ok {
		t.Fatal("a second new key did not share the overflow flow")
	}
	if got := sc.flowCount(); got != MaxFlows {
		t.Fatalf("%d flows beyond the cap, want %d", got, MaxFlows)
	}
	// Tracked flows keep their own budget.
	clk.Step(time.Second)
	if _, _, ok := sc.Admit(Request{User: "user-7"}); !ok {
		t.Fatal("a tracked flow lost its budget to the overflow")
	}
	// Once the old flows are idle, a sweep makes room for new keys.
	clk.Step(IdleTimeout + time.Second)
	if _, _, ok := sc.Admit(Request{User: "late-3"}); !ok {
		t.Fatal("late-3 refused after the sweep")
	}
	if got := sc.flowCount(); got != 1 {
		t.Fatalf("%d flows after the sweep, want 1 (late-3)", got)
	}
	if hw := sc.flows.highWater; hw != 1 {
		t.Fatalf("the map was not rebuilt after shrinking: high water %d", hw)
	}
}

func TestRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		tokens, qps float64
		want        time.Duration
	}{
		{0, 5, time.Second},
		{0.99, 1, time.Second},
		{0, 1, time.Second},
		{0, 0.5, 2 * time.Second},
		{0.5, 0.25, 2 * time.Second},
		{0.1, 0.1, 9 * time.Second},
		{1, 5, time.Second}, // a token arrived meanwhile
		{0, 0, time.Second}, // no refill: nothing better to say
	} {
		if got := retryAfter(tt.tokens, tt.qps); got != tt.want {
			t.Errorf("retryAfter(%v, %v) = %v, want %v", tt.tokens, tt.qps, got, tt.want)
		}
	}
}

func TestAdmitAllocations(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	set := NewSet(nil, []gatewayv1alpha1.FlowControlSchema{
		exempt("exempt"), bucket("tb", 1<<30, 1<<30),
		distinguished(bucket("tb-user", 1<<30, 1<<30), gatewayv1alpha1.FlowDistinguisherUser),
	}, clk, nil)
	r := Request{User: "alice", Namespace: "default"}
	for _, name := range []string{"exempt", "tb", "tb-user"} {
		sc := set.Schema(name)
		sc.Admit(r) // create the flow of tb-user
		if n := testing.AllocsPerRun(1000, func() {
			rel, _, ok := sc.Admit(r)
			if !ok {
				t.Fatal("refused")
			}
			rel()
		}); n != 0 {
			t.Errorf("%s: %v allocations per Admit, want 0", name, n)
		}
	}
}

// Many goroutines admit and release, with flows forgotten and specs changed
// meanwhile: the in-flight count of a flow never exceeds its max.
func TestConcurrentMaxInflight(t *testing.T) {
	const (
		maxInflight = 3
		goroutines  = 32
		iterations  = 2000
	)
	clk := clocktesting.NewFakeClock(t0)
	schemas := []gatewayv1alpha1.FlowControlSchema{
		inflight("global", maxInflight, false),
		distinguished(inflight("per-user", maxInflight, false), gatewayv1alpha1.FlowDistinguisherUser),
		distinguished(bucket("tb", 1000, 10), gatewayv1alpha1.FlowDistinguisherNamespace),
	}
	var current atomic.Pointer[Set]
	current.Store(NewSet(nil, schemas, clk, nil))

	var global atomic.Int32
	var perUser [4]atomic.Int32
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	// The clock moves on and sets are recompiled (unchanged schemas reused).
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			clk.Step(7 * time.Second)
			current.Store(NewSet(current.Load(), schemas, clk, nil))
			runtime.Gosched() // let the workers run on a single P too
		}
	}()
	var workers sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		workers.Add(1)
		go func(g int) {
			defer workers.Done()
			u := g % len(perUser)
			r := Request{User: fmt.Sprint("user-", u), Namespace: fmt.Sprint("ns-", g)}
			for i := 0; i < iterations; i++ {
				set := current.Load()
				if rel, _, ok := set.Schema("global").Admit(r); ok {
					if n := global.Add(1); n > maxInflight {
						t.Errorf("%d requests in flight, max %d", n, maxInflight)
					}
					runtime.Gosched() // hold the slot a little
					global.Add(-1)
					rel()
					admitted.Add(1)
				} else {
					refused.Add(1)
				}
				if rel, _, ok := set.Schema("per-user").Admit(r); ok {
					if n := perUser[u].Add(1); n > maxInflight {
						t.Errorf("%d requests of user %d in flight, max %d", n, u, maxInflight)
					}
					runtime.Gosched()
					perUser[u].Add(-1)
					rel()
				}
				if rel, _, ok := set.Schema("tb").Admit(r); ok {
					rel()
				}
			}
		}(g)
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	if admitted.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("%d admitted, %d refused: the test did not contend", admitted.Load(), refused.Load())
	}
	t.Logf("global: %d admitted, %d refused", admitted.Load(), refused.Load())
	// Everything was released: the full budget is available again.
	set := current.Load()
	for _, name := range []string{"global", "per-user"} {
		for i := 0; i < maxInflight; i++ {
			if _, _, ok := set.Schema(name).Admit(Request{User: "user-0"}); !ok {
				t.Fatalf("%s: slot %d leaked", name, i)
			}
		}
	}
}
