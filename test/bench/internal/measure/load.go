package measure

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Run is one load run against one target.
type Run struct {
	Requests  int // completed without error
	Errors    int
	FirstErr  error
	Elapsed   time.Duration
	Latencies []time.Duration // sorted

	// Open loop (LoadRate) only.
	Rate      float64       // requests per second asked for
	Scheduled int           // requests the schedule sent
	MaxLag    time.Duration // the longest a request waited past its scheduled time for a free slot
}

// RPS is completed requests over the wall time of the run.
func (r Run) RPS() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

// Pct returns the p-th percentile (nearest rank) of the latencies.
func (r Run) Pct(p float64) time.Duration { return Pct(r.Latencies, p) }

// collector gathers the outcomes of the requests of one run.
type collector struct {
	mu       sync.Mutex
	all      []time.Duration
	errs     int
	firstErr error
}

func (c *collector) add(lat []time.Duration, errs int, first error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all = append(c.all, lat...)
	c.errs += errs
	if c.firstErr == nil {
		c.firstErr = first
	}
}

func (c *collector) run(elapsed time.Duration) Run {
	return Run{Requests: len(c.all), Errors: c.errs, FirstErr: c.firstErr, Elapsed: elapsed, Latencies: SortDurations(c.all)}
}

// noteProto records the protocol of the first response.
func (t *Target) noteProto(mu *sync.Mutex, proto string) {
	mu.Lock()
	if t.Proto == "" {
		t.Proto = proto
	}
	mu.Unlock()
}

// Load sends GETs of path with c workers, each sending its next request when
// the last one returned (a closed loop), until n requests were sent (n > 0) or
// d passed (n == 0). Throughput is completed requests over the wall time from
// the start until the last one finished.
func (t *Target) Load(ctx context.Context, path string, c, n int, d time.Duration) Run {
	var (
		wg   sync.WaitGroup
		sent atomic.Int64
		mu   sync.Mutex
		col  collector
	)
	deadline := time.Now().Add(d)
	start := time.Now()
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 4096)
			var nerr int
			var ferr error
			for ctx.Err() == nil {
				if n > 0 {
					if sent.Add(1) > int64(n) {
						break
					}
				} else if !time.Now().Before(deadline) {
					break
				}
				t0 := time.Now()
				res, err := t.Do(ctx, path)
				el := time.Since(t0)
				if err != nil {
					nerr++
					if ferr == nil {
						ferr = err
					}
					continue
				}
				t.noteProto(&mu, res.Proto)
				lat = append(lat, el)
			}
			col.add(lat, nerr, ferr)
		}()
	}
	wg.Wait()
	return col.run(time.Since(start))
}

// rateSlack is how long a stall of LoadRate's schedule may be before sends
// are lost rather than caught up.
const rateSlack = 100 * time.Millisecond

// LoadRate sends GETs of path at a fixed rate for d (an open loop): a request
// leaves at its scheduled time whether or not earlier ones have returned, on
// its own goroutine, at most maxInflight at a time. Latency runs from the
// scheduled time, not from the send, so a server that falls behind shows its
// queue in the latencies instead of slowing the schedule down (no coordinated
// omission). When maxInflight requests are outstanding the schedule waits and
// the achieved rate (RPS) falls below the one asked for: the target could not
// sustain it. A request sent late because the bench itself stalled (up to
// rateSlack, then caught up) counts from when it was sent.
func (t *Target) LoadRate(ctx context.Context, path string, perSecond float64, d time.Duration, maxInflight int) Run {
	// The bucket holds rateSlack of sends, so that a stall of the bench's own
	// goroutine shorter than that is caught up instead of lost; it starts
	// empty, so the run does not begin with a burst.
	burst := max(1, int(perSecond*rateSlack.Seconds()))
	lim := rate.NewLimiter(rate.Limit(perSecond), burst)
	lim.AllowN(time.Now(), burst)
	slots := make(chan struct{}, maxInflight)
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		col       collector
		scheduled int
		maxLag    time.Duration
	)
	start := time.Now()
	end := start.Add(d)
	for ctx.Err() == nil {
		now := time.Now()
		r := lim.ReserveN(now, 1)
		at := now.Add(r.DelayFrom(now))
		if !at.Before(end) {
			r.CancelAt(now)
			break
		}
		if wait := time.Until(at); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
			case <-timer.C:
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		maxLag = max(maxLag, time.Since(at))
		scheduled++
		wg.Add(1)
		go func(at time.Time) {
			defer wg.Done()
			defer func() { <-slots }()
			res, err := t.Do(ctx, path)
			if err != nil {
				col.add(nil, 1, err)
				return
			}
			t.noteProto(&mu, res.Proto)
			col.add([]time.Duration{time.Since(at)}, 0, nil)
		}(at)
	}
	wg.Wait()
	out := col.run(time.Since(start))
	out.Rate, out.Scheduled, out.MaxLag = perSecond, scheduled, maxLag
	return out
}
