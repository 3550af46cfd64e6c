package main

import (
	"context"
	"fmt"
	"time"

	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// memberA holds the second copy of the LIST objects for the fan-out LIST.
const memberA = harness.MemberA

// fanOutRun is one fan-out LIST through the hub over member-a and member-b,
// next to the direct LIST of each member, back to back.
type fanOutRun struct {
	DirectA, DirectB, FanOut time.Duration
	BytesFanOut              int64
}

// fanOutTargets are the direct way to member-a and the fan-out way through
// the hub to every UpstreamCluster (member-a and member-b in the bench).
func fanOutTargets(env *harness.Env, hub *measure.Target, timeout time.Duration) (directA, fan *measure.Target, err error) {
	m := env.Members[memberA]
	c, err := measure.NewClient(m.CAData, nil, timeout)
	if err != nil {
		return nil, nil, err
	}
	directA = &measure.Target{Key: "direct-a", Label: "direct member-a", Base: m.Servers[0].URL, Client: c,
		Header: map[string][]string{"Authorization": {"Bearer " + m.Tokens[harness.UserAdmin]}}}
	fan = &measure.Target{Key: "fanout", Label: "hub + gateway, fan-out", Client: hub.Client, Header: hub.Header,
		Base: env.Hub.Servers[0].URL + "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/*/proxy"}
	return directA, fan, nil
}

// measureFanOut LISTs (gzip, as Go clients ask) member-a directly,
// member-b directly, then both through the fan-out path.
func measureFanOut(ctx context.Context, directA, directB, fan *measure.Target) (fanOutRun, error) {
	var run fanOutRun
	for _, x := range []struct {
		t    *measure.Target
		path string
		out  *time.Duration
	}{
		{directA, listPath, &run.DirectA},
		{directB, listPath, &run.DirectB},
		// Strict: a member left out would make the fan-out look faster.
		{fan, listPath + "?gateway.kubewharf.io/strict=true", &run.FanOut},
	} {
		t0 := time.Now()
		res, err := x.t.DoEnc(ctx, x.path, false, false)
		*x.out = time.Since(t0)
		if err != nil {
			return run, fmt.Errorf("fan-out LIST, %s: %w", x.t.Label, err)
		}
		run.BytesFanOut = res.Bytes
	}
	return run, nil
}

// fanOutSection reports the fan-out LISTs: medians, and the median of the
// per-round ratios to the two direct LISTs one after the other.
func (r *report) fanOutSection(p func(string, ...any)) {
	var a, b, f, ratio, ratioMax []float64
	for _, rd := range r.Rounds {
		for _, run := range rd.FanOut {
			a, b, f = append(a, run.DirectA.Seconds()), append(b, run.DirectB.Seconds()), append(f, run.FanOut.Seconds())
			ratio = append(ratio, run.FanOut.Seconds()/(run.DirectA+run.DirectB).Seconds())
			ratioMax = append(ratioMax, run.FanOut.Seconds()/max(run.DirectA, run.DirectB).Seconds())
		}
	}
	if len(f) == 0 {
		return
	}
	p("\n## Fan-out LIST over two members\n\n")
	p("The same %d ConfigMaps on member-a and on member-b; each round LISTs member-a directly, member-b directly, then both through the hub and the gateway's fan-out path (`upstreamclusters/*/proxy`, one merged list, gzip). The ratios are the fan-out LIST's time over the two direct LISTs one after the other, and over the slower of the two (the members are asked in parallel), medians of the per-LIST ratios.\n\n", r.Opts.ListObjects)
	p("| direct member-a | direct member-b | fan-out (both) | fan-out ÷ (a + b) | fan-out ÷ max(a, b) |\n|---:|---:|---:|---:|---:|\n")
	p("| %s | %s | %s | %s | %s |\n", measure.Sec(measure.Median(a)), measure.Sec(measure.Median(b)), measure.Sec(measure.Median(f)),
		measure.X(measure.Median(ratio)), measure.X(measure.Median(ratioMax)))
	p("\n")
}
