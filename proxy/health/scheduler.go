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
// Not client-go's delaying workqueue: it cannot take out the probes of a
// stopped checker, and needs a second goroutine (Get, Done) and a 10 s
// heartbeat ticker to do what one heap, timer and wake channel do here.
type Scheduler struct {
	clk clock.Clock

	mu  sync.Mutex
	due dueProbes
	// wake tells Run that due changed; capacity 1.
	wake chan struct{}

	// owns, when set (Share), tells whether this replica probes the
	// cluster of a key; nil: every one.
	owns func(key string) bool

	// skippedTraffic and skippedNotOwner count the probes skipped by reason.
	skippedTraffic, skippedNotOwner atomic.Uint64
}

// NewScheduler returns a scheduler pacing probes by clk. Nothing runs before
// Run.
func NewScheduler(clk clock.Clock) *Scheduler {
	return &Scheduler{clk: clk, wake: make(chan struct{}, 1)}
}

// Run starts probes as they fall due, until ctx ends. Checkers stop with
// their own context; when Run has returned, no probe starts any more.
func (s *Scheduler) Run(ctx context.Context) {
	timer := s.clk.NewTimer(time.Hour)
	defer timer.Stop()
	var ready []*dueProbe
	for {
		now := s.clk.Now()
		s.mu.Lock()
		for len(s.due) > 0 && !s.due[0].at.After(now) {
			ready = append(ready, heap.Pop(&s.due).(*dueProbe))
		}
		var next time.Time
		if len(s.due) > 0 {
			next = s.due[0].at
		}
		s.mu.Unlock()
		for i, p := range ready {
			p.c.startProbe(p.s, p.at)
			ready[i] = nil
		}
		ready = ready[:0]

		timer.Stop()
		if !next.IsZero() {
			timer.Reset(next.Sub(now))
			// The timer counts from its Reset: if the clock passed next since
			// now was read, start those probes instead of waiting another round.
			if !s.clk.Now().Before(next) {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		case <-s.wake:
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
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
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
