package status

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
)

var testTiming = timing{leaseDuration: 2 * time.Second, renewDeadline: time.Second, retryPeriod: 50 * time.Millisecond}

// watchedHub reports every Lease Get of one candidate.
type watchedHub struct {
	kubernetes.Interface
	gets chan<- struct{}
}

func (h watchedHub) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return watchedCoordination{h.Interface.CoordinationV1(), h.gets}
}

type watchedCoordination struct {
	coordinationv1client.CoordinationV1Interface
	gets chan<- struct{}
}

func (c watchedCoordination) Leases(ns string) coordinationv1client.LeaseInterface {
	return watchedLeases{c.CoordinationV1Interface.Leases(ns), c.gets}
}

type watchedLeases struct {
	coordinationv1client.LeaseInterface
	gets chan<- struct{}
}

func (l watchedLeases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	select {
	case l.gets <- struct{}{}:
	default:
	}
	return l.LeaseInterface.Get(ctx, name, opts)
}

func TestLead(t *testing.T) {
	hub := fake.NewClientset()
	var (
		active   atomic.Int32
		overlaps atomic.Int32
	)
	started := make(chan string, 10)
	stopped := make(chan string, 10)
	fn := func(id string) func(ctx context.Context) {
		return func(ctx context.Context) {
			if active.Add(1) > 1 {
				overlaps.Add(1)
			}
			started <- id
			<-ctx.Done()
			active.Add(-1)
			stopped <- id
		}
	}
	var wg sync.WaitGroup
	run := func(id string, hub kubernetes.Interface) (context.CancelFunc, <-chan struct{}) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done)
			lead(ctx, hub, "kube-gateway", "kube-gateway-status", id, fn(id), testTiming)
		}()
		return cancel, done
	}
	t.Cleanup(wg.Wait)

	cancelA, doneA := run("a", hub)
	t.Cleanup(cancelA)
	if id := receive(t, started, "a leader"); id != "a" {
		t.Fatalf("%s leads, want a", id)
	}

	// b campaigns against a valid lease: several failed attempts, no start.
	bGets := make(chan struct{}, 1)
	cancelB, doneB := run("b", watchedHub{hub, bGets})
	t.Cleanup(cancelB)
	for range 5 {
		waitFor(t, bGets, "b to try the lease")
	}
	select {
	case id := <-started:
		t.Fatalf("%s started while a leads", id)
	default:
	}
	if h := holder(t, hub); h != "a" {
		t.Fatalf("lease held by %q, want a", h)
	}

	// a stops: it releases the lease after its fn returned, b takes over
	// within a retry period (not a lease duration).
	cancelA()
	waitFor(t, doneA, "a's Lead to return")
	if id := receive(t, stopped, "a's fn to stop"); id != "a" {
		t.Fatalf("%s stopped, want a", id)
	}
	begin := time.Now()
	if id := receive(t, started, "b to take over"); id != "b" {
		t.Fatalf("%s leads, want b", id)
	}
	if d := time.Since(begin); d >= testTiming.leaseDuration {
		t.Errorf("b took over after %s: the lease was not released", d)
	}
	if h := holder(t, hub); h != "b" {
		t.Fatalf("lease held by %q, want b", h)
	}

	cancelB()
	waitFor(t, doneB, "b's Lead to return")
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("fn ran on two candidates at once %d times", n)
	}
	if h := holder(t, hub); h != "" {
		t.Fatalf("lease still held by %q after every candidate stopped", h)
	}
}

// A leader that loses its lease stops fn and campaigns again.
func TestLeadLostLease(t *testing.T) {
	hub := fake.NewClientset()
	var partitioned atomic.Bool
	hub.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if partitioned.Load() {
			return true, nil, errors.New("partitioned")
		}
		return false, nil, nil
	})
	started := make(chan struct{}, 10)
	stopped := make(chan struct{}, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		lead(ctx, hub, "kube-gateway", "kube-gateway-status", "a", func(ctx context.Context) {
			started <- struct{}{}
			<-ctx.Done()
			stopped <- struct{}{}
		}, testTiming)
	}()
	defer func() { cancel(); <-done }()
	waitFor(t, started, "a to lead")

	// A cannot renew (as in a network partition): after the renew deadline it
	// has lost the lease and fn's context ends.
	partitioned.Store(true)
	waitFor(t, stopped, "a's fn to stop after losing the lease")
	// Back in touch: a leads again once its old lease expired.
	partitioned.Store(false)
	waitFor(t, started, "a to lead again")
}

func receive(t *testing.T, ch <-chan string, what string) string {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out after 10s waiting for %s", what)
		return ""
	}
}

func holder(t *testing.T, hub kubernetes.Interface) string {
	t.Helper()
	lease, err := hub.CoordinationV1().Leases("kube-gateway").Get(context.Background(), "kube-gateway-status", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

func TestIdentity(t *testing.T) {
	if a, b := Identity(), Identity(); a == b || a == "" {
		t.Fatalf("identities %q and %q", a, b)
	}
}
