package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
)

func TestPairedGets(t *testing.T) {
	var mu sync.Mutex
	var order []string // the target of each GET, in the order served
	target := func(name string) *measure.Target {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
		}))
		t.Cleanup(srv.Close)
		return &measure.Target{Key: name, Base: srv.URL, Client: srv.Client()}
	}
	s := &scene{direct: target("direct"), gateway: target("gateway")}
	const n = 3 * getRounds
	g := pairedGets(context.Background(), s, n)

	if g.Gateway.Requests != n || g.Direct.Requests != n || len(g.Gateway.Latencies) != n || len(g.Direct.Latencies) != n {
		t.Fatalf("requests gateway %d (%d latencies), direct %d (%d latencies); want %d each",
			g.Gateway.Requests, len(g.Gateway.Latencies), g.Direct.Requests, len(g.Direct.Latencies), n)
	}
	if len(g.Ratio) != getRounds || len(g.Added) != getRounds {
		t.Fatalf("%d ratios, %d differences; want one per round (%d)", len(g.Ratio), len(g.Added), getRounds)
	}
	// Each round sends its GETs to one target, then to the other, and the
	// next round starts with the one that went second.
	per := n / getRounds
	for r := 0; r < getRounds; r++ {
		first := order[2*r*per]
		second := order[(2*r+1)*per]
		if first == second {
			t.Fatalf("round %d: both halves went to %s (order %v)", r, first, order)
		}
		if r > 0 && first != order[(2*r-1)*per] {
			t.Errorf("round %d starts with %s, the previous round ended with %s: the order does not alternate", r, first, order[(2*r-1)*per])
		}
	}
}

func TestWithinNoise(t *testing.T) {
	g := func(ratios ...float64) gets { return gets{Ratio: ratios} }
	for _, c := range []struct {
		before, after gets
		want          bool
	}{
		{g(1.2, 1.4, 1.3), g(1.35, 1.5), true},  // overlapping rounds
		{g(1.2, 1.4, 1.3), g(1.1, 1.19), false}, // all below
		{g(1.2, 1.4, 1.3), g(1.5, 1.6), false},  // all above
		{g(1.2, 1.4), g(1.4), true},             // touching
		{g(), g(1.3), false},                    // not measured
	} {
		if got := withinNoise(c.before, c.after); got != c.want {
			t.Errorf("withinNoise(%v, %v) = %v, want %v", c.before.Ratio, c.after.Ratio, got, c.want)
		}
	}
}
