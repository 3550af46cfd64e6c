package main

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/harness"
)

type report struct {
	Opts           options
	Started        time.Time
	EnvStartup     time.Duration
	Total          time.Duration
	Hz             float64
	Machine        measure.Machine
	FDLimitBefore  uint64
	FDLimit        uint64
	GatewayFDLimit uint64
	Restarted      bool // the gateway was restarted before the cluster phase
	// RestartedForWatches: the gateway was restarted after the connection phase.
	RestartedForWatches bool
	Conns               *connResult
	Watches             *watchResult
	Sessions            *sessionResult
	Clusters            *clusterResult
	Cache               *cacheResult
	RestartedForCache   bool // the gateway was restarted before the fleet cache phase
}

func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	m := r.Machine
	p("# kube-gateway scale benchmark\n\n")
	p("Run %s on %s. ", r.Started.UTC().Format("2006-01-02 15:04 UTC"), m)
	if m.Commit != "" {
		p("Code: %s (the kube-gateway binary `make build` made from it). ", m.Commit)
	}
	p("Every process (etcd, hub, member-a ×2, member-b, kube-gateway, this client) on 127.0.0.1 of the same machine, started by test/harness. ")
	if len(r.Opts.GatewayArgs) > 0 {
		p("The gateway's command line adds %s. ", strings.Join(r.Opts.GatewayArgs, " "))
	}
	if len(r.Opts.GatewayEnv) > 0 {
		p("The gateway's environment adds %s. ", strings.Join(r.Opts.GatewayEnv, " "))
	}
	p("Snapshots of the gateway follow two forced garbage collections (`/debug/pprof/heap?gc=1`; the second empties the sync.Pool victim caches), so heap figures are what is live; RSS is VmRSS from /proc; connections are the established TCP sockets the process holds (/proc/<pid>/fd and /proc/net/tcp).\n\n")
	if w := r.Watches; w != nil {
		r.watchSection(p, w)
	}
	r.doorSection(p)
	if sr := r.Sessions; sr != nil {
		r.sessionSection(p, sr)
	}
	if c := r.Clusters; c != nil {
		r.clusterSection(p, c)
	}
	if c := r.Cache; c != nil {
		r.cacheSection(p, c)
	}
	p("Environment start-up %s; whole run %s.\n", r.EnvStartup.Round(time.Second), r.Total.Round(time.Second))
	return b.String()
}

func ints(xs []int) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprint(x))
	}
	return strings.Join(s, " + ")
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func mib(bytes float64) string { return fmt.Sprintf("%.1f MiB", bytes/(1<<20)) }

// per formats the growth from a to b per n of something.
func per(a, b float64, n int, f func(float64) string) string {
	if n == 0 {
		return "–"
	}
	return f((b - a) / float64(n))
}

func (r *report) watchSection(p func(string, ...any), w *watchResult) {
	o := r.Opts
	n, mHub := w.Gateway.Opened, w.Hub.Opened
	nDoor, last := 0, w.AllOpen // last: every watch open
	if w.Door != nil {
		nDoor, last = w.Door.Opened, w.DoorOpen
	}
	p("## Watches\n\n")
	if r.RestartedForWatches {
		p("The gateway was restarted (same flags and data) after the connection phase, so that this phase starts from a fresh process. ")
	}
	p("Idle watches of the ConfigMaps of namespace `%s` on member-b (field selector `metadata.name=%s`, a name no object has: they stay open and receive nothing), opened %d at a time: %d through the gateway alone (the hub's front-proxy certificate and `X-Remote-*` headers, as `make bench`), then %d through hub + gateway while those stay open",
		watchNS, idleName, o.OpenConcurrency, o.Watches, o.HubWatches)
	if w.Door != nil {
		p(", then %d through member-b's member door with member-b's own admin certificate (see the member door section)", o.DoorWatches)
	}
	p(". ")
	p("member-b announces %d concurrent HTTP/2 streams per connection, the gateway %d to its callers. ", w.MaxStreams, w.GatewayStrms)
	p("File descriptors: the bench raised its own limit from %d to %d; the gateway's limit is %d and it held at most %d open.\n\n", r.FDLimitBefore, r.FDLimit, r.GatewayFDLimit, w.PeakOpenFDs)

	p("| state | gateway RSS | Go heap in use | Go stacks in use | goroutines | open files | TCP gateway → member-b | TCP hub → gateway | TCP bench → gateway |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	states := []snapshot{w.Before, w.GatewayOpen, w.AllOpen, w.AfterClose}
	if w.Door != nil {
		states = []snapshot{w.Before, w.GatewayOpen, w.AllOpen, w.DoorOpen, w.AfterClose}
	}
	for _, sn := range states {
		label := sn.Label
		switch sn.Label {
		case "gateway watches open":
			label = fmt.Sprintf("%d open through the gateway alone", n)
		case "all open":
			label = fmt.Sprintf("and %d through hub + gateway", mHub)
		case "door open":
			label = fmt.Sprintf("and %d through member-b's door", nDoor)
		case "after close":
			label = fmt.Sprintf("all closed (%s later)", w.SettleTook.Round(100*time.Millisecond))
		}
		p("| %s | %s | %s | %s | %.0f | %d | %s | %d | %d |\n", label, measure.MB(float64(sn.RSSKB)), mib(sn.HeapInuse), mib(sn.StackInuse), sn.Goroutines, sn.OpenFiles, ints(sn.ToMemberB), sn.HubToGateway, sn.BenchToGateway)
	}
	p("\n")
	expect := func(watches int) string {
		if w.MaxStreams == 0 {
			return "?"
		}
		return fmt.Sprint(int(math.Ceil(float64(watches) / float64(w.MaxStreams))))
	}
	b, g, a := w.Before, w.GatewayOpen, w.AllOpen
	kib := func(x float64) string { return measure.KiB(x) }
	p("| per watch | through the gateway alone (%d) | through hub + gateway (%d more) |\n|---|---:|---:|\n", n, mHub)
	p("| gateway RSS | %s | %s |\n", per(float64(b.RSSKB)*1024, float64(g.RSSKB)*1024, n, kib), per(float64(g.RSSKB)*1024, float64(a.RSSKB)*1024, mHub, kib))
	p("| Go heap in use | %s | %s |\n", per(b.HeapInuse, g.HeapInuse, n, kib), per(g.HeapInuse, a.HeapInuse, mHub, kib))
	p("| Go stacks in use | %s | %s |\n", per(b.StackInuse, g.StackInuse, n, kib), per(g.StackInuse, a.StackInuse, mHub, kib))
	p("| goroutines | %s | %s |\n", per(b.Goroutines, g.Goroutines, n, func(x float64) string { return fmt.Sprintf("%.2f", x) }), per(g.Goroutines, a.Goroutines, mHub, func(x float64) string { return fmt.Sprintf("%.2f", x) }))
	p("| TCP connections gateway → member-b with these open, all told (expected ⌈watches open / %d⌉) | %s (%s) | %s (%s) |\n", w.MaxStreams,
		ints(g.ToMemberB), expect(n), ints(a.ToMemberB), expect(n+mHub))
	p("| TCP connections into the gateway with these open, all told (from the bench / from the hub) | %d / %d | %d / %d |\n", g.BenchToGateway, g.HubToGateway, a.BenchToGateway, a.HubToGateway)
	p("| time to open, rate | %s, %.0f/s | %s, %.0f/s |\n", w.Gateway.Took.Round(10*time.Millisecond), float64(n)/w.Gateway.Took.Seconds(), w.Hub.Took.Round(10*time.Millisecond), float64(mHub)/w.Hub.Took.Seconds())
	p("| failed to open | %d%s | %d%s |\n", w.Gateway.Errors, firstErr(w.Gateway.FirstErr), w.Hub.Errors, firstErr(w.Hub.FirstErr))
	p("| ended before the bench closed them | %d | %d |\n\n", w.EarlyGateway, w.EarlyHub)
	c := w.AfterClose
	p("After closing every watch: RSS %s → %s (%s before), goroutines %.0f (%.0f before), live heap %s (%s before; heap in use, with the spans the freed objects leave partly used, %s against %s), connections to member-b %d (%d before). ",
		measure.MB(float64(last.RSSKB)), measure.MB(float64(c.RSSKB)), measure.MB(float64(b.RSSKB)), c.Goroutines, b.Goroutines, mib(c.HeapAlloc), mib(b.HeapAlloc), mib(c.HeapInuse), mib(b.HeapInuse), sum(c.ToMemberB), sum(b.ToMemberB))
	if w.Settled {
		p("Goroutines and connections were back %s after the close (the connections' idle timeout is 90 s); RSS falls as the Go runtime returns freed memory to the system, which it does gradually.\n\n", w.SettleTook.Round(100*time.Millisecond))
	} else {
		p("**Goroutines or connections were not back within %s** (`-settle`).\n\n", o.Settle)
	}

	if len(w.Cycles) > 0 {
		p("The watches opened and closed again (%d through the gateway alone, %d through hub + gateway and %d through the door each time, no events), each snapshot after the same wait and two forced collections:\n\n", o.Watches, o.HubWatches, o.DoorWatches)
		p("| after closing | gateway RSS | live heap | Go heap in use | goroutines | TCP gateway → member-b | back after | opened (failed) |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
		p("| before any watch | %s | %s | %s | %.0f | %s | | |\n", measure.MB(float64(b.RSSKB)), mib(b.HeapAlloc), mib(b.HeapInuse), b.Goroutines, ints(b.ToMemberB))
		back := func(ok bool, took time.Duration) string {
			if !ok {
				return fmt.Sprintf("not within %s", o.Settle)
			}
			return took.Round(100 * time.Millisecond).String()
		}
		p("| cycle 1 | %s | %s | %s | %.0f | %s | %s | %d (%d) |\n", measure.MB(float64(c.RSSKB)), mib(c.HeapAlloc), mib(c.HeapInuse), c.Goroutines, ints(c.ToMemberB), back(w.Settled, w.SettleTook), n+mHub+nDoor, w.Gateway.Errors+w.Hub.Errors+doorErrors(w))
		for i, cr := range w.Cycles {
			a := cr.AfterClose
			p("| cycle %d | %s | %s | %s | %.0f | %s | %s | %d (%d%s) |\n", i+2, measure.MB(float64(a.RSSKB)), mib(a.HeapAlloc), mib(a.HeapInuse), a.Goroutines, ints(a.ToMemberB), back(cr.Settled, cr.SettleTook), cr.Opened, cr.Errors, firstErr(cr.FirstErr))
		}
		p("\n")
	}

	if f := w.Floor; f != nil {
		nf := f.Watches.Opened
		perWatch := func(before, after float64, fmtv func(float64) string) string { return per(before, after, nf, fmtv) }
		count := func(x float64) string { return fmt.Sprintf("%.2f", x) }
		p("The floor: the same idle watches through `test/bench/floorproxy` alone, after the gateway's were closed (a minimal Go reverse proxy in front of member-b: TLS and HTTP/2 in, HTTP/2 out, `httputil.ReverseProxy` with a buffer pool, no authentication, authorization, admission or metrics; garbage collected twice before each reading, as the gateway).\n\n")
		p("| per watch | gateway alone (%d) | floor (%d) | gateway / floor |\n|---|---:|---:|---:|\n", n, nf)
		row := func(name string, gb, ga, fb, fa float64, fmtv func(float64) string) {
			gr, fr := (ga-gb)/float64(n), (fa-fb)/float64(nf)
			p("| %s | %s | %s | ×%.2f |\n", name, per(gb, ga, n, fmtv), perWatch(fb, fa, fmtv), gr/fr)
		}
		row("RSS", float64(b.RSSKB)*1024, float64(g.RSSKB)*1024, float64(f.Before.RSSKB)*1024, float64(f.Open.RSSKB)*1024, kib)
		row("Go heap in use", b.HeapInuse, g.HeapInuse, f.Before.HeapInuse, f.Open.HeapInuse, kib)
		row("Go stacks in use", b.StackInuse, g.StackInuse, f.Before.StackInuse, f.Open.StackInuse, kib)
		row("goroutines", b.Goroutines, g.Goroutines, f.Before.Goroutines, f.Open.Goroutines, count)
		p("| TCP connections to member-b, all told | %s | %d | |\n", ints(g.ToMemberB), f.ToMemberB)
		p("| failed to open | %d | %d%s | |\n\n", w.Gateway.Errors, f.Watches.Errors, firstErr(f.Watches.FirstErr))
	}

	if w.HeapFile != "" {
		p("The gateway's heap in use with every watch open, by allocation site (`%s`; `go tool pprof -sample_index=inuse_space -top`):\n\n```\n%s```\n\n", w.HeapFile, measure.TrimPprof(w.HeapTop))
	}
	if w.HeapLeftTop != "" {
		p("What the gateway's heap holds after closing every watch beyond what it held before them, by allocation site (`go tool pprof -sample_index=inuse_space -top -base %s %s`):\n\n```\n%s```\n\n", w.HeapBeforeFile, w.HeapClosedFile, measure.TrimPprof(w.HeapLeftTop))
	}

	e := w.Events
	if e.Samples > 0 {
		p("### Event delivery\n\n")
		p("With every idle watch still open, %d more watches through the gateway alone and %d directly on member-b select the %d ConfigMaps `%s=event`; the bench patches them round-robin at %.0f/s for %s (directly on member-b, `golang.org/x/time/rate`) and matches every event a sample watch receives to its update by resourceVersion. ",
			e.Samples, e.Samples, eventCMs, roleLabel, o.EventRate, o.EventDuration)
		p("Delay: from the update's response to the event's receipt (decoded) by the bench, so it can be slightly negative when the event overtakes the response. ")
		p("The idle watches select no updated object, by name: each of the %d would otherwise carry every event, %.0f deliveries per second, which measures the machine rather than the gateway; and a label selector would still make member-b's watch cache hand every event to every idle watch to filter (measured: with 3,600 such watches at 100 updates/s, direct delivery itself fell seconds behind). ", n+mHub+nDoor, float64(n+mHub+nDoor)*o.EventRate)
		p("Events still arriving after the last update are awaited until the sample watches are quiet for 2 s (%s here).\n\n", e.DrainTook.Round(100*time.Millisecond))
		p("| | direct | through the gateway alone | gateway − direct |\n|---|---:|---:|---:|\n")
		d, g := e.Direct, e.Gateway
		p("| events received / expected | %d / %d | %d / %d | |\n", d.Received, d.Expected, g.Received, g.Expected)
		for _, q := range []float64{50, 99} {
			dp, gp := measure.Pct(d.Latencies, q), measure.Pct(g.Latencies, q)
			p("| p%.0f delay | %s | %s | %s |\n", q, measure.Dur(dp), measure.Dur(gp), measure.Dur(gp-dp))
		}
		dm, gm := measure.Pct(d.Latencies, 100), measure.Pct(g.Latencies, 100)
		p("| max delay | %s | %s | |\n", measure.Dur(dm), measure.Dur(gm))
		p("| sample watches that ended early | %d | %d | |\n", d.Early, g.Early)
		p("| how the sample watches' streams ended | %s | %s | |\n\n", fmtEnds(d.Ends), fmtEnds(g.Ends))
		if d.Early+g.Early > 0 {
			p("**Sample watches ended before the bench closed them**: an `EOF` is the member ending the stream, which it does to a watcher that does not keep up (its buffer full); the bench decodes every event of %d watches, %.0f events/s, and on a loaded machine it may not. Their delays are then those of an overloaded client: lower `-sample-watches`.\n\n", 2*e.Samples, 2*float64(e.Samples)*e.PublishRate)
		}
		p("Published: %d updates (%.0f/s achieved", e.Published, e.PublishRate)
		if e.PublishErrors > 0 {
			p(", %d failed: %s", e.PublishErrors, e.FirstPublishErr)
		}
		p(")")
		if e.OpenErrors != "" {
			p("; sample watches that failed to open: %s", e.OpenErrors)
		}
		p(".\n\n")
	}
	p("Over time (every %s, no forced GC): `%s` and `%s`.\n\n", o.SampleInterval, filepath.Join(o.OutDir, "watches.csv"), filepath.Join(o.OutDir, "watches.png"))
}

func doorErrors(w *watchResult) int {
	if w.Door == nil {
		return 0
	}
	return w.Door.Errors
}

func (r *report) clusterSection(p func(string, ...any), c *clusterResult) {
	o := r.Opts
	k := c.K
	p("## Clusters\n\n")
	if r.Restarted {
		p("The gateway was restarted (same flags and data) after the watch and session phases, so that this phase starts from a fresh process. ")
	}
	p("%d UpstreamClusters applied (server-side apply, %d at a time) in one burst, next to the harness's two clusters. Their servers (`-cluster-servers=%s`): %s. ", k, o.Burst, c.ServerKind, c.Servers)
	p("Compiled: every object's `status.observedGeneration` equals its generation; Ready: also its `Ready` condition is True (LIST through the hub every second). ")
	p("Steady state: %s idle after all are Ready, the memory taken at its end (an HTTP/2 connection's header table fills over its first few dozen probes); the baseline is %s idle with the harness's two clusters before the burst. ", c.AfterIdle.For.Round(time.Second), c.BaselineIdle.For.Round(time.Second))
	p("Health probes: `apiserver_request_total{subresource=\"/readyz\"}` of those servers (every probe of every cluster lands there). Status writes: MODIFIED events of the %d objects on a watch through the hub during the idle window. ", k)
	p("File descriptors: the bench raised its limit, which the processes it starts inherit, from %d to %d; the gateway's is %d.\n\n", r.FDLimitBefore, r.FDLimit, r.GatewayFDLimit)
	p("| metric | 2 clusters (harness) | %d clusters | per added cluster |\n|---|---:|---:|---:|\n", k+2)
	b, a := c.Baseline, c.After
	kib := func(x float64) string { return measure.KiB(x) }
	p("| gateway RSS | %s | %s | %s |\n", measure.MB(float64(b.RSSKB)), measure.MB(float64(a.RSSKB)), per(float64(b.RSSKB)*1024, float64(a.RSSKB)*1024, k, kib))
	p("| Go heap in use | %s | %s | %s |\n", mib(b.HeapInuse), mib(a.HeapInuse), per(b.HeapInuse, a.HeapInuse, k, kib))
	p("| Go heap live (allocated, after the collections; the rest of in use is free space in used spans) | %s | %s | %s |\n", mib(b.HeapAlloc), mib(a.HeapAlloc), per(b.HeapAlloc, a.HeapAlloc, k, kib))
	p("| Go stacks in use | %s | %s | %s |\n", mib(b.StackInuse), mib(a.StackInuse), per(b.StackInuse, a.StackInuse, k, kib))
	p("| goroutines | %.0f | %.0f | %s |\n", b.Goroutines, a.Goroutines, per(b.Goroutines, a.Goroutines, k, func(x float64) string { return fmt.Sprintf("%.2f", x) }))
	p("| open files | %d | %d | %s |\n", b.OpenFiles, a.OpenFiles, per(float64(b.OpenFiles), float64(a.OpenFiles), k, func(x float64) string { return fmt.Sprintf("%.2f", x) }))
	p("| TCP gateway → the servers (per slot) | %s | %s | %s |\n", ints(b.ToFleet), ints(a.ToFleet), per(float64(sum(b.ToFleet)), float64(sum(a.ToFleet)), k, func(x float64) string { return fmt.Sprintf("%.2f", x) }))
	p("| health probes the servers serve | %.1f /s | %.1f /s | %s |\n", c.BaselineIdle.Probes, c.AfterIdle.Probes, per(c.BaselineIdle.Probes, c.AfterIdle.Probes, k, func(x float64) string { return fmt.Sprintf("%.3f /s", x) }))
	p("| gateway CPU, idle | %.1f ms/s | %.1f ms/s | %s |\n", 1e3*c.BaselineIdle.GatewayCPU, 1e3*c.AfterIdle.GatewayCPU, per(1e6*c.BaselineIdle.GatewayCPU, 1e6*c.AfterIdle.GatewayCPU, k, func(x float64) string { return fmt.Sprintf("%.1f µs/s", x) }))
	if sent := c.AfterIdle.ProbesPooled + c.AfterIdle.ProbesNew; sent > 0 {
		p("| gateway CPU per probe it sent, idle (all its idle CPU, divided) | | %.0f µs | |\n", 1e6*c.AfterIdle.GatewayCPU/sent)
	}
	p("| the servers' CPU (all together), idle | %.1f ms/s | %.1f ms/s | %s |\n", 1e3*c.BaselineIdle.ServersCPU, 1e3*c.AfterIdle.ServersCPU, per(1e6*c.BaselineIdle.ServersCPU, 1e6*c.AfterIdle.ServersCPU, k, func(x float64) string { return fmt.Sprintf("%.1f µs/s", x) }))
	p("| the servers' RSS (all together) | %s | %s | |\n", measure.MB(float64(b.FleetRSSKB)), measure.MB(float64(a.FleetRSSKB)))
	p("| gateway probes over pooled / new connections (`kube_gateway_health_probes_total`), idle | %.1f / %.1f /s | %.1f / %.1f /s | |\n", c.BaselineIdle.ProbesPooled, c.BaselineIdle.ProbesNew, c.AfterIdle.ProbesPooled, c.AfterIdle.ProbesNew)
	p("| status writes, idle | – | %d in %s (%.2f /s) | |\n", c.AfterIdle.StatusWrites, c.AfterIdle.For.Round(time.Second), float64(c.AfterIdle.StatusWrites)/c.AfterIdle.For.Seconds())
	bg, ag := c.BaselineGets, c.Gets
	p("| proxy GET p50, c=1, gateway alone | %s | %s | ×%.2f |\n", measure.Dur(bg.Gateway.Pct(50)), measure.Dur(ag.Gateway.Pct(50)), ratio(ag.Gateway.Pct(50), bg.Gateway.Pct(50)))
	p("| the same GET p50 directly (same rounds) | %s | %s | ×%.2f |\n", measure.Dur(bg.Direct.Pct(50)), measure.Dur(ag.Direct.Pct(50)), ratio(ag.Direct.Pct(50), bg.Direct.Pct(50)))
	p("| proxy ÷ direct p50, median of %d rounds (range) | %s | %s | ×%.2f |\n", getRounds, bg.ratioSpread(), ag.ratioSpread(), measure.Median(ag.Ratio)/measure.Median(bg.Ratio))
	p("| proxy − direct p50, median of %d rounds (range) | %s | %s | |\n", getRounds, bg.addedSpread(), ag.addedSpread())
	p("| proxy GET p99, c=1, gateway alone | %s | %s | ×%.2f |\n\n", measure.Dur(bg.Gateway.Pct(99)), measure.Dur(ag.Gateway.Pct(99)), ratio(ag.Gateway.Pct(99), bg.Gateway.Pct(99)))
	verdict := "outside noise: the proxy ÷ direct ratios of its rounds do not overlap those with 2"
	if withinNoise(bg, ag) {
		verdict = "within noise: the proxy ÷ direct ratios of its rounds overlap those with 2"
	}
	p("**Proxy GET p50 with %d clusters registered against 2: %s** (each round sends its GETs directly and through the gateway back to back, so the ratio cancels the machine's drift between rounds).\n\n", k+2, verdict)
	if lim := r.GatewayFDLimit; lim > 0 && uint64(a.OpenFiles)+16 >= lim {
		p("**The gateway ran out of file descriptors**: it held %d, its limit (RLIMIT_NOFILE) is %d. It keeps a connection open to every server of every cluster that its probes keep alive, so it needs more than one descriptor per server; past the limit it can neither dial the servers that are left, nor its etcd, nor accept connections. Give it a higher limit, or spread the clusters over replicas (`-replicas`).\n\n", a.OpenFiles, lim)
	}
	if c.HeapFile != "" {
		if c.HeapBaseFile != "" {
			p("What the gateway's heap holds with the %d clusters registered beyond what it held before them, by allocation site (`go tool pprof -sample_index=inuse_space -top -base %s %s`):\n\n```\n%s```\n\n", k, c.HeapBaseFile, c.HeapFile, measure.TrimPprof(c.HeapTop))
		} else {
			p("The gateway's heap in use with the %d clusters registered, by allocation site (`%s`; `go tool pprof -sample_index=inuse_space -top`):\n\n```\n%s```\n\n", k+2, c.HeapFile, measure.TrimPprof(c.HeapTop))
		}
	}
	if c.AfterIdle.CPUFile != "" {
		p("The gateway's CPU in the steady state with the %d clusters registered (`%s`; `go tool pprof -top`):\n\n```\n%s```\n\n", k+2, c.AfterIdle.CPUFile, measure.TrimPprof(c.AfterIdle.CPUTop))
	}
	p("Expected health probes at the default interval (5 s): 2 servers × %d clusters / 5 s = %.0f /s more. ", k, float64(2*k)/5)
	p("Burst: %d applied in %s (%.0f/s", k, c.ApplyTook.Round(10*time.Millisecond), float64(k)/c.ApplyTook.Seconds())
	if c.ApplyErrors > 0 {
		p(", %d failed: %s", c.ApplyErrors, c.FirstApplyErr)
	}
	connected := "not within the timeout"
	if c.ConnectedTook > 0 {
		connected = c.ConnectedTook.Round(100 * time.Millisecond).String()
	}
	p("); from its start, **the gateway held a connection to every server of every cluster after %s; all compiled per status after %s, all Ready after %s** (%d compiled, %d Ready at the end). ",
		connected, fmtTook(c.CompiledTook, c.Compiled, k), fmtTook(c.ReadyTook, c.Ready, k), c.Compiled, c.Ready)
	if c.ReadyTook > 0 {
		p("All Ready %s after the last apply. ", (c.ReadyTook - c.ApplyTook).Round(100*time.Millisecond))
	}
	p("Connections (polled every 250 ms) show when the data plane has every cluster; the status figures also include the gateway's status writer, which is rate-limited. ")
	p("GETs: %d per target in %d rounds, `%s` on member-b; %d and %d errors through the gateway.", o.Gets, getRounds, getTarget, c.BaselineGets.Gateway.Errors, c.Gets.Gateway.Errors)
	for _, e := range []string{c.BaselineIdle.Err, c.AfterIdle.Err} {
		if e != "" {
			p(" Not measured: %s.", e)
		}
	}
	p("\n\n")

	r.replicaSection(p, c)
	p("### LIST and WATCH of %d objects through the hub\n\n", k)
	p("The %d UpstreamClusters (served by the gateway from its etcd, through the hub's aggregator) against %d ConfigMaps on the hub holding the same spec and status as JSON, padded to the UpstreamClusters' size (managedFields included); median of %d. WATCH: from no resourceVersion until the initial ADDED event of every object arrived.\n\n", k, k, o.ListRepeats)
	u, m := c.UpstreamClusters, c.ConfigMaps
	p("| | UpstreamClusters | ConfigMaps on the hub | UpstreamClusters / ConfigMaps |\n|---|---:|---:|---:|\n")
	p("| LIST time | %s | %s | ×%.2f |\n", measure.Dur(medianDur(u.List)), measure.Dur(medianDur(m.List)), ratio(medianDur(u.List), medianDur(m.List)))
	p("| LIST body (JSON, as received) | %s | %s | |\n", measure.KiB(float64(u.Bytes)), measure.KiB(float64(m.Bytes)))
	p("| WATCH, all initial events | %s | %s | ×%.2f |\n", measure.Dur(medianDur(u.Watch)), measure.Dur(medianDur(m.Watch)), ratio(medianDur(u.Watch), medianDur(m.Watch)))
	if len(c.GatewayList) > 0 {
		p("| LIST straight from the gateway (no hub) | %s | | ×%.2f |\n", measure.Dur(medianDur(c.GatewayList)), ratio(medianDur(c.GatewayList), medianDur(m.List)))
	}
	if len(c.GatewayWatch) > 0 {
		p("| WATCH straight from the gateway (no hub) | %s | | ×%.2f |\n", measure.Dur(medianDur(c.GatewayWatch)), ratio(medianDur(c.GatewayWatch), medianDur(m.Watch)))
	}
	if c.ListCPUTop != "" {
		p("\nThe gateway's CPU over LISTs of the UpstreamClusters through the hub, back to back for 4 s (`%s`; `go tool pprof -top -cum`):\n\n```\n%s```\n", c.ListCPUFile, measure.TrimPprof(c.ListCPUTop))
	}
	if c.WatchCPUTop != "" {
		p("\nThe gateway's CPU over WATCHes of the UpstreamClusters through the hub (from no resourceVersion until every initial event arrived), back to back for 4 s (`%s`; `go tool pprof -top -cum`):\n\n```\n%s```\n", c.WatchCPUFile, measure.TrimPprof(c.WatchCPUTop))
	}
	for _, e := range []string{u.Err, m.Err} {
		if e != "" {
			p("\nNot measured: %s.\n", e)
		}
	}
	p("\nOver time (every %s, no forced GC; the count is Ready clusters): `%s` and `%s`.\n\n", o.SampleInterval, filepath.Join(o.OutDir, "clusters.csv"), filepath.Join(o.OutDir, "clusters.png"))
	if c.FanOut != nil {
		r.fanOutSection(p, c.FanOut)
	}
	if c.Remote != nil {
		r.remoteSection(p, c.Remote)
	}
}

func fmtEnds(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var s []string
	for _, k := range keys {
		s = append(s, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(s, "; ")
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func fmtTook(d time.Duration, got, want int) string {
	if got < want || d == 0 {
		return "not within the timeout"
	}
	return d.Round(100 * time.Millisecond).String()
}

func (r *report) sessionSection(p func(string, ...any), sr *sessionResult) {
	o := r.Opts
	p("## Exec sessions\n\n")
	p("Idle `kubectl exec`-style sessions: `cat` in pod `%s/%s` of member-a (the stand-in kubelet), streamed over WebSocket as kubectl does by default (client-go's `remotecommand.NewWebSocketExecutor`), through the gateway alone (the hub's front-proxy certificate and `X-Remote-*` headers), %d opened %d at a time. ",
		harness.AliceNamespace, harness.ShellPod, sr.N, o.OpenConcurrency)
	p("Every session is an upgraded HTTP/1.1 connection into the gateway and one out of it to a member-a server (upgrades are not multiplexed). Each wrote a line and got it back before the snapshot, and once more after it; then its stdin was closed, so that `cat` ended and the session with it.\n\n")
	p("| state | gateway RSS | Go heap in use | Go stacks in use | goroutines | open files | TCP gateway → member-a | TCP bench → gateway |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, sn := range []snapshot{sr.Before, sr.Open, sr.Closed} {
		label := sn.Label
		switch sn.Label {
		case "sessions open":
			label = fmt.Sprintf("%d sessions open (%s to open)", sr.Opened, sr.OpenTook.Round(100*time.Millisecond))
		case "sessions closed":
			label = fmt.Sprintf("all closed (%s later)", sr.SettleTook.Round(100*time.Millisecond))
		}
		p("| %s | %s | %s | %s | %.0f | %d | %s | %d |\n", label, measure.MB(float64(sn.RSSKB)), mib(sn.HeapInuse), mib(sn.StackInuse), sn.Goroutines, sn.OpenFiles, ints(sn.ToMemberA), sn.BenchToGateway)
	}
	p("\n")
	b, g, n := sr.Before, sr.Open, sr.Opened
	kib := func(x float64) string { return measure.KiB(x) }
	count := func(x float64) string { return fmt.Sprintf("%.2f", x) }
	p("| per open session | through the gateway alone |\n|---|---:|\n")
	p("| gateway RSS | %s |\n", per(float64(b.RSSKB)*1024, float64(g.RSSKB)*1024, n, kib))
	p("| Go heap in use | %s |\n", per(b.HeapInuse, g.HeapInuse, n, kib))
	p("| Go stacks in use | %s |\n", per(b.StackInuse, g.StackInuse, n, kib))
	p("| goroutines | %s |\n", per(b.Goroutines, g.Goroutines, n, count))
	p("| open files | %s |\n", per(float64(b.OpenFiles), float64(g.OpenFiles), n, count))
	p("| TCP connections gateway → member-a | %s |\n", per(float64(sum(b.ToMemberA)), float64(sum(g.ToMemberA)), n, count))
	p("\nSessions open: %d of %d; echoed again after the snapshot: %d; failed: %d%s. ", sr.Opened, sr.N, sr.Echoed, sr.Failed, firstErr(sr.FirstErr))
	if sr.Settled {
		p("After closing, the gateway's goroutines and connections to member-a were back within %s.\n\n", sr.SettleTook.Round(100*time.Millisecond))
	} else {
		p("**After closing, the gateway's goroutines or connections to member-a were not back within %s.**\n\n", o.Settle)
	}
	if sr.HeapTop != "" {
		p("What the gateway's heap holds with the sessions open beyond what it held before them, by allocation site (`go tool pprof -sample_index=inuse_space -top -base %s %s`):\n\n```\n%s```\n\n", sr.HeapBeforeFile, sr.HeapOpenFile, measure.TrimPprof(sr.HeapTop))
	}
}

// replicaSection reports the other gateway replicas of the cluster phase.
func (r *report) replicaSection(p func(string, ...any), c *clusterResult) {
	if len(c.ReplicasAfter) == 0 {
		return
	}
	k := c.K
	n := len(c.ReplicasAfter) + 1
	p("### %d gateway replicas\n\n", n)
	p("The harness's gateway and %d more replicas with the same flags on the same etcd and hub (not behind the hub: only the first serves the hub's requests), started before the burst; each compiles every cluster, and with `--share-health-checks` (the default) the owner of a cluster, by rendezvous hashing over the replicas' Leases, probes its servers and writes its status. The first replica's figures are in the table above; the others':\n\n", n-1)
	p("| replica | RSS before → with %d clusters | per added cluster | Go heap in use | goroutines | open files | TCP → the servers | CPU, idle | probes over pooled / new connections, idle |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n", k+2)
	b0 := c.Baseline
	p("| the harness's (first) | %s → %s | %s | %s | %.0f | %d | %s | %.1f ms/s | %.1f / %.1f /s |\n", measure.MB(float64(b0.RSSKB)), measure.MB(float64(c.After.RSSKB)),
		per(float64(b0.RSSKB)*1024, float64(c.After.RSSKB)*1024, k, measure.KiB), mib(c.After.HeapInuse), c.After.Goroutines, c.After.OpenFiles, ints(c.After.ToFleet),
		1e3*c.AfterIdle.GatewayCPU, c.AfterIdle.ProbesPooled, c.AfterIdle.ProbesNew)
	totalCPU, totalProbes := c.AfterIdle.GatewayCPU, c.AfterIdle.ProbesPooled+c.AfterIdle.ProbesNew
	for i, a := range c.ReplicasAfter {
		var b replicaState
		if i < len(c.ReplicasBefore) {
			b = c.ReplicasBefore[i]
		}
		p("| %s | %s → %s | %s | %s | %.0f | %d | %s | %.1f ms/s | %.1f / %.1f /s |\n", a.Name, measure.MB(float64(b.RSSKB)), measure.MB(float64(a.RSSKB)),
			per(float64(b.RSSKB)*1024, float64(a.RSSKB)*1024, k, measure.KiB), mib(a.HeapInuse), a.Goroutines, a.OpenFiles, ints(a.ToFleet), 1e3*a.CPU, a.ProbesPooled, a.ProbesNew)
		totalCPU += a.CPU
		totalProbes += a.ProbesPooled + a.ProbesNew
		if a.Err != "" {
			p("\nNot measured on %s: %s.\n", a.Name, a.Err)
		}
	}
	p("\nAll replicas together, idle: %.1f ms/s of CPU and %.1f probes/s sent; the servers served %.1f probes/s (one per server and interval would be %.0f /s).\n\n",
		1e3*totalCPU, totalProbes, c.AfterIdle.Probes, float64(2*k)/5)
}
