package health

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// Probes due within one period of the grid start together, at its end, and
// a probe scheduled an interval ahead does not wake the scheduler: one
// wake-up per batch, not one per probe.
func TestSchedulerWakesOnGrid(t *testing.T) {
	t0 := time.Date(2026, 10, 1, 0, 0, 1, 0, time.UTC) // on the grid
	s := NewScheduler(clocktesting.NewFakeClock(t0))
	wakes := 0
	add := func(after time.Duration) {
		s.add(&dueProbe{index: -1}, t0.Add(after))
		select {
		case <-s.wake:
			wakes++
		default:
		}
	}
	add(10 * time.Millisecond)
	add(20 * time.Millisecond)
	add(batchPeriod - time.Millisecond)
	add(5 * time.Second)
	if want := t0.Add(batchPeriod); !s.armed.Equal(want) {
		t.Errorf("the scheduler wakes up at +%v, want +%v", s.armed.Sub(t0), batchPeriod)
	}
	if wakes != 1 {
		t.Errorf("%d wake-ups for probes due within one period, want 1", wakes)
	}
	add(time.Millisecond - batchPeriod) // overdue: sooner than the armed point
	if wakes != 2 || !s.armed.Equal(t0) {
		t.Errorf("an overdue probe: %d wake-ups, armed at +%v; want 2 and +0s", wakes, s.armed.Sub(t0))
	}
}

// The grid point keeps the monotonic clock reading of the time it rounds:
// the scheduler's waits, computed from it, do not follow steps of the wall
// clock.
func TestWakeAtKeepsMonotonicClock(t *testing.T) {
	now := time.Now()
	w := wakeAt(now)
	if w == w.Round(0) {
		t.Fatalf("wakeAt(%v) = %v has no monotonic clock reading", now, w)
	}
	if d := w.Sub(now); d < 0 || d >= batchPeriod {
		t.Errorf("wakeAt is %v after the time, want within [0, %v)", d, batchPeriod)
	}
	if w.Round(0) != w.Round(0).Truncate(batchPeriod) {
		t.Errorf("wakeAt(%v) = %v is off the grid", now, w)
	}
}

// A probe found not needed before the owners changed, or before the
// replica found a reason of its own to probe, is scheduled, not parked:
// what it was found on may be stale. Parked probes count as skipped at each
// due time, and when they are scheduled again no count is lost or repeated.
func TestSchedulerParks(t *testing.T) {
	t0 := time.Date(2026, 10, 1, 0, 0, 1, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	s := NewScheduler(clk)
	c := &Checker{cfg: Config{Interval: 5 * time.Second}}
	newProbe := func() *dueProbe { return &dueProbe{c: c, index: -1, parkedAt: -1} }
	a, b, d := newProbe(), newProbe(), newProbe()

	seen := s.handover()
	s.park(a, t0.Add(5*time.Second), seen)
	s.park(d, t0.Add(6*time.Second), seen)
	s.unpark(b) // a reason to probe b, which is under way
	s.park(b, t0.Add(5*time.Second), seen)
	if a.parkedAt < 0 || a.index >= 0 {
		t.Errorf("a: parked at %d, due at %d; want parked", a.parkedAt, a.index)
	}
	if b.parkedAt >= 0 || b.index < 0 {
		t.Errorf("b, parked after an unpark: parked at %d, due at %d; want due", b.parkedAt, b.index)
	}

	notOwner := func() uint64 { return s.Skipped()[SkipNotOwner] }
	clk.Step(12 * time.Second) // a due at +5 s and +10 s, d at +6 s and +11 s
	if n := notOwner(); n != 4 {
		t.Errorf("%d skipped after two due times of two parked probes, want 4", n)
	}
	s.Reshard()
	for name, p := range map[string]*dueProbe{"a": a, "d": d} {
		if p.parkedAt >= 0 || p.index < 0 || p.at.Sub(t0) < 15*time.Second || p.at.Sub(t0) > 16*time.Second {
			t.Errorf("%s after Reshard: parked at %d, due at %d at +%v; want due at its next due time", name, p.parkedAt, p.index, p.at.Sub(t0))
		}
	}
	if len(s.parked) != 0 || len(s.due) != 3 {
		t.Errorf("after Reshard: %d parked, %d due; want 0 and 3", len(s.parked), len(s.due))
	}
	if n := notOwner(); n != 4 {
		t.Errorf("%d skipped after Reshard, want still 4", n)
	}
}
