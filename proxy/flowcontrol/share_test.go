package flowcontrol

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// admitted counts the admissions of n requests at the clock's current time;
// admitted in-flight slots are held.
func admitted(sc *Schema, r Request, n int) int {
	ok := 0
	for i := 0; i < n; i++ {
		if _, _, a := sc.Admit(r); a {
			ok++
		}
	}
	return ok
}

func sharedSchema(t *testing.T, s gatewayv1alpha1.FlowControlSchema, clk *clocktesting.FakeClock, share *Share) *Schema {
	t.Helper()
	sc := NewSet(nil, []gatewayv1alpha1.FlowControlSchema{s}, clk, share).Schema(s.Name)
	if sc == nil {
		t.Fatalf("schema %q not compiled", s.Name)
	}
	return sc
}

// A token bucket of 20 qps and burst 8 among 2 replicas: 10 qps and burst 4 on
// each. Back to one replica, the same bucket (its tokens kept) refills at 20
// qps up to 8.
func TestShareTokenBucket(t *testing.T) {
	r := Request{User: "alice"}
	for _, d := range []gatewayv1alpha1.FlowDistinguisher{"", gatewayv1alpha1.FlowDistinguisherUser} {
		t.Run("distinguisher="+string(d), func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			share := NewShare(clk)
			share.SetReplicas(2)
			sc := sharedSchema(t, distinguished(bucket("tb", 20, 8), d), clk, share)
			if got := admitted(sc, r, 20); got != 4 {
				t.Fatalf("2 replicas: a full bucket admitted %d, want burst 8/2 = 4", got)
			}
			clk.Step(time.Second)
			if got := admitted(sc, r, 20); got != 4 {
				t.Fatalf("2 replicas, 1s later: admitted %d, want 4 (10 qps capped by burst 4)", got)
			}
			clk.Step(200 * time.Millisecond)
			if got := admitted(sc, r, 20); got != 2 {
				t.Fatalf("2 replicas, 200ms later: admitted %d, want 2 (10 qps)", got)
			}

			share.SetReplicas(1)
			clk.Step(200 * time.Millisecond)
			if got := admitted(sc, r, 20); got != 4 {
				t.Fatalf("1 replica, 200ms later: admitted %d, want 4 (20 qps)", got)
			}
			clk.Step(time.Second)
			if got := admitted(sc, r, 20); got != 8 {
				t.Fatalf("1 replica, 1s later: admitted %d, want the whole burst 8", got)
			}

			// More replicas than burst or qps: each still admits something.
			share.SetReplicas(100)
			clk.Step(5 * time.Second)
			if got := admitted(sc, r, 20); got != 1 {
				t.Fatalf("100 replicas: admitted %d, want burst 1 (the floor)", got)
			}
		})
	}
}

// The token count is kept across a re-split: a bucket emptied just before a
// replica left is not refilled by the change.
func TestShareKeepsTokens(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	share := NewShare(clk)
	sc := sharedSchema(t, bucket("tb", 10, 10), clk, share)
	if got := admitted(sc, Request{}, 10); got != 10 {
		t.Fatalf("admitted %d, want 10", got)
	}
	share.SetReplicas(2)
	share.SetReplicas(1)
	if got := admitted(sc, Request{}, 10); got != 0 {
		t.Fatalf("an empty bucket admitted %d after re-splits, want 0", got)
	}
}

// Max in-flight 5 among 2 replicas: 2 each (floor); among 10, 1 each; max 0,
// the emergency brake, refuses on every replica.
func TestShareMaxInflight(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	for _, tt := range []struct {
		max      int32
		replicas int
		want     int
	}{
		{5, 1, 5}, {5, 2, 2}, {5, 10, 1}, {0, 1, 0}, {0, 3, 0},
	} {
		share := NewShare(clk)
		share.SetReplicas(tt.replicas)
		for _, d := range []gatewayv1alpha1.FlowDistinguisher{"", gatewayv1alpha1.FlowDistinguisherNamespace} {
			sc := sharedSchema(t, distinguished(inflight("mi", tt.max, false), d), clk, share)
			if got := admitted(sc, Request{Namespace: "ns"}, 20); got != tt.want {
				t.Errorf("max %d, %d replicas, distinguisher %q: %d in flight, want %d", tt.max, tt.replicas, d, got, tt.want)
			}
		}
	}
}

// A schema of a recompiled cluster keeps its limiter only with the same share.
func TestShareNewSetReuse(t *testing.T) {
	schemas := []gatewayv1alpha1.FlowControlSchema{bucket("tb", 1, 1)}
	a, b := NewShare(nil), NewShare(nil)
	first := NewSet(nil, schemas, nil, a)
	if NewSet(first, schemas, nil, a).Schema("tb") != first.Schema("tb") {
		t.Error("same share: the limiter was not reused")
	}
	if NewSet(first, schemas, nil, b).Schema("tb") == first.Schema("tb") {
		t.Error("another share: the limiter was reused")
	}
}

func TestShareSetReplicas(t *testing.T) {
	s := NewShare(nil)
	for in, want := range map[int]int32{-1: 1, 0: 1, 1: 1, 3: 3} {
		s.SetReplicas(in)
		if got := s.Replicas(); got != want {
			t.Errorf("SetReplicas(%d): Replicas() = %d, want %d", in, got, want)
		}
	}
	if got := (*Share)(nil).Replicas(); got != 1 {
		t.Errorf("nil share: %d replicas, want 1", got)
	}
}
