package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/kubewharf/kube-gateway/test/bench/internal/floor"
	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
)

type roundData struct {
	Order []string
	C1    map[string]loadRun
	CN    map[string]loadRun
	Rate  map[string]loadRun // the fixed-rate run (empty with -rate 0)
	List  map[string][]listRun
	// FanOut: the fan-out LISTs of the round (see fanOutSection).
	FanOut []fanOutRun
}

type report struct {
	Opts       options
	Started    time.Time
	EnvStartup time.Duration
	Total      time.Duration
	Hz         float64
	HzHow      string
	Machine    measure.Machine
	Targets    []*measure.Target
	Procs      []measure.Proc
	IdleCPU    map[string]float64
	IdleFor    time.Duration
	SetupList  time.Duration
	Rounds     []roundData
	FirstLists []firstList

	Profiles      []profileResult
	FanOutProfile *fanOutProfile
	ProfileBinary string

	// FloorProfile is the floor proxy's CPU profile at the throughput
	// concurrency; nil without the floor or profiles.
	FloorProfile *profileResult

	// Tails are the execution traces of the c=1 load, the gateway's and
	// the floor's.
	Tails []tailTrace

	// DoorTokenReviews is how many TokenReviews the member door sent to
	// member-b during the whole run (the token target's requests included).
	DoorTokenReviews float64
}

// --- statistics ---

// per collects one value per round.
func (r *report) per(f func(rd roundData) float64) []float64 {
	var xs []float64
	for _, rd := range r.Rounds {
		xs = append(xs, f(rd))
	}
	return xs
}

// ratio is the median over rounds of the per-round ratio to direct (pairs
// measured minutes apart never meet in one ratio).
func (r *report) ratio(f func(rd roundData, key string) float64, key string) float64 {
	return measure.Median(r.per(func(rd roundData) float64 {
		d := f(rd, "direct")
		if d == 0 {
			return 0
		}
		return f(rd, key) / d
	}))
}

func (r *report) med(f func(rd roundData, key string) float64, key string) float64 {
	return measure.Median(r.per(func(rd roundData) float64 { return f(rd, key) }))
}

func (r *report) listMed(f func(l listRun) float64, key, enc string) float64 {
	return measure.Median(r.listAll(f, key, enc))
}

func (r *report) listAll(f func(l listRun) float64, key, enc string) []float64 {
	var xs []float64
	for _, rd := range r.Rounds {
		for _, l := range rd.List[key] {
			if l.Enc == enc {
				xs = append(xs, f(l))
			}
		}
	}
	return xs
}

func verdict(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**missed**"
}

// --- accessors ---

func c1P50(rd roundData, k string) float64  { return rd.C1[k].P50.Seconds() }
func c1P99(rd roundData, k string) float64  { return rd.C1[k].P99.Seconds() }
func cnRPS(rd roundData, k string) float64  { return rd.CN[k].RPS }
func cnP50(rd roundData, k string) float64  { return rd.CN[k].P50.Seconds() }
func cnP99(rd roundData, k string) float64  { return rd.CN[k].P99.Seconds() }
func c1RPS(rd roundData, k string) float64  { return rd.C1[k].RPS }
func gwCPU1(rd roundData, k string) float64 { return rd.C1[k].cpuPerReq("kube-gateway") }
func gwCPUN(rd roundData, k string) float64 { return rd.CN[k].cpuPerReq("kube-gateway") }

// proxyCPUN is the CPU per request at concurrency c of the proxy process of
// target k: the floor proxy for floor, kube-gateway otherwise.
func proxyCPUN(rd roundData, k string) float64 { return rd.CN[k].cpuPerReq(proxyProc(k)) }

// The fixed-rate run.
func rateRPS(rd roundData, k string) float64 { return rd.Rate[k].RPS }
func rateP50(rd roundData, k string) float64 { return rd.Rate[k].P50.Seconds() }
func rateP99(rd roundData, k string) float64 { return rd.Rate[k].P99.Seconds() }

// proxyCPUR is the CPU per request, in the fixed-rate run, of the proxy
// process of target k: the floor proxy for floor, kube-gateway otherwise.
func proxyCPUR(rd roundData, k string) float64 { return rd.Rate[k].cpuPerReq(proxyProc(k)) }

// allCPUR is the CPU per request of every process together in the fixed-rate run.
func allCPUR(rd roundData, k string) float64 {
	var sum float64
	for _, v := range rd.Rate[k].CPU {
		sum += v
	}
	if n := rd.Rate[k].Requests; n > 0 {
		return sum / float64(n)
	}
	return 0
}

func allocR(rd roundData, k string) float64 { return rd.Rate[k].AllocPerReq }

// proxyKernel returns the proxy's read system calls (0), write system calls
// (1) or context switches (2) per request in the fixed-rate run.
func proxyKernel(i int) func(rd roundData, k string) float64 {
	return func(rd roundData, k string) float64 { return rd.Rate[k].Kernel[proxyProc(k)][i] }
}

func proxyProc(k string) string {
	if k == floor.Key {
		return floor.Proc
	}
	return "kube-gateway"
}

// The floor proxy's own CPU per request.
func floorCPU1(rd roundData, k string) float64 { return rd.C1[k].cpuPerReq(floor.Proc) }
func floorCPUN(rd roundData, k string) float64 { return rd.CN[k].cpuPerReq(floor.Proc) }
func listSec(rd roundData, k, enc string) float64 {
	var xs []float64
	for _, l := range rd.List[k] {
		if l.Enc == enc {
			xs = append(xs, l.Elapsed.Seconds())
		}
	}
	return measure.Median(xs)
}

// markdown renders the whole report.
func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	o := r.Opts
	c := o.Concurrency
	m := r.Machine
	keys := []string{"direct", "gateway", "hub"}

	p("# kube-gateway benchmark\n\n")
	p("Run %s on %d CPUs (%s), %.0f GiB RAM, Linux %s, %s. ", r.Started.UTC().Format("2006-01-02 15:04 UTC"), m.NProc, m.CPU, m.MemGB, m.Kernel, m.Go)
	if m.Commit != "" {
		p("Code: %s (the kube-gateway binary `make build` made from it). ", m.Commit)
	}
	if r.hasFloor() {
		p("Every process (etcd, hub, member-a ×2, member-b, kube-gateway, the floor proxy, this client) on 127.0.0.1 of the same machine. ")
	} else {
		p("Every process (etcd, hub, member-a ×2, member-b, kube-gateway, this client) on 127.0.0.1 of the same machine. ")
	}
	if r.hasFloor() && o.FloorImpersonates {
		p("The floor proxy impersonates (-floor-impersonates): it sends the gateway's member token and names admin and its groups in Impersonate-* headers, as the gateway does, so member-b authorizes the same impersonation on both paths. ")
	}
	if len(o.GatewayArgs) > 0 {
		p("The gateway's command line adds %s. ", strings.Join(o.GatewayArgs, " "))
	}
	if len(o.GatewayEnv) > 0 {
		p("The gateway's environment adds %s. ", strings.Join(o.GatewayEnv, " "))
	}
	p("%d rounds; each round runs every target once per measurement in a rotating order; values are medians over rounds, ratios are medians of the per-round ratios to direct. ", o.Rounds)
	p("GET `%s` (%d requests per target per round at c=1; %s per target per round at c=%d); LIST `%s` (%d ConfigMaps, %d per target per round). ", getPath, o.Requests, o.Duration, c, listPath, o.ListObjects, o.ListPerRound)
	if o.Rate > 0 {
		p("Fixed rate: %.0f GETs/s for %s per target per round, an open loop (below). ", o.Rate, o.RateDuration)
	}
	p("Protocols seen: ")
	for i, t := range r.Targets {
		if i > 0 {
			p(", ")
		}
		p("%s %s", t.Key, t.Proto)
	}
	p(". CPU times from /proc/<pid>/stat utime+stime at %.0f ticks/s (%s).\n\n", r.Hz, r.HzHow)

	r.headline(p)

	// GET.
	p("## GET of one object by name\n\n")
	p("| metric | direct | gateway alone | gateway / direct | hub + gateway | hub+gw / direct |\n|---|---:|---:|---:|---:|---:|\n")
	row := func(name string, f func(roundData, string) float64, fmtv func(float64) string) {
		p("| %s | %s | %s | %s | %s | %s |\n", name, fmtv(r.med(f, "direct")), fmtv(r.med(f, "gateway")), measure.X(r.ratio(f, "gateway")), fmtv(r.med(f, "hub")), measure.X(r.ratio(f, "hub")))
	}
	rps := func(x float64) string { return fmt.Sprintf("%.0f /s", x) }
	row("p50 latency, c=1", c1P50, measure.Sec)
	row("p99 latency, c=1", c1P99, measure.Sec)
	row("throughput, c=1", c1RPS, rps)
	row(fmt.Sprintf("**throughput, c=%d**", c), cnRPS, rps)
	row(fmt.Sprintf("p50 latency, c=%d", c), cnP50, measure.Sec)
	row(fmt.Sprintf("p99 latency, c=%d", c), cnP99, measure.Sec)
	p("| gateway CPU per request, c=1 | – | %s | | %s | |\n", measure.US(r.med(gwCPU1, "gateway")), measure.US(r.med(gwCPU1, "hub")))
	p("| gateway CPU per request, c=%d | – | %s | | %s | |\n", c, measure.US(r.med(gwCPUN, "gateway")), measure.US(r.med(gwCPUN, "hub")))
	var errs []string
	for _, rd := range r.Rounds {
		for _, t := range r.Targets { // the floor too
			k := t.Key
			for _, l := range []loadRun{rd.C1[k], rd.CN[k], rd.Rate[k]} {
				if l.Errors > 0 {
					errs = append(errs, fmt.Sprintf("%s: %d errors (first: %s)", k, l.Errors, l.FirstErr))
				}
			}
		}
	}
	if len(errs) == 0 {
		p("\nNo request failed.\n\n")
	} else {
		p("\nFailed requests (excluded from latencies): %s\n\n", strings.Join(errs, "; "))
	}

	// Peers.
	g50, gRPS := r.ratio(c1P50, "gateway"), r.ratio(cnRPS, "gateway")
	h50, hRPS := r.ratio(c1P50, "hub"), r.ratio(cnRPS, "hub")
	p("## Against the peers\n\n")
	p("The peers' figures are quoted from an earlier measurement on this kind of machine (same member, same request), not re-measured here; the floor is measured in the same rounds (section \"Floor\").\n\n")
	p("| metric | kube-gateway, this run | KubeGateway | cluster-gateway |\n|---|---:|---:|---:|\n")
	p("| gateway hop p50, c=1 (× direct) | %s | ×1.58 | ×1.77 |\n", measure.X(g50))
	p("| gateway hop throughput, c=%d (× direct) | %s | ×0.63 | ×0.48 |\n", c, measure.X(gRPS))
	p("| gateway CPU per proxied request, c=%d | %s | 285 µs | 474 µs |\n", c, measure.US(r.med(gwCPUN, "gateway")))
	p("| hub + gateway p50, c=1 (× direct) | %s | | ×2.38 (hub + cluster-gateway) |\n", measure.X(h50))
	p("| hub + gateway throughput, c=%d (× direct) | %s | | ×0.37 (hub + cluster-gateway) |\n\n", c, measure.X(hRPS))

	// CPU budget.
	p("## CPU per request by process, c=%d GET (median over rounds)\n\n", c)
	p("On %d cores every process competes for the same CPUs, so the sum is what bounds throughput. ", m.NProc)
	p("Idle: background CPU while nothing was sent (%s before the rounds), already included in the per-request figures.\n\n", r.IdleFor.Round(time.Second))
	// The floor proxy has its own table, in the floor section.
	r.cpuByProcess(p, cnRuns, keys, []string{"direct", "gateway alone", "hub + gateway"}, true, floor.Proc)

	if r.hasFloor() {
		r.floorSection(p)
	}
	if r.hasDirectMode() {
		r.directModeSection(p)
	}
	if r.hasTunnel() {
		r.tunnelSection(p)
	}
	if r.hasDoor() {
		r.doorSection(p)
	}
	r.fanOutSection(p)
	if o.Rate > 0 {
		r.rateSection(p)
	}
	r.tailSection(p)

	// LIST.
	p("## LIST of %d ConfigMaps (no pagination)\n\n", o.ListObjects)
	p("Setup: %d ConfigMaps created directly on member-b by %d concurrent client-go workers in %s (%.0f/s). ", o.ListObjects, o.Workers, r.SetupList.Round(10*time.Millisecond), float64(o.ListObjects)/r.SetupList.Seconds())
	p("Each round LISTs through every target twice: as client-go does (gzip accepted; the member compresses the body, the proxies pass it through) and with `Accept-Encoding: identity` (the full JSON crosses every hop). ")
	p("First byte: time to the response's first byte; a proxy that buffered the body would push it towards the full time. ")
	p("RSS: the gateway's VmRSS sampled every 10 ms during the request (peak minus the value just before). ")
	p("Allocated: heap bytes the gateway allocated during the LIST, from `go_memstats_alloc_bytes_total` on its /metrics (read before and after, minus what one scrape allocates); a proxy that buffered the body would allocate at least its size.\n\n")
	p("| metric | direct | gateway alone | hub + gateway |\n|---|---:|---:|---:|\n")
	for _, enc := range encodings {
		el := func(l listRun) float64 { return l.Elapsed.Seconds() }
		fb := func(l listRun) float64 { return l.FirstByte.Seconds() }
		p("| **%s**: time, median |", enc)
		for _, k := range keys {
			p(" %s |", measure.Sec(r.listMed(el, k, enc)))
		}
		p("\n| %s: time, min – max |", enc)
		for _, k := range keys {
			lo, hi := measure.MinMax(r.listAll(el, k, enc))
			p(" %s – %s |", measure.Sec(lo), measure.Sec(hi))
		}
		p("\n| %s: time × direct | ×1.00 | %s | %s |\n", enc,
			measure.X(r.ratio(func(rd roundData, k string) float64 { return listSec(rd, k, enc) }, "gateway")),
			measure.X(r.ratio(func(rd roundData, k string) float64 { return listSec(rd, k, enc) }, "hub")))
		p("| %s: first byte, median |", enc)
		for _, k := range keys {
			p(" %s |", measure.Sec(r.listMed(fb, k, enc)))
		}
		p("\n| %s: body |", enc)
		for _, k := range keys {
			wire := "identity on the wire"
			if xs := r.listAll(func(l listRun) float64 {
				if l.Gzip {
					return 1
				}
				return 0
			}, k, enc); len(xs) > 0 && xs[0] == 1 {
				wire = "gzip on the wire"
			}
			p(" %s decoded, %s |", measure.MB(r.listMed(func(l listRun) float64 { return float64(l.Bytes) / 1024 }, k, enc)), wire)
		}
		p("\n| %s: gateway RSS growth, median (max) | – |", enc)
		for _, k := range keys[1:] {
			xs := r.listAll(func(l listRun) float64 { return float64(l.RSSGrowth) }, k, enc)
			_, hi := measure.MinMax(xs)
			p(" %s (%s) |", measure.MB(measure.Median(xs)), measure.MB(hi))
		}
		p("\n| %s: heap bytes the gateway allocated per LIST, median (max) | – |", enc)
		for _, k := range keys[1:] {
			var xs []float64
			for _, rd := range r.Rounds {
				for _, l := range rd.List[k] {
					if l.Enc == enc && l.AllocKnown {
						xs = append(xs, l.AllocBytes/1024)
					}
				}
			}
			if len(xs) == 0 {
				p(" n/a |")
				continue
			}
			_, hi := measure.MinMax(xs)
			p(" %s (%s) |", measure.MB(measure.Median(xs)), measure.MB(hi))
		}
		p("\n| %s: gateway VmRSS before → peak, median | – |", enc)
		for _, k := range keys[1:] {
			p(" %s → %s |", measure.MB(r.listMed(func(l listRun) float64 { return float64(l.RSSBefore) }, k, enc)), measure.MB(r.listMed(func(l listRun) float64 { return float64(l.RSSPeak) }, k, enc)))
		}
		p("\n")
		for _, pr := range r.Procs {
			if pr.Name == "etcd" || pr.Name == floor.Proc {
				continue
			}
			p("| %s: CPU of %s per LIST |", enc, pr.Name)
			for _, k := range keys {
				p(" %s |", measure.Sec(r.listMed(func(l listRun) float64 { return l.CPU[pr.Name] }, k, enc)))
			}
			p("\n")
		}
	}
	if len(r.FirstLists) > 0 {
		p("\nThe first LISTs the gateway ever served (warm-up, heap still small): ")
		var xs []string
		for _, f := range r.FirstLists {
			xs = append(xs, fmt.Sprintf("%s %s: RSS %s → peak %s (+%s, %d samples), %s allocated, %s",
				f.Target, f.Run.Enc, measure.MB(float64(f.Run.RSSBefore)), measure.MB(float64(f.Run.RSSPeak)), measure.MB(float64(f.Run.RSSGrowth)), f.Run.RSSSamples,
				measure.MB(f.Run.AllocBytes/1024), measure.Sec(f.Run.Elapsed.Seconds())))
		}
		p("%s.\n", strings.Join(xs, "; "))
	}
	p("\n")

	// Per round.
	p("## Every round (noise)\n\n")
	p("| round | order | c=1 p50 d / g / h | c=%d req/s d / g / h | gateway CPU/req c=1 / c=%d | LIST gzip d / g / h | LIST identity d / g / h | gateway RSS growth, identity g / h |\n|---|---|---|---|---|---|---|---|\n", c, c)
	for i, rd := range r.Rounds {
		p("| %d | %s | %s / %s / %s | %.0f / %.0f / %.0f | %s / %s | %s / %s / %s | %s / %s / %s |",
			i+1, strings.Join(rd.Order, ", "),
			measure.Dur(rd.C1["direct"].P50), measure.Dur(rd.C1["gateway"].P50), measure.Dur(rd.C1["hub"].P50),
			rd.CN["direct"].RPS, rd.CN["gateway"].RPS, rd.CN["hub"].RPS,
			measure.US(gwCPU1(rd, "gateway")), measure.US(gwCPUN(rd, "gateway")),
			measure.Sec(listSec(rd, "direct", "gzip")), measure.Sec(listSec(rd, "gateway", "gzip")), measure.Sec(listSec(rd, "hub", "gzip")),
			measure.Sec(listSec(rd, "direct", "identity")), measure.Sec(listSec(rd, "gateway", "identity")), measure.Sec(listSec(rd, "hub", "identity")))
		var gs []string
		for _, k := range keys[1:] {
			var xs []string
			for _, l := range rd.List[k] {
				if l.Enc == "identity" {
					xs = append(xs, measure.MB(float64(l.RSSGrowth)))
				}
			}
			gs = append(gs, strings.Join(xs, ","))
		}
		p(" %s |\n", strings.Join(gs, " / "))
	}
	p("\n")
	if r.hasFloor() {
		p("Floor target (GETs only):\n\n")
		p("| round | c=1 p50 d / f / g | c=%d req/s d / f / g | floor proxy CPU/req c=1 / c=%d / %.0f/s | gateway CPU/req c=1 / c=%d / %.0f/s | gateway / floor CPU at %.0f/s |\n|---|---|---|---|---|---|\n", c, c, o.Rate, c, o.Rate, o.Rate)
		for i, rd := range r.Rounds {
			ratio := "–"
			if f := proxyCPUR(rd, floor.Key); f > 0 {
				ratio = measure.X(proxyCPUR(rd, "gateway") / f)
			}
			p("| %d | %s / %s / %s | %.0f / %.0f / %.0f | %s / %s / %s | %s / %s / %s | %s |\n", i+1,
				measure.Dur(rd.C1["direct"].P50), measure.Dur(rd.C1[floor.Key].P50), measure.Dur(rd.C1["gateway"].P50),
				rd.CN["direct"].RPS, rd.CN[floor.Key].RPS, rd.CN["gateway"].RPS,
				measure.US(floorCPU1(rd, floor.Key)), measure.US(floorCPUN(rd, floor.Key)), measure.US(proxyCPUR(rd, floor.Key)),
				measure.US(gwCPU1(rd, "gateway")), measure.US(gwCPUN(rd, "gateway")), measure.US(proxyCPUR(rd, "gateway")), ratio)
		}
		p("\n")
	}

	// Profiles.
	for i, pf := range r.Profiles {
		pr := pf.Run
		p("## Gateway CPU profile, c=%d\n\n", pf.Concurrency)
		p("A separate gateway-alone c=%d GET run of %s (not part of the medians above) with `GET /debug/pprof/profile?seconds=%d` on the gateway during it: %.0f req/s, p50 %s, gateway CPU %s per request (profiling included). ",
			pf.Concurrency, pr.Elapsed.Round(100*time.Millisecond), o.ProfileSeconds, pr.RPS, measure.Dur(pr.P50), measure.US(pr.cpuPerReq("kube-gateway")))
		p("Profile: `%s` (`go tool pprof %s %s`). %.2f s of samples in %d s.\n\n", pf.File, r.ProfileBinary, pf.File, pf.Total, o.ProfileSeconds)
		p("Where the samples go. Each sample is counted once, in the first group of this list's order that one of its frames belongs to; ")
		p("leaf-side work (GC, stack growth, system calls, x509, TLS, HTTP/2, the reverse proxy) comes before the handlers that wrap it, so a filter keeps only its own work. ")
		p("µs per request = share × the run's gateway CPU per request.\n\n")
		p("| group | samples | share | ≈ µs per request |\n|---|---:|---:|---:|\n")
		perReq := pr.cpuPerReq("kube-gateway")
		for _, g := range pf.Groups {
			if g.Seconds == 0 {
				continue
			}
			p("| %s | %.2f s | %.1f%% | %.0f |\n", g.Name, g.Seconds, g.Pct, g.Pct/100*perReq*1e6)
		}
		if fp := r.FloorProfile; fp != nil && fp.Concurrency == pf.Concurrency {
			r.againstFloor(p, &pf, fp)
		}
		if i == 0 {
			p("\nTop 15 by cumulative time (`go tool pprof -top -cum`):\n\n```\n%s```\n\n", measure.TrimPprof(pf.TopCum))
		}
		p("\nTop 15 by own time (`go tool pprof -top`):\n\n```\n%s```\n\n", measure.TrimPprof(pf.TopFlat))
		if pf.AllocFile != "" {
			p("Heap allocations during the same %d s (`GET /debug/pprof/allocs?seconds=%d`, `%s`): %.1f MiB", o.ProfileSeconds, o.ProfileSeconds, pf.AllocFile, pf.AllocBytes/(1<<20))
			if pf.AllocRequests > 0 {
				p(", about %.1f KiB per request (%d requests at the run's rate)", pf.AllocBytes/float64(pf.AllocRequests)/1024, pf.AllocRequests)
			}
			p(". Top 15 by bytes (`go tool pprof -sample_index=alloc_space -top`):\n\n```\n%s```\n\n", measure.TrimPprof(pf.AllocTop))
		}
	}
	p("Environment start-up %s; whole run %s.\n", r.EnvStartup.Round(time.Second), r.Total.Round(time.Second))
	return b.String()
}

// againstFloor sets the gateway's profile groups against the floor proxy's,
// each in µs per request of its own run at the same concurrency: the
// difference is where the gateway spends more than any Go proxy must.
func (r *report) againstFloor(p func(string, ...any), gw, fl *profileResult) {
	gwPerReq, flPerReq := gw.Run.cpuPerReq("kube-gateway")*1e6, fl.Run.cpuPerReq(floor.Proc)*1e6
	p("\nThe same groups in the floor proxy's profile, taken after the gateway's under its own c=%d load of %s (%.0f req/s, floor proxy CPU %.0f µs per request; `go tool pprof %s`: the profile carries its symbols). ",
		fl.Concurrency, fl.Run.Elapsed.Round(100*time.Millisecond), fl.Run.RPS, flPerReq, fl.File)
	p("Both in µs per request of their own run; the floor speaks HTTP/2 with the standard library's bundled copy, the gateway with golang.org/x/net/http2 (the groups count both).\n\n")
	p("| group | gateway µs | floor µs | gateway − floor |\n|---|---:|---:|---:|\n")
	floorUS := map[string]float64{}
	for _, g := range fl.Groups {
		floorUS[g.Name] = g.Pct / 100 * flPerReq
	}
	for _, g := range gw.Groups {
		gu, fu := g.Pct/100*gwPerReq, floorUS[g.Name]
		if gu < 0.5 && fu < 0.5 {
			continue
		}
		p("| %s | %.0f | %.0f | %+.0f |\n", g.Name, gu, fu, gu-fu)
	}
	p("| all | %.0f | %.0f | %+.0f |\n\n", gwPerReq, flPerReq, gwPerReq-flPerReq)
}

func (r *report) hasFloor() bool {
	for _, t := range r.Targets {
		if t.Key == floor.Key {
			return true
		}
	}
	return false
}

// vs returns the medians over rounds of a/b and a-b, each computed per round
// (the two values of a pair were measured seconds apart).
func (r *report) vs(a, b func(rd roundData) float64) (ratio, diff float64) {
	ratio = measure.Median(r.per(func(rd roundData) float64 {
		if d := b(rd); d != 0 {
			return a(rd) / d
		}
		return 0
	}))
	diff = measure.Median(r.per(func(rd roundData) float64 { return a(rd) - b(rd) }))
	return ratio, diff
}

// floorSection compares the gateway with the floor proxy: what any Go
// reverse proxy costs here against what the gateway costs.
func (r *report) floorSection(p func(string, ...any)) {
	c := r.Opts.Concurrency
	p("## Floor: a minimal Go reverse proxy\n\n")
	p("`floor` is `test/bench/floorproxy`, a separate process in front of member-b: TLS 1.2+ and HTTP/2 in (a certificate from its own CA), ")
	p("HTTP/2 out over one pooled `http.Transport`, `httputil.ReverseProxy` (Rewrite, a sync.Pool of 32 KiB buffers, FlushInterval 0 as the gateway for requests that are not long-running) that puts ")
	if r.Opts.FloorImpersonates {
		p("the gateway's member token and the impersonation headers the gateway sends for admin (`Impersonate-User: admin`, `Impersonate-Group: system:masters`, `system:authenticated`) on the request; ")
	} else {
		p("the member admin token on the request (it impersonates nobody, so member-b does less per request than behind the gateway: `-floor-impersonates` changes that); ")
	}
	p("no authentication, authorization, admission, metrics or per-request logging. ")
	p("A Go proxy in the gateway's place does at least this work, so it is the floor: the gateway's own overhead is gateway minus floor. ")
	p("Measured in the same rounds and rotation as the other targets (GETs only, no LIST). ")
	p("Values are medians over rounds; ratios and differences are medians of the per-round ratios and differences. ")
	p("CPU per request is the floor proxy process's for floor and the kube-gateway process's for gateway alone.\n\n")
	p("| metric | direct | floor | floor / direct | gateway alone | gateway / direct | gateway / floor | gateway − floor |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	row := func(name string, f func(roundData, string) float64, fmtv func(float64) string, diff bool) {
		ratio, d := r.vs(func(rd roundData) float64 { return f(rd, "gateway") }, func(rd roundData) float64 { return f(rd, floor.Key) })
		ds := "–"
		if diff {
			ds = fmtv(d)
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", name, fmtv(r.med(f, "direct")),
			fmtv(r.med(f, floor.Key)), measure.X(r.ratio(f, floor.Key)),
			fmtv(r.med(f, "gateway")), measure.X(r.ratio(f, "gateway")), measure.X(ratio), ds)
	}
	rps := func(x float64) string { return fmt.Sprintf("%.0f /s", x) }
	row("p50 latency, c=1", c1P50, measure.Sec, true)
	row("p99 latency, c=1", c1P99, measure.Sec, true)
	row(fmt.Sprintf("**throughput, c=%d**", c), cnRPS, rps, false)
	row(fmt.Sprintf("p50 latency, c=%d", c), cnP50, measure.Sec, true)
	cpuRow := func(name string, floorF, gwF func(roundData, string) float64) {
		fl := func(rd roundData) float64 { return floorF(rd, floor.Key) }
		gw := func(rd roundData) float64 { return gwF(rd, "gateway") }
		ratio, d := r.vs(gw, fl)
		p("| %s | – | %s | | %s | | %s | %s |\n", name, measure.US(measure.Median(r.per(fl))), measure.US(measure.Median(r.per(gw))), measure.X(ratio), measure.US(d))
	}
	cpuRow("**proxy CPU per request, c=1**", floorCPU1, gwCPU1)
	cpuRow(fmt.Sprintf("**proxy CPU per request, c=%d**", c), floorCPUN, gwCPUN)

	p("\nCPU per request by process, c=%d GET (the floor proxy's idle: %.1f ms/s):\n\n", c, 1e3*r.IdleCPU[floor.Proc]/r.IdleFor.Seconds())
	r.cpuByProcess(p, cnRuns, []string{"direct", floor.Key, "gateway"}, []string{"direct", "floor", "gateway alone"}, false, "")
}

func cnRuns(rd roundData) map[string]loadRun   { return rd.CN }
func rateRuns(rd roundData) map[string]loadRun { return rd.Rate }

// cpuByProcess writes the table of CPU per request of every process (but skip)
// in the runs that runs picks (the throughput or the fixed-rate ones) of the
// targets keys, headed by labels, with a sum row; idle adds each process's
// background CPU.
func (r *report) cpuByProcess(p func(string, ...any), runs func(roundData) map[string]loadRun, keys, labels []string, idle bool, skip string) {
	head, rule := "| process |", "|---|"
	if idle {
		head, rule = head+" idle |", rule+"---:|"
	}
	for _, l := range labels {
		head, rule = head+" "+l+" |", rule+"---:|"
	}
	p("%s\n%s\n", head, rule)
	totals := map[string]float64{}
	for _, pr := range r.Procs {
		if pr.Name == skip {
			continue
		}
		p("| %s |", pr.Name)
		if idle {
			p(" %.1f ms/s |", 1e3*r.IdleCPU[pr.Name]/r.IdleFor.Seconds())
		}
		for _, k := range keys {
			v := r.med(func(rd roundData, k string) float64 { return runs(rd)[k].cpuPerReq(pr.Name) }, k)
			totals[k] += v
			p(" %s |", measure.US(v))
		}
		p("\n")
	}
	p("| **sum** |")
	if idle {
		p(" |")
	}
	for _, k := range keys {
		p(" **%s** |", measure.US(totals[k]))
	}
	p("\n\n")
}
