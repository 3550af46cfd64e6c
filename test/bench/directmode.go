package main

import (
	"fmt"
	"strings"

	"github.com/kubewharf/kube-gateway/test/bench/internal/floor"
	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
)

// Direct mode (-direct-mode): the gateway runs with --direct-access, and the
// target measure.DirectModeKey sends the hub admin token straight to it. The
// gateway checks the token with a TokenReview to the hub (cached for about
// 10 s, so the hub's CPU is part of this target's cost) and forwards to
// member-b; the hub's priority and fairness and its audit are skipped.
const (
	directAccessArg = "--direct-access"
	hubProc         = "hub-1" // the hub's name in procs
)

func (r *report) hasDirectMode() bool {
	for _, t := range r.Targets {
		if t.Key == measure.DirectModeKey {
			return true
		}
	}
	return false
}

// procCPU returns the accessor of the CPU per request of process proc in the
// runs that runs picks.
func procCPU(runs func(roundData) map[string]loadRun, proc string) func(roundData, string) float64 {
	return func(rd roundData, k string) float64 { return runs(rd)[k].cpuPerReq(proc) }
}

func c1Runs(rd roundData) map[string]loadRun { return rd.C1 }

// directModeSection compares direct mode with direct, gateway alone and
// hub + gateway, from the same rounds.
func (r *report) directModeSection(p func(string, ...any)) {
	o := r.Opts
	c := o.Concurrency
	dm := measure.DirectModeKey
	p("## Direct mode: hub credentials straight to the gateway\n\n")
	p("`direct mode` sends the hub admin token straight to the gateway, which runs with `%s` (for every target of this run), at the same proxy path as gateway alone. ", directAccessArg)
	p("The gateway authenticates the token itself with a TokenReview to the hub, cached about 10 s (admin is in system:masters, which the gateway's authorizer allows without a SubjectAccessReview; other users add one, cached too), so the hub still works for this target, only much less: its CPU is counted below. ")
	p("It is what a client saves by skipping the hub, and what it gives up with it: the hub's API Priority and Fairness and the hub's audit log (the gateway's own audit policy applies instead). ")
	p("Measured in the same rounds and rotation as the other targets (GETs only, no LIST); warmed up like them, so the first TokenReview is not in the figures, the ones every 10 s are. ")
	p("Values are medians over rounds; ratios are medians of the per-round ratios.\n\n")
	p("| metric | direct | gateway alone | hub + gateway | direct mode | dm / direct | dm / gateway alone | dm / hub+gw |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	// noDirect leaves out the direct column and the ratio to it (the gateway's
	// CPU, when direct never crosses it).
	row := func(name string, f func(roundData, string) float64, fmtv func(float64) string, noDirect bool) {
		dv, dr := fmtv(r.med(f, "direct")), measure.X(r.ratioTo(f, dm, "direct"))
		if noDirect {
			dv, dr = "–", ""
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", name, dv, fmtv(r.med(f, "gateway")), fmtv(r.med(f, "hub")), fmtv(r.med(f, dm)),
			dr, measure.X(r.ratioTo(f, dm, "gateway")), measure.X(r.ratioTo(f, dm, "hub")))
	}
	rps := func(x float64) string { return fmt.Sprintf("%.0f /s", x) }
	row("**p50 latency, c=1**", c1P50, measure.Sec, false)
	row("p99 latency, c=1", c1P99, measure.Sec, false)
	row(fmt.Sprintf("**throughput, c=%d**", c), cnRPS, rps, false)
	row(fmt.Sprintf("gateway CPU per request, c=%d", c), gwCPUN, measure.US, true)
	row(fmt.Sprintf("hub CPU per request, c=%d", c), procCPU(cnRuns, hubProc), measure.US, false)
	if o.Rate > 0 {
		row(fmt.Sprintf("p99 latency at %.0f/s (from the scheduled send)", o.Rate), rateP99, measure.Sec, false)
		row(fmt.Sprintf("**gateway CPU per request at %.0f/s**", o.Rate), procCPU(rateRuns, "kube-gateway"), measure.US, true)
		row(fmt.Sprintf("**hub CPU per request at %.0f/s**", o.Rate), procCPU(rateRuns, hubProc), measure.US, false)
		row(fmt.Sprintf("CPU per request, all processes, at %.0f/s", o.Rate), allCPUR, measure.US, false)
		row(fmt.Sprintf("gateway heap allocated per request at %.0f/s", o.Rate), allocR, measure.KiB, true)
	}
	p("\nHub CPU for direct and gateway alone is the hub's background (neither sends it anything); for direct mode it adds the TokenReviews. ")
	p("The hub's idle: %.1f ms/s.\n\n", 1e3*r.IdleCPU[hubProc]/r.IdleFor.Seconds())

	keys := []string{"direct", "gateway", dm, "hub"}
	labels := []string{"direct", "gateway alone", "direct mode", "hub + gateway"}
	if o.Rate > 0 {
		var short []string
		for i, rd := range r.Rounds {
			if l := rd.Rate[dm]; l.RPS < 0.95*o.Rate {
				short = append(short, fmt.Sprintf("round %d: %.0f/s (longest wait for a free slot %s)", i+1, l.RPS, measure.Dur(l.MaxLag)))
			}
		}
		if len(short) > 0 {
			p("**Direct mode below the rate asked for**: %s.\n\n", strings.Join(short, "; "))
		}
		p("CPU per request by process at %.0f/s:\n\n", o.Rate)
		r.cpuByProcess(p, rateRuns, keys, labels, false, floor.Proc)
	} else {
		p("CPU per request by process, c=%d GET:\n\n", c)
		r.cpuByProcess(p, cnRuns, keys, labels, false, floor.Proc)
	}

	p("Per round (g: gateway alone, dm: direct mode, h: hub + gateway):\n\n")
	p("| round | c=1 p50 g / dm / h | c=%d req/s g / dm / h | direct mode gateway CPU/req c=1 / c=%d / %.0f/s | direct mode hub CPU/req c=1 / c=%d / %.0f/s |\n|---|---|---|---|---|\n", c, c, o.Rate, c, o.Rate)
	for i, rd := range r.Rounds {
		p("| %d | %s / %s / %s | %.0f / %.0f / %.0f | %s / %s / %s | %s / %s / %s |\n", i+1,
			measure.Dur(rd.C1["gateway"].P50), measure.Dur(rd.C1[dm].P50), measure.Dur(rd.C1["hub"].P50),
			rd.CN["gateway"].RPS, rd.CN[dm].RPS, rd.CN["hub"].RPS,
			measure.US(gwCPU1(rd, dm)), measure.US(gwCPUN(rd, dm)), measure.US(procCPU(rateRuns, "kube-gateway")(rd, dm)),
			measure.US(procCPU(c1Runs, hubProc)(rd, dm)), measure.US(procCPU(cnRuns, hubProc)(rd, dm)), measure.US(procCPU(rateRuns, hubProc)(rd, dm)))
	}
	p("\n")
}
