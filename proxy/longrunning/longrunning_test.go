package longrunning

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestLimiterCapsEachUser(t *testing.T) {
	l := New(2)
	var releases []func()
	for i := 0; i < 2; i++ {
		release, ok := l.Acquire("alice", StreamSlots)
		if !ok {
			t.Fatalf("request %d of alice refused below the limit", i)
		}
		releases = append(releases, release)
	}
	if _, ok := l.Acquire("alice", StreamSlots); ok {
		t.Fatal("third request of alice admitted past the limit of 2")
	}
	// Another user has a budget of its own.
	bob, ok := l.Acquire("bob", StreamSlots)
	if !ok {
		t.Fatal("bob refused while alice is at her limit")
	}
	// Releasing frees a slot, once: a second call must not free another.
	releases[0]()
	releases[0]()
	if got := l.Open("alice"); got != 1 {
		t.Fatalf("alice holds %d after one release, want 1", got)
	}
	again, ok := l.Acquire("alice", StreamSlots)
	if !ok {
		t.Fatal("alice refused after a release")
	}
	if _, ok := l.Acquire("alice", StreamSlots); ok {
		t.Fatal("a double release freed a second slot")
	}
	again()
	releases[1]()
	bob()
	// Nothing is left behind once every request ended.
	if n := l.Users(); n != 0 {
		t.Fatalf("%d users tracked after every request ended", n)
	}
}

func TestNoLimit(t *testing.T) {
	for _, max := range []int{0, -1} {
		l := New(max)
		if l != nil || l.Max() != 0 {
			t.Fatalf("New(%d) = %v, want nil (no limit)", max, l)
		}
		for i := 0; i < 100; i++ {
			release, ok := l.Acquire("alice", StreamSlots)
			if !ok || release == nil {
				t.Fatalf("nil limiter refused request %d", i)
			}
			release()
		}
	}
}

// TestConcurrent: however requests interleave, no user ever holds more than
// max, and every slot comes back.
func TestConcurrent(t *testing.T) {
	const max = 3
	l := New(max)
	var open [2]atomic.Int32
	var peak atomic.Int32
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := g % 2
			user := []string{"alice", "system:serviceaccount:fleet:controller"}[u]
			for i := 0; i < 500; i++ {
				release, ok := l.Acquire(user, StreamSlots)
				if !ok {
					continue
				}
				n := open[u].Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				open[u].Add(-1)
				release()
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > max {
		t.Fatalf("a user held %d requests at once, limit %d", p, max)
	}
	if n := l.Users(); n != 0 {
		t.Fatalf("%d users tracked after every request ended", n)
	}
}

// An exec, attach or port-forward session takes the slots of what it holds;
// a cap below one session's slots still admits one session at a time.
func TestSessionsTakeTheirSlots(t *testing.T) {
	l := New(4)
	session, ok := l.Acquire("alice", SessionSlots)
	if !ok {
		t.Fatal("a session refused with 4 slots free")
	}
	watch, ok := l.Acquire("alice", StreamSlots)
	if !ok {
		t.Fatal("a watch refused with 1 slot free")
	}
	if got := l.Open("alice"); got != SessionSlots+StreamSlots {
		t.Fatalf("alice takes %d slots, want %d", got, SessionSlots+StreamSlots)
	}
	if _, ok := l.Acquire("alice", StreamSlots); ok {
		t.Fatal("a watch admitted with every slot taken")
	}
	watch()
	if _, ok := l.Acquire("alice", SessionSlots); ok {
		t.Fatal("a second session admitted with 1 slot free")
	}
	session()
	if got := l.Open("alice"); got != 0 {
		t.Fatalf("alice takes %d slots after both ended", got)
	}

	small := New(2)
	first, ok := small.Acquire("bob", SessionSlots)
	if !ok {
		t.Fatal("a session refused by a cap of 2 with nothing open")
	}
	if _, ok := small.Acquire("bob", SessionSlots); ok {
		t.Fatal("a second session admitted past a cap of 2")
	}
	if _, ok := small.Acquire("bob", StreamSlots); ok {
		t.Fatal("a watch admitted next to a session past a cap of 2")
	}
	first()
	if n := small.Users(); n != 0 {
		t.Fatalf("%d users tracked after the session ended", n)
	}
}
