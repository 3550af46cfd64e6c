package main

import (
	"context"
	"fmt"
	"time"

	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
)

// getRounds is how many rounds the c=1 GETs are split into: each round
// sends the same GETs directly to member-b and through the gateway alone,
// back to back in alternating order, so the gateway's p50 is judged against
// direct access measured under the same load on a shared machine (its drift
// between runs is larger than the effect of the clusters registered).
const getRounds = 5

// gets is the c=1 GETs of one state of the fleet.
type gets struct {
	Gateway, Direct measure.Run // all rounds together
	// Ratio and Added are each round's gateway p50 over and minus its direct
	// p50.
	Ratio []float64
	Added []time.Duration
}

// pairedGets sends n GETs of getTarget to each of direct and gateway at
// concurrency 1, in getRounds rounds.
func pairedGets(ctx context.Context, s *scene, n int) gets {
	var g gets
	var gw, di []time.Duration
	per := max(n/getRounds, 1)
	for r := 0; r < getRounds; r++ {
		var a, b measure.Run
		if r%2 == 0 {
			b = s.direct.Load(ctx, getTarget, 1, per, 0)
			a = s.gateway.Load(ctx, getTarget, 1, per, 0)
		} else {
			a = s.gateway.Load(ctx, getTarget, 1, per, 0)
			b = s.direct.Load(ctx, getTarget, 1, per, 0)
		}
		merge(&g.Gateway, a, &gw)
		merge(&g.Direct, b, &di)
		if len(a.Latencies) > 0 && len(b.Latencies) > 0 {
			g.Ratio = append(g.Ratio, float64(a.Pct(50))/float64(b.Pct(50)))
			g.Added = append(g.Added, a.Pct(50)-b.Pct(50))
		}
	}
	g.Gateway.Latencies = measure.SortDurations(gw)
	g.Direct.Latencies = measure.SortDurations(di)
	return g
}

func merge(into *measure.Run, r measure.Run, lat *[]time.Duration) {
	into.Requests += r.Requests
	into.Errors += r.Errors
	into.Elapsed += r.Elapsed
	if into.FirstErr == nil {
		into.FirstErr = r.FirstErr
	}
	*lat = append(*lat, r.Latencies...)
}

// ratioSpread is the median of the rounds' ratios with their range.
func (g gets) ratioSpread() string {
	if len(g.Ratio) == 0 {
		return "–"
	}
	lo, hi := measure.MinMax(g.Ratio)
	return fmt.Sprintf("×%.2f (×%.2f–×%.2f)", measure.Median(g.Ratio), lo, hi)
}

// addedSpread is the median of the rounds' added p50 with its range.
func (g gets) addedSpread() string {
	if len(g.Added) == 0 {
		return "–"
	}
	xs := make([]float64, len(g.Added))
	for i, d := range g.Added {
		xs[i] = float64(d)
	}
	lo, hi := measure.MinMax(xs)
	return fmt.Sprintf("%s (%s–%s)", measure.Dur(time.Duration(measure.Median(xs))), measure.Dur(time.Duration(lo)), measure.Dur(time.Duration(hi)))
}

// withinNoise says whether the rounds' proxy ÷ direct ratios with the fleet
// registered (after) overlap those without it (before): the two states
// cannot share rounds, so each one's spread is its noise.
func withinNoise(before, after gets) bool {
	if len(before.Ratio) == 0 || len(after.Ratio) == 0 {
		return false
	}
	blo, bhi := measure.MinMax(before.Ratio)
	alo, ahi := measure.MinMax(after.Ratio)
	return alo <= bhi && ahi >= blo
}
