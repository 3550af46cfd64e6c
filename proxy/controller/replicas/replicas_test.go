package replicas

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

const ns = "kube-gateway"

func start(t *testing.T, client *fake.Clientset, group, identity string) (*Membership, *atomic.Int64) {
	t.Helper()
	var last atomic.Int64
	last.Store(1)
	m := New(Config{Client: client, Namespace: ns, Group: group, Identity: identity,
		RenewPeriod: 100 * time.Millisecond, Duration: time.Second,
		OnChange: func(n int) { last.Store(int64(n)) }})
	m.Start(context.Background())
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
