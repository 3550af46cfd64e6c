package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/kubewharf/kube-gateway/test/bench/internal/floor"
	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
)

// ratioTo is the median over rounds of the per-round ratio f(key) / f(base).
func (r *report) ratioTo(f func(roundData, string) float64, key, base string) float64 {
	ratio, _ := r.vs(func(rd roundData) float64 { return f(rd, key) }, func(rd roundData) float64 { return f(rd, base) })
	return ratio
}

// roundsVerdict is met or missed by the median (met), and, when the rounds
// do not all agree with it, in how many of them the goal was met: on a
// shared machine a ratio moves by a tenth or two between rounds.
func roundsVerdict(met bool, perRound []float64, meets func(float64) bool) string {
	n := 0
	for _, x := range perRound {
		if meets(x) {
			n++
		}
	}
	v := verdict(met)
	if (met && n < len(perRound)) || (!met && n > 0) {
		v += fmt.Sprintf(" (met in %d of %d rounds)", n, len(perRound))
	}
	return v
}

// allocKnown reports whether the heap allocated per request of target key
// was measured in every round.
func (r *report) allocKnown(key string) bool {
	for _, rd := range r.Rounds {
		if !rd.Rate[key].AllocKnown {
			return false
		}
	}
	return len(r.Rounds) > 0
}

// profileAllocPerReq is the heap the gateway allocated per request in the
// profiled gateway-alone run at concurrency c (0 when there is none).
func (r *report) profileAllocPerReq(c int) float64 {
	for _, pf := range r.Profiles {
		if pf.Concurrency == c && pf.AllocRequests > 0 {
			return pf.AllocBytes / float64(pf.AllocRequests)
		}
	}
	return 0
}

// headline is the few figures the gateway's data plane is judged by, each
// next to the floor and direct from the same rounds. Its CPU figure comes
// from the fixed-rate run: at one rate for every target, CPU per request does
// not depend on how fast each target happens to run.
func (r *report) headline(p func(string, ...any)) {
	o := r.Opts
	hasFloor := r.hasFloor()
	p("## Headline\n\n")
	p("Gateway alone against the floor (a minimal Go reverse proxy) and direct, medians over rounds of per-round values, ratios and differences. ")
	if o.Rate > 0 {
		p("CPU and heap per GET come from the fixed-rate run (%.0f GETs/s for every target, an open loop: section \"Fixed rate\"). ", o.Rate)
	}
	p("The target column is the gateway's goal, a ratio to the floor measured in the same rounds (or, for the heap, an amount), judged on the median; when the rounds disagree it also says in how many the goal was met.\n\n")
	p("| metric | gateway alone | floor | gateway / floor | gateway − floor | direct | gateway / direct | target |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
	// floorCells are the floor's median, gateway / floor and gateway − floor
	// of f, and the ratio itself.
	floorCells := func(f func(roundData, string) float64, fmtv func(float64) string) (fl, ratio, diff string, rt float64) {
		rt, d := r.vs(func(rd roundData) float64 { return f(rd, "gateway") }, func(rd roundData) float64 { return f(rd, floor.Key) })
		return fmtv(r.med(f, floor.Key)), measure.X(rt), fmtv(d), rt
	}
	// target is the goal for gateway / floor: at most (or, with atLeast, at
	// least) goal; 0 means none.
	row := func(name string, f func(roundData, string) float64, fmtv func(float64) string, withDirect bool, goal float64, atLeast bool) {
		fl, ratio, diff, verdictCell := "–", "–", "–", ""
		if hasFloor {
			var rt float64
			fl, ratio, diff, rt = floorCells(f, fmtv)
			meets := func(x float64) bool { return x <= goal }
			cmp := "≤"
			if atLeast {
				meets, cmp = func(x float64) bool { return x >= goal }, "≥"
			}
			if goal > 0 {
				verdictCell = fmt.Sprintf("%s %s: %s", cmp, measure.X(goal), roundsVerdict(meets(rt), r.per(func(rd roundData) float64 {
					if b := f(rd, floor.Key); b != 0 {
						return f(rd, "gateway") / b
					}
					return math.NaN() // meets no goal
				}), meets))
			}
		}
		dv, dr := "–", "–"
		if withDirect {
			dv, dr = fmtv(r.med(f, "direct")), measure.X(r.ratio(f, "gateway"))
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", name, fmtv(r.med(f, "gateway")), fl, ratio, diff, dv, dr, verdictCell)
	}
	const heapGoal = 8 << 10 // bytes per proxied GET
	if o.Rate > 0 {
		row(fmt.Sprintf("**proxy CPU per GET at %.0f/s**", o.Rate), proxyCPUR, measure.US, false, 1.25, false)
		row(fmt.Sprintf("CPU per GET of all processes at %.0f/s", o.Rate), allCPUR, measure.US, true, 0, false)
		// The heap goal is an amount; the floor's own allocations show how
		// much of it any Go proxy spends.
		heap := r.med(allocR, "gateway")
		fl, ratio, diff := "–", "–", "–"
		if hasFloor && r.allocKnown(floor.Key) {
			fl, ratio, diff, _ = floorCells(allocR, measure.KiB)
		}
		heapVerdict := roundsVerdict(heap <= heapGoal, r.per(func(rd roundData) float64 { return allocR(rd, "gateway") }), func(x float64) bool { return x <= heapGoal })
		p("| **heap allocated per proxied GET at %.0f/s** | %s | %s | %s | %s | – | | ≤ %s: %s |\n", o.Rate, measure.KiB(heap), fl, ratio, diff, measure.KiB(heapGoal), heapVerdict)
	}
	if a := r.profileAllocPerReq(o.Concurrency); a > 0 {
		p("| heap allocated per proxied GET, c=%d (allocation profile) | %s | – | | | – | | |\n", o.Concurrency, measure.KiB(a))
	}
	row(fmt.Sprintf("proxy CPU per GET, c=%d", o.Concurrency), proxyCPUN, measure.US, false, 1.25, false)
	row(fmt.Sprintf("throughput, c=%d", o.Concurrency), cnRPS, func(x float64) string { return fmt.Sprintf("%.0f /s", x) }, true, 0.9, true)
	row("**p50 latency, c=1**", c1P50, measure.Sec, true, 1.08, false)
	row("**p99 latency, c=1**", c1P99, measure.Sec, true, 1.15, false)
	if o.Rate > 0 {
		row(fmt.Sprintf("p99 latency at %.0f/s (from the scheduled send)", o.Rate), rateP99, measure.Sec, true, 0, false)
	}
	p("\nProxy CPU is the floor proxy process's for floor and kube-gateway's for gateway alone; all processes adds member-b, the hub, etcd and the bench client. ")
	p("Heap allocated is the proxy's `go_memstats_alloc_bytes_total` over the run divided by its requests (the floor serves it on its debug listener).\n\n")
}

// rateSection reports the open-loop run at one fixed rate for every target.
func (r *report) rateSection(p func(string, ...any)) {
	o := r.Opts
	hasFloor := r.hasFloor()
	keys := []string{"direct", "gateway", "hub"}
	labels := []string{"direct", "gateway alone", "hub + gateway"}
	if hasFloor {
		keys = []string{"direct", floor.Key, "gateway", "hub"}
		labels = []string{"direct", "floor", "gateway alone", "hub + gateway"}
	}
	p("## Fixed rate: %.0f GETs/s for every target (open loop)\n\n", o.Rate)
	p("In the closed-loop c=%d run each target runs at its own throughput, and on %d cores CPU per request depends on it (batching, contention), so two runs of different hours disagree. ", o.Concurrency, r.Machine.NProc)
	p("Here every target gets the same %.0f GETs/s for %s per round (in the same rotation as the other runs): a `golang.org/x/time/rate` limiter schedules the sends, each request leaves on its own goroutine at its scheduled time whether or not earlier ones have returned (at most %d outstanding), ", o.Rate, o.RateDuration, o.RateInflight)
	p("and latency runs from the scheduled time, so a target that queues shows it in its latency instead of slowing the schedule (no coordinated omission). ")
	p("A target whose achieved rate falls short of the one asked for could not sustain it (its CPU figures are then a saturated run's). ")
	p("Values are medians over rounds; ratios are medians of the per-round ratios.\n\n")
	head, rule := "| metric |", "|---|"
	for _, l := range labels {
		head, rule = head+" "+l+" |", rule+"---:|"
	}
	ratioCols := [][2]string{{"gateway", "direct"}, {"hub", "direct"}}
	if hasFloor {
		ratioCols = [][2]string{{floor.Key, "direct"}, {"gateway", "direct"}, {"gateway", floor.Key}, {"hub", "direct"}, {"hub", floor.Key}}
	}
	name := map[string]string{"direct": "direct", floor.Key: "floor", "gateway": "gateway", "hub": "hub+gw"}
	for _, rc := range ratioCols {
		head, rule = head+" "+name[rc[0]]+" / "+name[rc[1]]+" |", rule+"---:|"
	}
	p("%s\n%s\n", head, rule)
	row := func(label string, f func(roundData, string) float64, fmtv func(float64) string, skip map[string]bool) {
		p("| %s |", label)
		for _, k := range keys {
			if skip[k] {
				p(" – |")
				continue
			}
			p(" %s |", fmtv(r.med(f, k)))
		}
		for _, rc := range ratioCols {
			if skip[rc[0]] || skip[rc[1]] {
				p(" |")
				continue
			}
			p(" %s |", measure.X(r.ratioTo(f, rc[0], rc[1])))
		}
		p("\n")
	}
	rps := func(x float64) string { return fmt.Sprintf("%.0f /s", x) }
	row("achieved rate", rateRPS, rps, nil)
	row("p50 latency (from the scheduled send)", rateP50, measure.Sec, nil)
	row("p99 latency (from the scheduled send)", rateP99, measure.Sec, nil)
	row("**proxy CPU per request**", proxyCPUR, measure.US, map[string]bool{"direct": true})
	row("member-b CPU per request", func(rd roundData, k string) float64 { return rd.Rate[k].cpuPerReq(member + "-1") }, measure.US, nil)
	row("CPU per request, all processes", allCPUR, measure.US, nil)
	row("proxy heap allocated per request", allocR, measure.KiB, map[string]bool{"direct": true})
	count := func(x float64) string { return fmt.Sprintf("%.2f", x) }
	row("proxy read system calls per request", proxyKernel(0), count, map[string]bool{"direct": true})
	row("proxy write system calls per request", proxyKernel(1), count, map[string]bool{"direct": true})
	row("proxy context switches per request", proxyKernel(2), count, map[string]bool{"direct": true})
	p("\nProxy CPU and kernel counts are the floor proxy's for floor and kube-gateway's for gateway alone and hub + gateway. ")
	p("System calls: `/proc/<pid>/io` syscr and syscw; context switches: voluntary and involuntary, summed over the process's threads (`/proc/<pid>/task/*/status`). Both count everything the process does in the run, also its health probes, metrics and watches of the hub. ")
	p("Heap allocated per request: the proxy process's `go_memstats_alloc_bytes_total` before and after the run (minus what one scrape allocates) over the run's requests: the floor proxy's for floor, kube-gateway's for the others.\n\n")

	var short []string
	for i, rd := range r.Rounds {
		for _, k := range keys {
			if l := rd.Rate[k]; l.RPS < 0.95*o.Rate {
				short = append(short, fmt.Sprintf("round %d %s: %.0f/s (longest wait for a free slot %s)", i+1, k, l.RPS, measure.Dur(l.MaxLag)))
			}
		}
	}
	if len(short) == 0 {
		p("Every target sustained the rate in every round (achieved within 5 %%).\n\n")
	} else {
		p("**Below the rate asked for** (the target, or the machine, could not sustain it): %s.\n\n", strings.Join(short, "; "))
	}
	p("Per round, proxy CPU per request at %.0f/s:", o.Rate)
	for _, k := range keys[1:] {
		var xs []string
		for _, rd := range r.Rounds {
			xs = append(xs, measure.US(proxyCPUR(rd, k)))
		}
		p(" %s %s;", name[k], strings.Join(xs, ", "))
	}
	p("\n\nCPU per request by process at %.0f/s:\n\n", o.Rate)
	r.cpuByProcess(p, rateRuns, keys, labels, false, "")
}
