package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/kubewharf/kube-gateway/test/bench/internal/floor"
	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
)

// tailTrace is where one proxy's requests at c=1 spent their time, read from
// a Go execution trace of the proxy taken while they ran: the middle tenth
// of its requests against the slowest hundredth.
type tailTrace struct {
	Proxy           string // the target's key: gateway or floor
	File            string
	Run             loadRun
	Requests        int // whole requests found in the trace
	Median, Slowest measure.Band
	// Running is how long each kind of goroutine ran during the trace.
	Running map[string]time.Duration
}

// reverseProxyFrame is in the stack of every request both proxies forward,
// and of no other request they serve (health, metrics, the trace itself).
const reverseProxyFrame = "httputil.(*ReverseProxy).ServeHTTP"

// traceTail runs t's GET load at c=1 for TraceSeconds+2 s and takes an
// execution trace of its proxy (GET url, a /debug/pprof/trace endpoint) for
// TraceSeconds of it.
func traceTail(ctx context.Context, t *measure.Target, client *http.Client, header http.Header, url string, procs []measure.Proc, o options, rep *report) error {
	logf("tracing %s for %ds under its c=1 load", t.Key, o.TraceSeconds)
	done := make(chan fetched, 1)
	go fetchPprof(ctx, client, header, url, o.TraceSeconds, done)
	run := measureLoad(ctx, t, procs, rep.Hz, 1, 0, time.Duration(o.TraceSeconds+2)*time.Second)
	f := <-done
	if f.err != nil {
		return f.err
	}
	file := "kube-gateway-trace-c1.out"
	if t.Key == floor.Key {
		file = "floorproxy-trace-c1.out"
	}
	tt := tailTrace{Proxy: t.Key, Run: run, File: filepath.Join(o.OutDir, file)}
	if err := os.WriteFile(tt.File, f.data, 0o644); err != nil {
		return err
	}
	tr, err := measure.ReadTrace(bytes.NewReader(f.data), reverseProxyFrame)
	if err != nil {
		return fmt.Errorf("reading the trace of %s: %w", t.Key, err)
	}
	tt.Requests, tt.Running = len(tr.Requests), tr.Running
	if tt.Median, tt.Slowest, err = measure.Bands(tr.Requests); err != nil {
		return fmt.Errorf("the trace of %s: %w", t.Key, err)
	}
	rep.Tails = append(rep.Tails, tt)
	return nil
}

// tailSection sets the traced proxies' middle and slowest requests side by
// side, part by part.
func (r *report) tailSection(p func(string, ...any)) {
	if len(r.Tails) == 0 {
		return
	}
	p("## Where the c=1 tail comes from\n\n")
	p("After the rounds, each proxy ran the c=1 GET load once more (%d s, not part of the medians) while `GET /debug/pprof/trace?seconds=%d` recorded a Go execution trace of it (", r.Opts.TraceSeconds+2, r.Opts.TraceSeconds)
	for i, t := range r.Tails {
		if i > 0 {
			p(", ")
		}
		p("`%s`", t.File)
	}
	p("; `go tool trace <file>`). A request is the goroutine the proxy's HTTP/2 server started for it, from its start to its end, counted when its stack passed through `%s` (so the trace's own request, health checks and the hub's discovery are left out). ", reverseProxyFrame)
	p("Its time is split by the goroutine's state: running, runnable but waiting for a CPU, in a system call, or blocked: for the member's response headers (in the HTTP/2 client's RoundTrip), for the member's response body (the stream's buffer, which the member connection's read loop fills), for the caller's HTTP/2 connection writer, yielding to a GC cycle the request's allocation started, or elsewhere (with the runtime's reason). ")
	p("GC assist is the part of running (or blocked in the assist) spent marking or sweeping for the collector; in a GC phase is the part of the request's life during which a collection was marking or the world was stopped, whatever the request was doing. ")
	p("Middle: the mean of the 45th to 55th percentile of request times; slowest: the mean of the slowest 1 %%. The client's own p99 of the same run is in the first row.\n\n")

	p("| µs per request |")
	for _, t := range r.Tails {
		p(" %s: middle | %s: slowest 1 %% |", t.label(), t.label())
	}
	p("\n|---|")
	for range r.Tails {
		p("---:|---:|")
	}
	p("\n| client's p50 / p99 of the run |")
	for _, t := range r.Tails {
		p(" %s | %s |", measure.Dur(t.Run.P50), measure.Dur(t.Run.P99))
	}
	p("\n| requests in the trace (in the band) |")
	for _, t := range r.Tails {
		p(" %d (%d) | %d (%d) |", t.Requests, t.Median.N, t.Requests, t.Slowest.N)
	}
	us := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/1e3) }
	row := func(name string, f func(b measure.Band) string) {
		p("\n| %s |", name)
		for _, t := range r.Tails {
			p(" %s | %s |", f(t.Median), f(t.Slowest))
		}
	}
	row("**the request's goroutine, start to end**", func(b measure.Band) string { return us(b.Total) })
	for _, part := range r.tailParts() {
		row(part, func(b measure.Band) string { return us(b.Parts[part]) })
	}
	row("of which GC assist (mark or sweep)", func(b measure.Band) string { return us(b.Assist) })
	row("in a GC phase (mark or stop-the-world)", func(b measure.Band) string { return us(b.InGC) })
	row("requests a GC phase overlapped", func(b measure.Band) string { return fmt.Sprintf("%.0f %%", 100*b.ShareInGC) })
	p("\n\n")
	r.runningByKind(p)
}

// runningByKind sets the running time of each kind of goroutine, per request
// of the trace, side by side for the traced proxies: every goroutine of the
// proxy, not only the requests' own.
func (r *report) runningByKind(p func(string, ...any)) {
	p("The same traces, the time every goroutine of the proxy ran, by what it runs, divided by the requests the trace saw whole: where the CPU of a request goes, whichever goroutine spends it (a thread the kernel took off a CPU while a goroutine ran counts as running).\n\n")
	p("| µs per request |")
	for _, t := range r.Tails {
		p(" %s |", t.label())
	}
	if len(r.Tails) == 2 {
		p(" gateway − floor |")
	}
	p("\n|---|")
	for range r.Tails {
		p("---:|")
	}
	if len(r.Tails) == 2 {
		p("---:|")
	}
	p("\n")
	perReq := func(t tailTrace, kind string) float64 {
		if t.Requests == 0 {
			return 0
		}
		return float64(t.Running[kind]) / 1e3 / float64(t.Requests)
	}
	kinds := []string{measure.KindHandler, measure.KindMemberWriter, measure.KindMemberReader, measure.KindCallerServe,
		measure.KindCallerReader, measure.KindCallerWriter, measure.KindGC, measure.KindOther}
	total := make([]float64, len(r.Tails))
	line := func(name string, v func(i int, t tailTrace) float64) {
		p("| %s |", name)
		var vs []float64
		for i, t := range r.Tails {
			vs = append(vs, v(i, t))
			p(" %.0f |", vs[i])
		}
		if len(vs) == 2 {
			p(" %+.0f |", vs[0]-vs[1])
		}
		p("\n")
	}
	for _, k := range kinds {
		line(k, func(i int, t tailTrace) float64 {
			x := perReq(t, k)
			total[i] += x
			return x
		})
	}
	line("**all**", func(i int, _ tailTrace) float64 { return total[i] })
	p("\n")
}

// tailParts lists every part seen, by how much the gateway's slowest
// requests (or the first traced proxy's) spent in it.
func (r *report) tailParts() []string {
	seen := map[string]bool{}
	var parts []string
	for _, t := range r.Tails {
		for _, b := range []measure.Band{t.Median, t.Slowest} {
			for k, d := range b.Parts {
				if d >= time.Microsecond && !seen[k] {
					seen[k] = true
					parts = append(parts, k)
				}
			}
		}
	}
	first := r.Tails[0].Slowest.Parts
	slices.SortFunc(parts, func(a, b string) int { return cmp.Or(cmp.Compare(first[b], first[a]), cmp.Compare(a, b)) })
	return parts
}

func (t tailTrace) label() string {
	if t.Proxy == floor.Key {
		return "floor"
	}
	return "gateway alone"
}
