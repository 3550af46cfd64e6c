package balance

import (
	"context"
	"net/url"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

func endpoints(n int) []*Endpoint {
	var out []*Endpoint
	for i := 0; i < n; i++ {
		out = append(out, NewEndpoint(&url.URL{Scheme: "https", Host: string(rune('a'+i)) + ".example:443"}))
	}
	return out
}

func TestRoundRobinCyclesInOrder(t *testing.T) {
	p, _ := New(gatewayv1alpha1.RoundRobin)
	eps := endpoints(3)
	for i := 0; i < 9; i++ {
		if got := p.Pick(eps); got != eps[i%3] {
			t.Fatalf("pick %d = %s, want %s", i, got.URL.Host, eps[i%3].URL.Host)
		}
	}
}

func TestRandomPicksEveryCandidate(t *testing.T) {
	p, _ := New(gatewayv1alpha1.Random)
	eps := endpoints(4)
	seen := map[*Endpoint]int{}
	for i := 0; i < 4000; i++ {
		seen[p.Pick(eps)]++
	}
	for _, e := range eps {
		// Uniform: 1000 expected each; 700 is > 9 standard deviations away.
		if seen[e] < 700 {
			t.Fatalf("%s picked %d times of 4000", e.URL.Host, seen[e])
		}
	}
}

func TestLeastRequestAvoidsTheBusyEndpoint(t *testing.T) {
	p, _ := New(gatewayv1alpha1.LeastRequest)
	eps := endpoints(2)
	done := eps[0].Start()
	for i := 0; i < 100; i++ {
		if got := p.Pick(eps); got != eps[1] {
			t.Fatalf("picked the endpoint with a request in flight")
		}
	}
	done()
	if eps[0].InFlight() != 0 {
		t.Fatalf("in flight after done: %d", eps[0].InFlight())
	}
	one := endpoints(1)
	if p.Pick(one) != one[0] {
		t.Fatal("single candidate not picked")
	}
}

func TestUnknownStrategy(t *testing.T) {
	if _, err := New("Fastest"); err == nil {
		t.Fatal("unknown strategy accepted")
	}
}

// An endpoint is busy while it serves a request and for the given time after
// the last one ended; one that never served any is not.
func TestBusyWithin(t *testing.T) {
	e := NewEndpoint(&url.URL{Scheme: "https", Host: "a"})
	if e.BusyWithin(time.Hour) {
		t.Fatal("busy before any request")
	}
	done := e.Start()
	if !e.BusyWithin(0) {
		t.Fatal("not busy while serving a request")
	}
	done()
	if !e.BusyWithin(time.Hour) {
		t.Fatal("not busy within an hour of a request that just ended")
	}
	const d = 20 * time.Millisecond
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return !e.BusyWithin(d), nil
	}); err != nil {
		t.Fatalf("still busy within %v of a request that ended long ago", d)
	}
}
