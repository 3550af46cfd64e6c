package health

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Scheduler starts the probes of every checker started on it, each when it
// falls due. Its Run is the only goroutine that waits between probes, for
// all clusters: a goroutine stack per idle cluster was most of what an idle
// cluster cost after its connections.
//
// It wakes up on a grid of batchPeriod and starts every probe due by then
// together: a wake-up per probe (threads woken from sleep, a timer moved in
// the runtime's timer heap, which then scans every timer of the process)
// cost more than the probe itself with thousands of clusters
// (docs/benchmark.md, "10,000 clusters").
//
// Not client-go's delaying workqueue: it cannot take out the probes of a
// stopped checker, and needs a second goroutine (Get, Done) and a 10 s
// heartbeat ticker to do what one heap, timer and wake channel do here.
type Scheduler struct {
	clk clock.Clock

	mu  sync.Mutex
	due dueProbes
	// armed is when Run wakes up next; zero while it waits for a wake.
	armed time.Time
	// wake tells Run that a probe falls due before armed; capacity 1.
	wake chan struct{}

	// parked holds the probes of servers of clusters that other replicas
	// own (Share), out of due: they fall due only when the owners change
	// (Reshard) or the replica needs its own probe (unpark), instead of
	// being popped every interval only to be skipped (docs/benchmark.md,
	// "10,000 clusters").
	parked []*dueProbe
	// handovers counts the changes that may make a parked probe needed
	// (Reshard, unpark); a probe found not needed before one is not parked
	// after it, since what was found may be stale.
	handovers atomic.Uint64

	// owns, when set (Share), tells whether this replica probes the
	// cluster of a key; nil: every one.
	owns func(key string) bool

	// skippedTraffic and skippedNotOwner count the probes skipped by reason.
	skippedTraffic, skippedNotOwner atomic.Uint64
}

// batchPeriod is the grid of the scheduler's wake-ups: a probe starts at
// most this late, a small part of any health-check interval (whole seconds).
const batchPeriod = 50 * time.Millisecond

// wakeAt is the first point of the wake-up grid at or after t. It keeps t's
// monotonic clock reading, which Truncate drops: waits must not follow steps
// of the wall clock.
func wakeAt(t time.Time) time.Time {
	if r := t.Sub(t.Truncate(batchPeriod)); r > 0 {
		return t.Add(batchPeriod - r)
	}
	return t
}

// NewScheduler returns a scheduler pacing probes by clk. Nothing runs before
// Run.
func NewScheduler(clk clock.Clock) *Scheduler {
	return &Scheduler{clk: clk, wake: make(chan struct{}, 1)}
}

// Run starts probes as they fall due, until ctx ends. Checkers stop with
// their own context; when Run has returned, no probe starts any more.
func (s *Scheduler) Run(ctx context.Context) {
	var ready []*dueProbe
	for {
		now := s.clk.Now()
		s.mu.Lock()
		for len(s.due) > 0 && !s.due[0].at.After(now) {
			ready = append(ready, heap.Pop(&s.due).(*dueProbe))
		}
		s.armed = time.Time{}
		if len(s.due) > 0 {
			s.armed = wakeAt(s.due[0].at)
		}
		armed := s.armed
		s.mu.Unlock()
		for i, p := range ready {
			p.c.startProbe(p.s, p.at)
			ready[i] = nil
		}
		ready = ready[:0]

		// A new timer for every wait: moving a pending timer earlier
		// (Reset) makes the runtime scan all its timers.
		var timer clock.Timer
		var fired <-chan time.Time
		if !armed.IsZero() {
			d := armed.Sub(s.clk.Now())
			if d <= 0 {
				continue
			}
			timer = s.clk.NewTimer(d)
			fired = timer.C()
			// A clock that passed armed while the timer was made (a test's
			// fake clock, stepped at any moment) would not fire it for a
			// whole step more.
			if !s.clk.Now().Before(armed) {
				timer.Stop()
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-fired:
		case <-s.wake:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// Skipped returns how many probes that fell due were not sent, by reason
// (the Skip* constants), since the scheduler was made. A parked probe falls
// due every interval all the same, and each time counts as skipped.
func (s *Scheduler) Skipped() map[string]uint64 {
	now := s.clk.Now()
	s.mu.Lock()
	notOwner := s.skippedNotOwner.Load() // under mu: parked probes add to it under mu
	for _, p := range s.parked {
		notOwner += p.dueBy(now)
	}
	s.mu.Unlock()
	return map[string]uint64{SkipTraffic: s.skippedTraffic.Load(), SkipNotOwner: notOwner}
}

func (s *Scheduler) skip(reason string) {
	switch reason {
	case SkipTraffic:
		s.skippedTraffic.Add(1)
	case SkipNotOwner:
		s.skippedNotOwner.Add(1)
	}
}

// Share makes the replicas of the gateway share health checks: owns tells
// whether this one probes the cluster of a Config.Key, and publishes its
// verdicts; the checkers of the others follow them (Checker.Follow). Call it
// before any checker starts. owns must be cheap: it is asked at every due
// probe.
func (s *Scheduler) Share(owns func(key string) bool) { s.owns = owns }

// owner tells whether this replica probes the cluster of key.
func (s *Scheduler) owner(key string) bool { return s.owns == nil || s.owns(key) }

// add schedules p at at. p is not scheduled or parked already.
func (s *Scheduler) add(p *dueProbe, at time.Time) {
	s.mu.Lock()
	p.at = at
	heap.Push(&s.due, p)
	wake := s.armLocked(at)
	s.mu.Unlock()
	s.signal(wake)
}

// armLocked moves the wake-up earlier for a probe due at at, and tells
// whether Run must be woken. Run sleeps until armed: it is woken only when
// a probe falls due before then, not for every probe scheduled an interval
// ahead. With s.mu held.
func (s *Scheduler) armLocked(at time.Time) bool {
	wake := s.armed.IsZero() || wakeAt(at).Before(s.armed)
	if wake {
		s.armed = wakeAt(at)
	}
	return wake
}

func (s *Scheduler) signal(wake bool) {
	if wake {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// handover is the count of handovers, to pass to park.
func (s *Scheduler) handover() uint64 { return s.handovers.Load() }

// park keeps p, found not needed (SkipNotOwner) while the count of
// handovers was seen, out of due with its next due time at; if a handover
// came since, it schedules p at at instead.
func (s *Scheduler) park(p *dueProbe, at time.Time, seen uint64) {
	s.mu.Lock()
	if s.handovers.Load() != seen {
		s.mu.Unlock()
		s.add(p, at)
		return
	}
	p.at = at
	p.parkedAt = len(s.parked)
	s.parked = append(s.parked, p)
	s.mu.Unlock()
}

// unpark schedules p, if parked, at the first of its due times after now:
// the replica has a reason of its own to probe the server.
func (s *Scheduler) unpark(p *dueProbe) {
	now := s.clk.Now()
	s.mu.Lock()
	s.handovers.Add(1)
	if p.parkedAt < 0 {
		s.mu.Unlock()
		return
	}
	s.unparkLocked(p, now)
	heap.Push(&s.due, p)
	wake := s.armLocked(p.at)
	s.mu.Unlock()
	s.signal(wake)
}

// Reshard schedules every parked probe at the first of its due times after
// now, to be found needed or not anew: the replicas, and with them
// the owners of clusters, changed. Call it after the owner function's
// answers changed.
func (s *Scheduler) Reshard() {
	now := s.clk.Now()
	s.mu.Lock()
	s.handovers.Add(1)
	if len(s.parked) == 0 {
		s.mu.Unlock()
		return
	}
	for _, p := range s.parked {
		s.catchUpLocked(p, now)
		p.parkedAt = -1
		p.index = len(s.due)
		s.due = append(s.due, p)
	}
	s.parked = nil
	heap.Init(&s.due)
	wake := s.armLocked(s.due[0].at)
	s.mu.Unlock()
	s.signal(wake)
}

// catchUpLocked moves the due time of p, parked, to the first one after
// now, counting those that fell due as skipped. With s.mu held.
func (s *Scheduler) catchUpLocked(p *dueProbe, now time.Time) {
	n := p.dueBy(now)
	s.skippedNotOwner.Add(n)
	p.at = p.at.Add(time.Duration(n) * p.c.cfg.Interval)
}

// unparkLocked takes p out of parked, its due time caught up to now. With
// s.mu held.
func (s *Scheduler) unparkLocked(p *dueProbe, now time.Time) {
	s.catchUpLocked(p, now)
	if last := len(s.parked) - 1; p.parkedAt != last {
		moved := s.parked[last]
		s.parked[p.parkedAt], moved.parkedAt = moved, p.parkedAt
	}
	s.parked[len(s.parked)-1] = nil
	s.parked = s.parked[:len(s.parked)-1]
	p.parkedAt = -1
}

// remove takes the scheduled and parked probes of endpoints out. A probe
// under way schedules its next one when it ends; the checker drops it when
// it falls due.
func (s *Scheduler) remove(endpoints []*endpointState) {
	now := s.clk.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range endpoints {
		switch p := e.next; {
		case p.index >= 0:
			heap.Remove(&s.due, p.index)
		case p.parkedAt >= 0:
			s.unparkLocked(p, now) // what fell due stays counted
		}
	}
}

// dueProbe is the next probe of one endpoint of a checker.
type dueProbe struct {
	at       time.Time
	c        *Checker
	s        *endpointState
	index    int // in Scheduler.due; -1 when not scheduled
	parkedAt int // in Scheduler.parked; -1 when not parked
}

// dueBy is the number of p's due times, at and every interval after, that
// are not after now: those that have fallen due.
func (p *dueProbe) dueBy(now time.Time) uint64 {
	if now.Before(p.at) {
		return 0
	}
	return uint64(now.Sub(p.at)/p.c.cfg.Interval) + 1
}

// dueProbes is a heap of probes by due time (container/heap).
type dueProbes []*dueProbe

func (d dueProbes) Len() int           { return len(d) }
func (d dueProbes) Less(i, j int) bool { return d[i].at.Before(d[j].at) }
func (d dueProbes) Swap(i, j int) {
	d[i], d[j] = d[j], d[i]
	d[i].index, d[j].index = i, j
}

func (d *dueProbes) Push(x any) {
	p := x.(*dueProbe)
	p.index = len(*d)
	*d = append(*d, p)
}

func (d *dueProbes) Pop() any {
	old := *d
	p := old[len(old)-1]
	old[len(old)-1] = nil
	p.index = -1
	*d = old[:len(old)-1]
	return p
}
