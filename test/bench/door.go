package main

import (
	"fmt"

	"github.com/kubewharf/kube-gateway/test/bench/internal/floor"
	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
)

// The member door (-member-door, on by default): member-b's own admin
// through the gateway's door, with its client certificate (verified by the
// gateway) and with its token (a TokenReview on member-b, cached).

func (r *report) hasDoor() bool {
	for _, t := range r.Targets {
		if t.Key == measure.DoorCertKey {
			return true
		}
	}
	return false
}

// doorSection compares the door's two targets with direct, the floor (when
// measured) and the hub's path, from the same rounds.
func (r *report) doorSection(p func(string, ...any)) {
	o := r.Opts
	c := o.Concurrency
	cert, token := measure.DoorCertKey, measure.DoorTokenKey
	p("## The member door: a member's own clients\n\n")
	p("`door, certificate` is member-b's own admin client certificate (of member-b's CA) sent to the gateway's member door under member-b's door name; `door, token` is member-b's own admin token there, which the door checks with a TokenReview on member-b and keeps for 10 minutes. ")
	p("Either way the gateway impersonates that identity on member-b with its own credential, as on the hub's path. GETs only, in the same rounds and rotation as the other targets. ")
	p("TokenReviews the door sent to member-b in the whole run: **%.0f**. ", r.DoorTokenReviews)
	p("Values are medians over rounds; ratios are medians of the per-round ratios.\n\n")
	hasFloor := r.hasFloor()
	head := "| metric | direct | gateway alone | hub + gateway | door, cert | door, token | cert / direct | token / direct |"
	sep := "|---|---:|---:|---:|---:|---:|---:|---:|"
	if hasFloor {
		head += " floor | cert / floor | token / floor |"
		sep += "---:|---:|---:|"
	}
	p("%s\n%s\n", head, sep)
	row := func(name string, f func(roundData, string) float64, fmtv func(float64) string, noDirect bool) {
		dv, cr, tr := fmtv(r.med(f, "direct")), measure.X(r.ratioTo(f, cert, "direct")), measure.X(r.ratioTo(f, token, "direct"))
		if noDirect {
			dv, cr, tr = "–", "", ""
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s |", name, dv, fmtv(r.med(f, "gateway")), fmtv(r.med(f, "hub")), fmtv(r.med(f, cert)), fmtv(r.med(f, token)), cr, tr)
		if hasFloor {
			p(" %s | %s | %s |", fmtv(r.med(f, floor.Key)), measure.X(r.ratioTo(f, cert, floor.Key)), measure.X(r.ratioTo(f, token, floor.Key)))
		}
		p("\n")
	}
	rps := func(x float64) string { return fmt.Sprintf("%.0f /s", x) }
	row("**p50 latency, c=1**", c1P50, measure.Sec, false)
	row("p99 latency, c=1", c1P99, measure.Sec, false)
	row(fmt.Sprintf("**throughput, c=%d**", c), cnRPS, rps, false)
	row(fmt.Sprintf("proxy CPU per request, c=%d", c), proxyCPUN, measure.US, true)
	if o.Rate > 0 {
		row(fmt.Sprintf("p99 latency at %.0f/s (from the scheduled send)", o.Rate), rateP99, measure.Sec, false)
		row(fmt.Sprintf("**proxy CPU per request at %.0f/s**", o.Rate), proxyCPUR, measure.US, true)
		row(fmt.Sprintf("all processes' CPU per request at %.0f/s", o.Rate), allCPUR, measure.US, false)
		row(fmt.Sprintf("proxy heap allocated per request at %.0f/s", o.Rate), allocR, measure.KiB, true)
	}
	p("\nThe proxy is kube-gateway, or the floor proxy in its column. All processes' CPU counts member-b's too, so the door's certificate check and the TokenReviews show there.\n\n")
}
