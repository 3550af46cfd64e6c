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
