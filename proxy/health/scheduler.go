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
// (the Skip* constants), since the scheduler was made.
func (s *Scheduler) Skipped() map[string]uint64 {
	return map[string]uint64{SkipTraffic: s.skippedTraffic.Load(), SkipNotOwner: s.skippedNotOwner.Load()}
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

// add schedules p at at. p is not scheduled already.
func (s *Scheduler) add(p *dueProbe, at time.Time) {
	s.mu.Lock()
	p.at = at
	heap.Push(&s.due, p)
	// Run sleeps until armed: wake it only when p falls due before then,
	// not for every probe scheduled an interval ahead.
	wake := s.armed.IsZero() || wakeAt(at).Before(s.armed)
	if wake {
		s.armed = wakeAt(at)
	}
	s.mu.Unlock()
	if wake {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// remove takes the scheduled probes of endpoints out. A probe under way
// schedules its next one when it ends; the checker drops it when it falls
// due.
func (s *Scheduler) remove(endpoints []*endpointState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range endpoints {
		if e.next.index >= 0 {
			heap.Remove(&s.due, e.next.index)
		}
	}
}

// dueProbe is the next probe of one endpoint of a checker.
type dueProbe struct {
	at    time.Time
	c     *Checker
	s     *endpointState
	index int // in Scheduler.due; -1 when not scheduled
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
