package measure

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// Parts of a request's time in an execution trace. A goroutine blocked is
// put in a part by where it blocked, when that is one of the places an HTTP/2
// proxy waits (either HTTP/2 of Go's: golang.org/x/net/http2 or net/http's
// copy), else in "blocked: <the runtime's reason>".
const (
	PartRunning  = "running"
	PartRunnable = "waiting for a CPU"
	PartSyscall  = "in a system call"
	PartMember   = "waiting for the member's response headers"
	PartBody     = "waiting for the member's response body"
	PartWriter   = "waiting for the caller's HTTP/2 connection writer"
	PartGCStart  = "yielding to a GC cycle it started"
)

// blockedAt names the part a goroutine blocked with stack s and reason
// spends its time in.
func blockedAt(s trace.Stack, reason string) string {
	for f := range s.Frames() {
		switch fn := f.Func; {
		case fn == "runtime.gcStart":
			return PartGCStart
		case strings.HasSuffix(fn, "pipe).Read"): // the response body's buffer, filled by the connection's read loop
			return PartBody
		case strings.Contains(fn, "ClientConn).RoundTrip"):
			return PartMember
		case strings.Contains(fn, "serverConn).write"): // writeHeaders, writeDataFromHandler
			return PartWriter
		}
	}
	return "blocked: " + reason
}

// Handling is one request as its server saw it in a Go execution trace: the
// life of the goroutine an HTTP/2 server started to run its handler, and
// where that time went.
type Handling struct {
	Total time.Duration
	// Parts splits Total by the goroutine's state: running, runnable
	// (waiting for a CPU), in a system call, or blocked for a reason.
	Parts map[string]time.Duration
	// Assist is the part of running spent helping the garbage collector
	// mark (GC mark assist) or sweep (incremental sweep on allocation).
	Assist time.Duration
	// InGC is the part of Total during which a collection was marking or the
	// world was stopped, whatever the goroutine was doing.
	InGC time.Duration
}

// handling is a Handling being read.
type handling struct {
	Handling
	start, since trace.Time
	part         string     // the part the time since "since" goes to
	assistFrom   trace.Time // 0: no assist or sweep under way
	proxies      bool       // a frame named the proxy's handler
}

// Trace is what ReadTrace found in a Go execution trace of an HTTP/2 proxy.
type Trace struct {
	// Requests are the requests the trace saw whole (see ReadTrace).
	Requests []Handling
	// Running is how long the goroutines of each kind (GoroutineKind) ran
	// during the trace, requests or not.
	Running map[string]time.Duration
}

// ReadTrace reads a Go execution trace (runtime/trace, /debug/pprof/trace).
// Its requests are the goroutines started in it by a function named
// runHandler (the HTTP/2 servers of net/http and golang.org/x/net/http2 run
// each request's handler on one) that ended in it, and whose stack named a
// function containing mustCall at some point (say the reverse proxy's
// ServeHTTP, so that other requests the server answered meanwhile are left
// out).
func ReadTrace(r io.Reader, mustCall string) (Trace, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return Trace{}, err
	}
	live := map[trace.GoID]*handling{}
	var done []*handling
	var gcFrom trace.Time // a collection's mark phase or a stop of the world under way since
	var gc [][2]trace.Time
	out := Trace{Running: map[string]time.Duration{}}
	kinds := map[trace.GoID]string{}
	runningSince := map[trace.GoID]trace.Time{}
	names := func(s trace.Stack, sub string) bool {
		for f := range s.Frames() {
			if strings.Contains(f.Func, sub) {
				return true
			}
		}
		return false
	}
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Trace{}, err
		}
		now := ev.Time()
		// Any event a request's goroutine emits with its stack can show it
		// proxying: blocking, a system call, starting a goroutine (the
		// HTTP/2 client starts one per request, from inside RoundTrip).
		if h := live[ev.Goroutine()]; h != nil && !h.proxies && names(ev.Stack(), mustCall) {
			h.proxies = true
		}
		switch ev.Kind() {
		case trace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind != trace.ResourceGoroutine {
				continue
			}
			id := st.Resource.Goroutine()
			from, to := st.Goroutine()
			if _, ok := kinds[id]; !ok {
				if from == trace.GoNotExist {
					kinds[id] = GoroutineKind(firstFrame(st.Stack))
				} else if ev.Goroutine() == id && ev.Stack() != trace.NoStack {
					kinds[id] = GoroutineKind(lastFrame(ev.Stack())) // older than the trace
				}
			}
			if since, ok := runningSince[id]; ok && from == trace.GoRunning {
				out.Running[cmp.Or(kinds[id], KindOther)] += time.Duration(now - since)
				delete(runningSince, id)
			}
			if to == trace.GoRunning {
				runningSince[id] = now
			}
			h := live[id]
			if h == nil {
				if from != trace.GoNotExist || !strings.HasSuffix(firstFrame(st.Stack), ".runHandler") {
					continue
				}
				h = &handling{start: now, since: now, part: PartRunnable, Handling: Handling{Parts: map[string]time.Duration{}}}
				live[id] = h
				continue
			}
			h.Parts[h.part] += time.Duration(now - h.since)
			h.since = now
			// The event's stack is the goroutine's own only when it makes the
			// transition itself (blocks, ends); another wakes it up.
			var own trace.Stack
			if ev.Goroutine() == id {
				own = ev.Stack()
			}
			switch to {
			case trace.GoRunning:
				h.part = PartRunning
			case trace.GoRunnable:
				h.part = PartRunnable
			case trace.GoSyscall:
				h.part = PartSyscall
			case trace.GoWaiting:
				h.part = blockedAt(own, st.Reason)
			}
			if to == trace.GoNotExist {
				h.Total = time.Duration(now - h.start)
				delete(live, id)
				if h.proxies {
					done = append(done, h)
				}
			}
		case trace.EventRangeBegin, trace.EventRangeActive, trace.EventRangeEnd:
			rg := ev.Range()
			switch {
			case rg.Name == "GC concurrent mark phase" || strings.HasPrefix(rg.Name, "stop-the-world"):
				if ev.Kind() == trace.EventRangeEnd {
					if gcFrom != 0 {
						gc = append(gc, [2]trace.Time{gcFrom, now})
					}
					gcFrom = 0
				} else if gcFrom == 0 {
					gcFrom = now
				}
			case rg.Name == "GC mark assist" || rg.Name == "GC incremental sweep":
				h := live[ev.Goroutine()]
				if rg.Scope.Kind == trace.ResourceGoroutine {
					h = live[rg.Scope.Goroutine()]
				}
				if h == nil {
					continue
				}
				if ev.Kind() == trace.EventRangeEnd {
					if h.assistFrom != 0 {
						h.Assist += time.Duration(now - h.assistFrom)
					}
					h.assistFrom = 0
				} else {
					h.assistFrom = now
				}
			}
		}
	}
	out.Requests = make([]Handling, 0, len(done))
	for _, h := range done {
		end := h.start + trace.Time(h.Total)
		for _, g := range gc {
			if lo, hi := max(g[0], h.start), min(g[1], end); hi > lo {
				h.InGC += time.Duration(hi - lo)
			}
		}
		out.Requests = append(out.Requests, h.Handling)
	}
	return out, nil
}

// firstFrame is the function of a stack's innermost frame: for a goroutine's
// starting stack, the function it runs.
func firstFrame(s trace.Stack) string {
	for f := range s.Frames() {
		return f.Func
	}
	return ""
}

// lastFrame is the function of a stack's outermost frame.
func lastFrame(s trace.Stack) string {
	var fn string
	for f := range s.Frames() {
		fn = f.Func
	}
	return fn
}

// Kinds of goroutines of an HTTP/2 reverse proxy, by the function they run.
const (
	KindHandler      = "request handlers (one per request)"
	KindMemberWriter = "member requests' writers (one per request)"
	KindMemberReader = "member connections' read loops"
	KindCallerServe  = "caller connections' serve loops"
	KindCallerReader = "caller connections' frame readers"
	KindCallerWriter = "caller connections' frame writers"
	KindGC           = "garbage collector (mark workers, sweeper, scavenger)"
	KindOther        = "other"
)

// GoroutineKind names the kind of goroutine that runs function fn, alike for
// golang.org/x/net/http2 and net/http's copy of it.
func GoroutineKind(fn string) string {
	switch {
	case strings.HasSuffix(fn, ".runHandler"):
		return KindHandler
	case strings.HasSuffix(fn, "clientStream).doRequest"):
		return KindMemberWriter
	case strings.HasSuffix(fn, "ClientConn).readLoop"):
		return KindMemberReader
	case strings.HasSuffix(fn, "(*conn).serve"), strings.HasSuffix(fn, "serverConn).serve"):
		return KindCallerServe
	case strings.HasSuffix(fn, "serverConn).readFrames"):
		return KindCallerReader
	case strings.HasSuffix(fn, "serverConn).writeFrameAsync"):
		return KindCallerWriter
	case fn == "runtime.gcBgMarkWorker", fn == "runtime.bgsweep", fn == "runtime.bgscavenge":
		return KindGC
	}
	return KindOther
}

// Band is the mean of a group of requests (Handlings).
type Band struct {
	N      int
	Total  time.Duration
	Parts  map[string]time.Duration
	Assist time.Duration
	InGC   time.Duration
	// ShareInGC is the share of the group's requests that a collection's
	// mark phase or a stop of the world overlapped.
	ShareInGC float64
}

// Bands sorts hs by Total and returns the means of its middle tenth (the
// 45th to 55th percentiles) and of its slowest hundredth (at least one).
func Bands(hs []Handling) (median, slowest Band, err error) {
	if len(hs) < 20 {
		return Band{}, Band{}, fmt.Errorf("%d requests in the trace: too few for a tail", len(hs))
	}
	hs = slices.Clone(hs)
	slices.SortFunc(hs, func(a, b Handling) int { return int(a.Total - b.Total) })
	n := len(hs)
	tail := max(1, n/100)
	return mean(hs[n*45/100 : n*55/100]), mean(hs[n-tail:]), nil
}

func mean(hs []Handling) Band {
	b := Band{N: len(hs), Parts: map[string]time.Duration{}}
	var inGC int
	for _, h := range hs {
		b.Total += h.Total
		b.Assist += h.Assist
		b.InGC += h.InGC
		if h.InGC > 0 {
			inGC++
		}
		for k, v := range h.Parts {
			b.Parts[k] += v
		}
	}
	n := time.Duration(len(hs))
	b.Total /= n
	b.Assist /= n
	b.InGC /= n
	for k := range b.Parts {
		b.Parts[k] /= n
	}
	b.ShareInGC = float64(inGC) / float64(len(hs))
	return b
}
