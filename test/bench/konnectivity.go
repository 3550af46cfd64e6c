package main

import (
	"fmt"

	"github.com/kubewharf/kube-gateway/test/bench/internal/floor"
	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
)

// The konnectivity tunnel (-konnectivity): member-b registered a second time
// through a konnectivity server and an agent (harness.StartKonnectivity); the
// target measure.TunnelKey reaches it as gateway alone does, so the difference
// between the two is the tunnel's.

func (r *report) hasTunnel() bool {
	for _, t := range r.Targets {
		if t.Key == measure.TunnelKey {
			return true
		}
	}
	return false
}

// tunnelSection compares the tunnel with direct and gateway alone, from the
// same rounds.
func (r *report) tunnelSection(p func(string, ...any)) {
	c := r.Opts.Concurrency
	k := measure.TunnelKey
	p("## Konnectivity tunnel\n\n")
	p("`tunnel` is gateway alone to member-b registered through a konnectivity server and agent (gRPC, mutual TLS, on loopback): the gateway's pooled HTTP/2 connection to member-b runs over one tunnel stream. ")
	p("GETs only, in the same rounds and rotation as the other targets. Values are medians over rounds; ratios are medians of the per-round ratios.\n\n")
	p("| metric | direct | gateway alone | tunnel | tunnel / direct | tunnel / gateway alone |\n|---|---:|---:|---:|---:|---:|\n")
	row := func(name string, f func(roundData, string) float64, fmtv func(float64) string) {
		p("| %s | %s | %s | %s | %s | %s |\n", name, fmtv(r.med(f, "direct")), fmtv(r.med(f, "gateway")), fmtv(r.med(f, k)),
			measure.X(r.ratioTo(f, k, "direct")), measure.X(r.ratioTo(f, k, "gateway")))
	}
	rps := func(x float64) string { return fmt.Sprintf("%.0f /s", x) }
	row("**p50 latency, c=1**", c1P50, measure.Sec)
	row("p99 latency, c=1", c1P99, measure.Sec)
	row(fmt.Sprintf("**throughput, c=%d**", c), cnRPS, rps)
	p("\nCPU per request by process, c=%d GET:\n\n", c)
	r.cpuByProcess(p, cnRuns, []string{"direct", "gateway", k}, []string{"direct", "gateway alone", "tunnel"}, false, floor.Proc)
}
