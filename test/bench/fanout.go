package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// The fan-out LISTs go over member-a and member-b, in two cases: member-b's
// LIST objects (listPath) alone, member-a holding nothing there; and both
// members holding the same objects, member-a's copy in a namespace of its
// own, listed across namespaces by their label (bothPath).
const (
	memberA   = harness.MemberA
	copyNS    = listNS + "-a"
	listLabel = "app=kube-gateway-bench"
)

var bothPath = "/api/v1/configmaps?labelSelector=" + listLabel

// fanOutRun is one round's fan-out LISTs through the hub, each next to the
// LISTs it is compared with, back to back.
type fanOutRun struct {
	// One: member-b holds the objects, member-a nothing: member-b directly,
	// member-b through the hub (the hub path to that member alone), then the
	// fan-out over both; OneFirstByte is the fan-out's first byte.
	OneDirect, OneHub, OneFanOut, OneFirstByte time.Duration
	// Both members hold the objects: each directly, then the fan-out.
	DirectA, DirectB, FanOut time.Duration
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

// strict: a member left out would make the fan-out look faster.
const strict = "gateway.kubewharf.io/strict=true"

// measureFanOut LISTs (gzip, as Go clients ask) the one-member case, then the
// two-member case.
func measureFanOut(ctx context.Context, directA, directB, hubB, fan *measure.Target) (fanOutRun, error) {
	var run fanOutRun
	for _, x := range []struct {
		t         *measure.Target
		path      string
		out       *time.Duration
		firstByte *time.Duration
	}{
		{directB, listPath, &run.OneDirect, nil},
		{hubB, listPath, &run.OneHub, nil},
		{fan, listPath + "?" + strict, &run.OneFanOut, &run.OneFirstByte},
		{directA, bothPath, &run.DirectA, nil},
		{directB, bothPath, &run.DirectB, nil},
		{fan, bothPath + "&" + strict, &run.FanOut, nil},
	} {
		t0 := time.Now()
		res, err := x.t.DoEnc(ctx, x.path, false, x.firstByte != nil)
		*x.out = time.Since(t0)
		if err != nil {
			return run, fmt.Errorf("fan-out LIST, %s %s: %w", x.t.Label, x.path, err)
		}
		if x.firstByte != nil {
			*x.firstByte = res.FirstByte
		}
	}
	return run, nil
}

// fanOutProfile is the gateway's CPU profile during one-member fan-out LISTs.
type fanOutProfile struct {
	File            string
	Lists           int
	Elapsed         time.Duration
	TopCum, TopFlat string
	Total           float64 // seconds of samples
}

// profileFanOut LISTs member-b's objects through the fan-out path, back to
// back, for ProfileSeconds+3 s, with a CPU profile of the gateway meanwhile:
// where the gateway's time over the hub path goes.
func profileFanOut(ctx context.Context, env *harness.Env, gw, fan *measure.Target, o options, rep *report) error {
	logf("profiling the gateway for %ds under one-member fan-out LISTs", o.ProfileSeconds)
	done := make(chan fetched, 1)
	go fetchPprof(ctx, gw.Client, gw.Header, env.GatewayURL+"/debug/pprof/profile", o.ProfileSeconds, done)
	pf := &fanOutProfile{File: filepath.Join(o.OutDir, "kube-gateway-cpu-fanout.pprof")}
	start := time.Now()
	for time.Since(start) < time.Duration(o.ProfileSeconds+3)*time.Second {
		if _, err := fan.DoEnc(ctx, listPath+"?"+strict, false, false); err != nil {
			<-done
			return fmt.Errorf("fan-out LIST: %w", err)
		}
		pf.Lists++
	}
	pf.Elapsed = time.Since(start)
	p := <-done
	if p.err != nil {
		return p.err
	}
	if err := os.WriteFile(pf.File, p.data, 0o644); err != nil {
		return err
	}
	bin, _ := harness.GatewayBinary(env.BinDir)
	pf.TopCum, pf.TopFlat, _, pf.Total = analyzeProfile(ctx, bin, pf.File)
	rep.FanOutProfile = pf
	return nil
}

// fanOutSection reports the fan-out LISTs: medians, and medians of the
// per-LIST ratios to the LISTs measured next to them.
func (r *report) fanOutSection(p func(string, ...any)) {
	var oneDirect, oneHub, oneFan, oneFirst, oneXHub, oneXDirect, hubXDirect []float64
	var a, b, f, ratio, ratioMax []float64
	for _, rd := range r.Rounds {
		for _, run := range rd.FanOut {
			oneDirect, oneHub, oneFan = append(oneDirect, run.OneDirect.Seconds()), append(oneHub, run.OneHub.Seconds()), append(oneFan, run.OneFanOut.Seconds())
			oneFirst = append(oneFirst, run.OneFirstByte.Seconds())
			oneXHub = append(oneXHub, run.OneFanOut.Seconds()/run.OneHub.Seconds())
			oneXDirect = append(oneXDirect, run.OneFanOut.Seconds()/run.OneDirect.Seconds())
			hubXDirect = append(hubXDirect, run.OneHub.Seconds()/run.OneDirect.Seconds())
			a, b, f = append(a, run.DirectA.Seconds()), append(b, run.DirectB.Seconds()), append(f, run.FanOut.Seconds())
			ratio = append(ratio, run.FanOut.Seconds()/(run.DirectA+run.DirectB).Seconds())
			ratioMax = append(ratioMax, run.FanOut.Seconds()/max(run.DirectA, run.DirectB).Seconds())
		}
	}
	if len(f) == 0 {
		return
	}
	p("\n## Fan-out LIST over two members\n\n")
	p("**One member holding the objects.** The %d ConfigMaps of member-b, member-a holding none there; each LIST in a round lists member-b directly, member-b through the hub and the gateway (the hub path to that member alone), then both members through the hub and the gateway's fan-out path (`upstreamclusters/*/proxy`, one merged list, gzip, strict). The ratios are medians of the per-LIST ratios.\n\n", r.Opts.ListObjects)
	p("| direct member-b | hub path to member-b | fan-out | fan-out first byte | fan-out ÷ hub path | fan-out ÷ direct | hub path ÷ direct |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	p("| %s | %s | %s | %s | %s | %s | %s |\n", measure.Sec(measure.Median(oneDirect)), measure.Sec(measure.Median(oneHub)), measure.Sec(measure.Median(oneFan)),
		measure.Sec(measure.Median(oneFirst)), measure.X(measure.Median(oneXHub)), measure.X(measure.Median(oneXDirect)), measure.X(measure.Median(hubXDirect)))
	p("\n**Both members holding the objects.** The same %d ConfigMaps on member-a too (namespace %s), listed across namespaces by their label `%s`: member-a directly, member-b directly, then both through the fan-out path. The ratios are the fan-out LIST's time over the two direct LISTs one after the other, and over the slower of the two (the members are asked in parallel), medians of the per-LIST ratios.\n\n", r.Opts.ListObjects, copyNS, listLabel)
	p("| direct member-a | direct member-b | fan-out (both) | fan-out ÷ (a + b) | fan-out ÷ max(a, b) |\n|---:|---:|---:|---:|---:|\n")
	p("| %s | %s | %s | %s | %s |\n", measure.Sec(measure.Median(a)), measure.Sec(measure.Median(b)), measure.Sec(measure.Median(f)),
		measure.X(measure.Median(ratio)), measure.X(measure.Median(ratioMax)))
	if pf := r.FanOutProfile; pf != nil {
		p("\n**Where the gateway's time goes.** %d one-member fan-out LISTs back to back in %s (%s each, not part of the medians above), with `GET /debug/pprof/profile?seconds=%d` on the gateway during them: %.2f s of samples, `%s`.\n\n",
			pf.Lists, pf.Elapsed.Round(100*time.Millisecond), measure.Dur(pf.Elapsed/time.Duration(max(pf.Lists, 1))), r.Opts.ProfileSeconds, pf.Total, pf.File)
		p("Top 15 by cumulative time (`go tool pprof -top -cum`):\n\n```\n%s```\n\n", measure.TrimPprof(pf.TopCum))
		p("Top 15 by own time (`go tool pprof -top`):\n\n```\n%s```\n\n", measure.TrimPprof(pf.TopFlat))
	}
	p("\n")
}
