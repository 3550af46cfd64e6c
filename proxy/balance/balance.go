// Package balance picks the server of a member cluster that serves a request.
// Each strategy is a small type behind Picker, so a new one never touches the
// request path.
package balance

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync/atomic"
	"time"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/transport"
)

// Endpoint is one server of a member cluster: what the gateway knows about
// it, in one place, for the balancer, health checking, the forwarder and
// status. It lives as long as its connection settings: a cluster recompiled
// with the same ones keeps it, and with it its connections and health.
type Endpoint struct {
	URL *url.URL
	// Transports carry the requests to the server with the gateway's
	// credential; set before the endpoint is shared, never changed.
	Transports *transport.Transports
	// inFlight counts the requests being served by this endpoint.
	inFlight atomic.Int64
	// lastDone is when the last request served by this endpoint ended, in
	// nanoseconds since epoch; 0 before the first.
	lastDone atomic.Int64
	// unhealthy is set by health checking; endpoints start healthy so that a new
	// cluster serves at once, and the first failed probes take them out.
	unhealthy atomic.Bool
	// last is the latest change of health delivered to status; nil before
	// the first.
	last atomic.Pointer[ServerHealth]
}

// ServerHealth is what the gateway knows about the health of one server of
// spec.servers. Health checking hands one over at every change of an
// endpoint's health; the compiled cluster reports one per server; the status
// writer writes them to status.servers.
type ServerHealth struct {
	// Endpoint is the server's URL as in spec.servers (e.URL.String()).
	Endpoint string
	// Healthy says whether the server takes requests.
	Healthy bool
	// Unknown says that the server's health was not judged yet (see
	// health.ReasonNotChecked); Healthy then says whether it takes requests
	// (it does, unless a change is on its way). Transitions are never Unknown.
	Unknown bool
	// Reason is one of the health.Reason* constants: what the last
	// observation was.
	Reason string
	// Message is a short human-readable detail, e.g.
	// "GET /readyz: 500 Internal Server Error" or a dial error. It is made of
	// status lines and errors only, never of headers, so never of a credential.
	Message string
	// Since is when Healthy last changed, by the checker's clock; zero when no
	// change was seen yet.
	Since time.Time
}

// RecordTransition keeps t, a change of e's health that was delivered, as
// e's latest.
func (e *Endpoint) RecordTransition(t ServerHealth) { e.last.Store(&t) }

// LastTransition is e's latest change of health recorded, if any.
func (e *Endpoint) LastTransition() (ServerHealth, bool) {
	if t := e.last.Load(); t != nil {
		return *t, true
	}
	return ServerHealth{}, false
}

// NewEndpoint returns an endpoint for u, healthy.
func NewEndpoint(u *url.URL) *Endpoint { return &Endpoint{URL: u} }

// Healthy reports whether e may take requests.
func (e *Endpoint) Healthy() bool { return !e.unhealthy.Load() }

// SetHealthy records e's health and reports whether it changed.
func (e *Endpoint) SetHealthy(healthy bool) (changed bool) {
	return e.unhealthy.Swap(!healthy) == healthy
}

// Start records a request starting on e; the returned func records its end.
func (e *Endpoint) Start() (done func()) {
	e.inFlight.Add(1)
	return func() {
		e.lastDone.Store(int64(time.Since(epoch)))
		e.inFlight.Add(-1)
	}
}

// epoch is the origin of lastDone: times since it are read on the monotonic
// clock, which a change of the wall clock does not move.
var epoch = time.Now()

// InFlight is the number of requests being served by e.
func (e *Endpoint) InFlight() int64 { return e.inFlight.Load() }

// BusyWithin reports whether e is serving a request or served one within
// the last d.
func (e *Endpoint) BusyWithin(d time.Duration) bool {
	if e.inFlight.Load() > 0 {
		return true
	}
	last := e.lastDone.Load()
	return last != 0 && int64(time.Since(epoch))-last < int64(d)
}

// Picker chooses one of candidates (never empty) for a request.
type Picker interface {
	Pick(candidates []*Endpoint) *Endpoint
}

// New returns a picker of strategy s. Every policy gets its own picker, so that
// round robin cycles within the policy's subset.
func New(s gatewayv1alpha1.Strategy) (Picker, error) {
	switch s {
	case gatewayv1alpha1.RoundRobin, "":
		return &roundRobin{}, nil
	case gatewayv1alpha1.Random:
		return random{}, nil
	case gatewayv1alpha1.LeastRequest:
		return leastRequest{}, nil
	}
	return nil, fmt.Errorf("unknown strategy %q", s)
}

type roundRobin struct{ next atomic.Uint64 }

func (r *roundRobin) Pick(c []*Endpoint) *Endpoint {
	return c[(r.next.Add(1)-1)%uint64(len(c))]
}

type random struct{}

func (random) Pick(c []*Endpoint) *Endpoint { return c[rand.IntN(len(c))] }

// leastRequest is the power of two choices: of two random candidates, the one
// with fewer requests in flight. Nearly as good as scanning all, and without the
// herd effect of everyone picking the same least loaded endpoint.
type leastRequest struct{}

func (leastRequest) Pick(c []*Endpoint) *Endpoint {
	if len(c) == 1 {
		return c[0]
	}
	i := rand.IntN(len(c))
	j := rand.IntN(len(c) - 1)
	if j >= i {
		j++
	}
	if c[j].InFlight() < c[i].InFlight() {
		return c[j]
	}
	return c[i]
}
