package replicas

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

const ns = "kube-gateway"

func start(t *testing.T, client *fake.Clientset, group, identity string) (*Membership, *atomic.Int64) {
	t.Helper()
	return startWith(t, context.Background(), client, group, identity)
}

// startWith is start with ctx (its logger).
func startWith(t *testing.T, ctx context.Context, client *fake.Clientset, group, identity string) (*Membership, *atomic.Int64) {
	t.Helper()
	var last atomic.Int64
	last.Store(1)
	m := New(Config{Client: client, Namespace: ns, Group: group, Identity: identity,
		RenewPeriod: 100 * time.Millisecond, Duration: time.Second,
		OnChange: func(n int) { last.Store(int64(n)) }})
	m.Start(ctx)
	t.Cleanup(m.Stop)
	return m, &last
}

func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		last = cond()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, last)
	}
}

func wantLive(ms map[string]*Membership, want map[string]int) func() error {
	return func() error {
		for name, m := range ms {
			if got := m.Live(); got != want[name] {
				return fmt.Errorf("%s counts %d replicas, want %d", name, got, want[name])
			}
		}
		return nil
	}
}

// Replicas of a group count each other, not those of another group; a
// stopped one deletes its Lease and the others count one less at once.
func TestMembership(t *testing.T) {
	client := fake.NewClientset()
	a, aSeen := start(t, client, "gw", "a")
	b, _ := start(t, client, "gw", "b")
	other, _ := start(t, client, "other", "o")
	all := map[string]*Membership{"a": a, "b": b, "other": other}
	eventually(t, "two replicas of gw", wantLive(all, map[string]int{"a": 2, "b": 2, "other": 1}))
	if n := aSeen.Load(); n != 2 {
		t.Errorf("OnChange was last told %d, want 2", n)
	}

	lease, err := client.CoordinationV1().Leases(ns).Get(context.Background(), b.LeaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Labels[LabelReplicaOf] != "gw" || ptr.Deref(lease.Spec.HolderIdentity, "") != "b" || ptr.Deref(lease.Spec.LeaseDurationSeconds, 0) != 1 {
		t.Errorf("b's Lease: labels %v, spec %+v", lease.Labels, lease.Spec)
	}

	b.Stop()
	if _, err := client.CoordinationV1().Leases(ns).Get(context.Background(), b.LeaseName(), metav1.GetOptions{}); err == nil {
		t.Error("b's Lease is still there after Stop")
	}
	eventually(t, "b stopped", wantLive(map[string]*Membership{"a": a}, map[string]int{"a": 1}))
	if n := aSeen.Load(); n != 1 {
		t.Errorf("OnChange was last told %d, want 1", n)
	}
}

// A replica stopped before it started (SIGTERM before it was ready) never
// writes a Lease: no other replica counts it.
func TestStopBeforeStart(t *testing.T) {
	client := fake.NewClientset()
	m := New(Config{Client: client, Namespace: ns, Group: "gw", Identity: "a", RenewPeriod: 100 * time.Millisecond, Duration: time.Second})
	m.Stop()
	m.Start(context.Background())
	t.Cleanup(m.Stop)
	if m.done != nil {
		t.Fatal("Start after Stop started the membership")
	}
	if leases, err := client.CoordinationV1().Leases(ns).List(context.Background(), metav1.ListOptions{}); err != nil || len(leases.Items) != 0 {
		t.Fatalf("Leases after Start following Stop: %v, %v; want none", leases, err)
	}
}

// A replica that died without deleting its Lease counts until the Lease
// expires, and its Lease is deleted some durations later.
func TestDeadReplica(t *testing.T) {
	client := fake.NewClientset()
	a, _ := start(t, client, "gw", "a")
	eventually(t, "a alone", wantLive(map[string]*Membership{"a": a}, map[string]int{"a": 1}))
	now := metav1.NewMicroTime(time.Now())
	dead := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw-dead", Labels: map[string]string{LabelReplicaOf: "gw"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("dead"), LeaseDurationSeconds: ptr.To[int32](1), RenewTime: &now},
	}
	if _, err := client.CoordinationV1().Leases(ns).Create(context.Background(), dead, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the dead replica's Lease seen", wantLive(map[string]*Membership{"a": a}, map[string]int{"a": 2}))
	eventually(t, "the dead replica's Lease expired", wantLive(map[string]*Membership{"a": a}, map[string]int{"a": 1}))
	eventually(t, "the dead replica's Lease deleted", func() error {
		if _, err := client.CoordinationV1().Leases(ns).Get(context.Background(), dead.Name, metav1.GetOptions{}); err == nil {
			return errors.New("still there")
		}
		return nil
	})
}

// A replica that cannot write its Lease counts 1 although it sees two others;
// they do not count it.
func TestCannotWrite(t *testing.T) {
	client := fake.NewClientset()
	refuse := func(action k8stesting.Action) (bool, runtime.Object, error) {
		var lease *coordinationv1.Lease
		switch a := action.(type) {
		case k8stesting.CreateAction:
			lease, _ = a.GetObject().(*coordinationv1.Lease)
		case k8stesting.UpdateAction:
			lease, _ = a.GetObject().(*coordinationv1.Lease)
		}
		if lease != nil && ptr.Deref(lease.Spec.HolderIdentity, "") == "readonly" {
			return true, nil, errors.New("forbidden")
		}
		return false, nil, nil
	}
	client.PrependReactor("create", "leases", refuse)
	client.PrependReactor("update", "leases", refuse)
	ok1, _ := start(t, client, "gw", "ok1")
	ok2, _ := start(t, client, "gw", "ok2")
	readonly, _ := start(t, client, "gw", "readonly")
	eventually(t, "ok1 and ok2 count each other", wantLive(map[string]*Membership{"ok1": ok1, "ok2": ok2}, map[string]int{"ok1": 2, "ok2": 2}))
	eventually(t, "readonly sees ok1 and ok2", func() error {
		readonly.mu.Lock()
		defer readonly.mu.Unlock()
		for _, m := range []*Membership{ok1, ok2} {
			if o, seen := readonly.seen[m.LeaseName()]; !seen || time.Since(o.at) >= o.duration {
				return fmt.Errorf("%s's Lease not seen live", m.cfg.Identity)
			}
		}
		return nil
	})
	if err := wantLive(map[string]*Membership{"ok1": ok1, "ok2": ok2, "readonly": readonly}, map[string]int{"ok1": 2, "ok2": 2, "readonly": 1})(); err != nil {
		t.Fatal(err)
	}
}

// A replica that may not list or watch Leases counts 1 and says so once, with
// what it costs, not at every retry of its informer.
func TestCannotListOrWatchLogsOnce(t *testing.T) {
	sink := &errorSink{}
	ctx := klog.NewContext(context.Background(), logr.New(sink))

	client := fake.NewClientset()
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: coordinationv1.GroupName, Resource: "leases"}, "", errors.New("RBAC: no list or watch"))
	var tries atomic.Int64
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		tries.Add(1)
		return true, nil, forbidden
	})
	client.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
		tries.Add(1)
		return true, nil, forbidden
	})
	m, _ := startWith(t, ctx, client, "gw", "blind")
	// The informer retries after 0.8 s, 1.6 s, ...; the Lease duration (1 s)
	// passes meanwhile, after which the replica knows it cannot see its own.
	eventually(t, "three refused lists or watches", func() error {
		if n := tries.Load(); n < 3 {
			return fmt.Errorf("%d tries", n)
		}
		return nil
	})
	if n := m.Live(); n != 1 {
		t.Errorf("counts %d replicas, want 1", n)
	}
	errs := sink.errors()
	if len(errs) != 1 || !strings.Contains(errs[0], "whole flow-control limits") {
		t.Fatalf("%d errors logged after %d refused lists or watches, want one that says whole limits are enforced:\n%s", len(errs), tries.Load(), strings.Join(errs, "\n"))
	}
}

// errorSink records the errors logged through it.
type errorSink struct {
	mu   sync.Mutex
	errs []string
}

func (s *errorSink) errors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.errs)
}

func (s *errorSink) Init(logr.RuntimeInfo)          {}
func (s *errorSink) Enabled(int) bool               { return true }
func (s *errorSink) Info(int, string, ...any)       {}
func (s *errorSink) WithValues(...any) logr.LogSink { return s }
func (s *errorSink) WithName(string) logr.LogSink   { return s }
func (s *errorSink) Error(err error, msg string, _ ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, fmt.Sprintf("%s: %v", msg, err))
}

// Replicas that see each other own every cluster once between them, and the
// same owner for each; once one stops, the other owns everything. A replica
// that does not see its own Lease (not started) owns everything and says
// it does not know the others.
func TestOwns(t *testing.T) {
	client := fake.NewClientset()
	idle := New(Config{Client: client, Namespace: ns, Group: "gw", Identity: "idle"})
	if owns, sees := idle.Owns("member-a"); !owns || sees {
		t.Errorf("a replica not started: owns %v, sees %v; want true, false", owns, sees)
	}
	var told atomic.Int64
	a := New(Config{Client: client, Namespace: ns, Group: "gw", Identity: "a",
		RenewPeriod: 100 * time.Millisecond, Duration: time.Second, OnMembers: func() { told.Add(1) }})
	a.Start(context.Background())
	t.Cleanup(a.Stop)
	b, _ := start(t, client, "gw", "b")
	eventually(t, "two replicas of gw", wantLive(map[string]*Membership{"a": a, "b": b}, map[string]int{"a": 2, "b": 2}))
	clusters := make([]string, 300)
	for i := range clusters {
		clusters[i] = fmt.Sprintf("member-%d", i)
	}
	owned := map[*Membership]int{}
	for _, c := range clusters {
		n := 0
		for _, m := range []*Membership{a, b} {
			owns, sees := m.Owns(c)
			if !sees {
				t.Fatalf("a replica that counts 2 does not see them")
			}
			if owns {
				n++
				owned[m]++
			}
		}
		if n != 1 {
			t.Fatalf("%s owned by %d replicas, want 1", c, n)
		}
	}
	if owned[a] == 0 || owned[b] == 0 {
		t.Errorf("a owns %d, b %d of %d clusters", owned[a], owned[b], len(clusters))
	}
	before := told.Load()
	if before == 0 {
		t.Error("OnMembers was not told")
	}
	b.Stop()
	eventually(t, "b stopped", func() error {
		for _, c := range clusters {
			if owns, sees := a.Owns(c); !owns || !sees {
				return fmt.Errorf("a alone: %s owned %v (sees %v)", c, owns, sees)
			}
		}
		return nil
	})
	if told.Load() == before {
		t.Error("OnMembers was not told that b left")
	}
}
