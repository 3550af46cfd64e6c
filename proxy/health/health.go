// Package health decides which servers of a member cluster take requests.
//
// A Checker probes every endpoint of one compiled cluster off the request path
// (active checking: GET spec.healthCheck.path with the gateway's own credential)
// and takes reports from the data plane about real requests (passive checking:
// connection and transport failures). An endpoint goes out of rotation after
// UnhealthyThreshold consecutive failures, probes and passive failures alike, or
// UnhealthyThreshold consecutive failed probes, or at once when a connection
// is refused, and comes back after HealthyThreshold consecutive successful
// probes. A real request that succeeds breaks a streak of failures, not one of
// failed probes: a server that answers requests while its health check fails
// (an apiserver whose etcd stalls serves /version and its caches, and its
// /readyz fails) still goes out. A new endpoint
// takes requests at once, but its health is unknown until its first probe
// answers or a failure streak takes it out: the first answer is a change too.
// Every change is recorded on the endpoint (balance.Endpoint.SetHealthy), where
// the balancer reads it, and handed to a callback, which writes status.
//
// Passive results count: a probe that falls due is skipped when the server
// answered a real request that needed its storage since the last one fell
// due (ReportSuccess with ready), is healthy and its
// streaks are clean; a server that is out, or whose last probe failed, is
// always probed, and one with traffic still every few intervals (its
// readiness can fail while it answers).
//
// Replicas can share health checks (Scheduler.Share): only the replica that
// owns a cluster probes it and publishes its verdicts; the others follow them
// (Follow), and still take a server out at once on their own evidence, and
// probe such a server themselves until it is back.
//
// One Scheduler paces the probes of every checker of the gateway, so that an
// idle cluster holds no goroutine: a probe, and the delivery of transitions,
// run on a goroutine of their own only while they are under way.
package health

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/balance"
	"github.com/kubewharf/kube-gateway/proxy/failure"
	"github.com/kubewharf/kube-gateway/proxy/transport"
)

// Reasons of transitions, CamelCase as in status.servers[].reason.
const (
	// ReasonNotChecked: no probe has answered yet and no failure streak has
	// taken the server out; it takes requests meanwhile.
	ReasonNotChecked = "NotChecked"
	// ReasonProbeSucceeded: enough consecutive probes answered 200 (the first
	// one, for a server whose health was not known yet).
	ReasonProbeSucceeded = "ProbeSucceeded"
	// ReasonProbeFailed: the last failure was a probe that got another status or
	// could not be sent (connection refused, TLS error, ...).
	ReasonProbeFailed = "ProbeFailed"
	// ReasonProbeTimedOut: the last failure was a probe without an answer within
	// the timeout.
	ReasonProbeTimedOut = "ProbeTimedOut"
	// ReasonConnectionFailed: the last failure was a real request that failed to
	// connect or whose connection broke (passive report).
	ReasonConnectionFailed = "ConnectionFailed"
	// ReasonProxyFailed: the last failure, a probe's or a real request's, was
	// at the egress proxy (spec.clientConfig.proxyURL): it could not be
	// reached, refused the gateway's proxy credentials, or did not open the
	// tunnel. The message names the proxy.
	ReasonProxyFailed = "ProxyFailed"
	// ReasonTunnelFailed: the last failure, a probe's or a real request's, was
	// on the konnectivity path (spec.clientConfig.konnectivity): the
	// konnectivity server could not be reached, had no agent for the server's
	// host, or the agent could not dial it. The message names the konnectivity
	// server.
	ReasonTunnelFailed = "TunnelFailed"
	// ReasonResponseTimedOut: the last failure was a real request whose server
	// sent no response headers in time (an error that is ErrResponseTimedOut):
	// the server is connected but slow or stuck.
	ReasonResponseTimedOut = "ResponseTimedOut"
)

// ErrResponseTimedOut is what the error of a real request whose server sent no
// response headers in time is (errors.Is), for ReportFailure: a timeout
// (failure.ErrTimedOut).
var ErrResponseTimedOut = failure.ErrTimedOut

// Config is a compiled spec.healthCheck.
type Config struct {
	// Path probed on every endpoint, absolute, e.g. /readyz.
	Path string
	// Interval between the starts of two probes of one endpoint; Timeout bounds
	// one probe.
	Interval, Timeout time.Duration
	// HealthyThreshold is the number of consecutive successful probes that make
	// an unhealthy endpoint healthy.
	HealthyThreshold int
	// UnhealthyThreshold is the number of consecutive failures (probes or passive
	// reports), or of consecutive failed probes, that make a healthy endpoint
	// unhealthy.
	UnhealthyThreshold int
	// Key names the checker's cluster to the scheduler's owner function when
	// replicas share health checks (Scheduler.Share).
	Key string
	// Spread starts the periodic probes of each endpoint at a random point of
	// the first Interval (after one probe at once), so that the servers of many
	// clusters registered together are not probed in lock-step.
	Spread bool
}

// ConfigFrom compiles hc. The API fills every field of spec.healthCheck
// (defaulting), so this is a conversion; NewChecker still guards against zero
// values (see normalized).
func ConfigFrom(hc *gatewayv1alpha1.HealthCheck) Config {
	c := Config{Spread: true}
	if hc == nil {
		return c
	}
	c.Path = hc.Path
	c.Interval = time.Duration(hc.IntervalSeconds) * time.Second
	c.Timeout = time.Duration(hc.TimeoutSeconds) * time.Second
	c.HealthyThreshold = int(hc.HealthyThreshold)
	c.UnhealthyThreshold = int(hc.UnhealthyThreshold)
	return c
}

// normalized returns c with values a Checker can run with: a field left empty
// (a Config built by hand, an object written past the API) takes the API's
// default, a path starts with "/".
func (c Config) normalized() Config {
	if c.Path == "" {
		c.Path = gatewayv1alpha1.DefaultHealthCheckPath
	} else if !strings.HasPrefix(c.Path, "/") {
		c.Path = "/" + c.Path
	}
	if c.Interval <= 0 {
		c.Interval = gatewayv1alpha1.DefaultHealthCheckIntervalSeconds * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = min(gatewayv1alpha1.DefaultHealthCheckTimeoutSeconds*time.Second, c.Interval)
	}
	if c.HealthyThreshold <= 0 {
		c.HealthyThreshold = gatewayv1alpha1.DefaultHealthCheckHealthyThreshold
	}
	if c.UnhealthyThreshold <= 0 {
		c.UnhealthyThreshold = gatewayv1alpha1.DefaultHealthCheckUnhealthyThreshold
	}
	return c
}

// ServerHealth is what the gateway knows about the health of one server; it
// is kept on the server's endpoint (balance.Endpoint.LastTransition).
type ServerHealth = balance.ServerHealth

// Checker probes the endpoints of one compiled cluster and takes passive
// reports from the data plane.
//
// Callbacks: onTransition is called one call at a time, in the order in which
// the changes happened, with no lock of the checker held, on a goroutine that
// runs only while transitions are queued. A slow callback delays later
// callbacks, never probes or requests. Transitions still queued when the
// checker stops are dropped.
type Checker struct {
	cfg Config
	clk clock.WithDelayedExecution
	// probeOK and probeFailed are what a probe's messages start with.
	probeOK, probeFailed string
	onTransition         func(ServerHealth)

	endpoints []*endpointState
	byPtr     map[*balance.Endpoint]*endpointState // read only after NewChecker

	started atomic.Bool
	stopped atomic.Bool // set when Start's context ends: reports are ignored from then on

	mu sync.Mutex
	// ctx and sched are Start's, set under mu before any goroutine of the
	// checker starts.
	ctx   context.Context
	sched *Scheduler
	// busy counts the probe and delivery goroutines running; ended is set
	// when ctx ends; done is closed once both are so.
	busy  int
	ended bool
	done  chan struct{}
	// queue holds the transitions to deliver; draining is set while a
	// goroutine delivers them.
	queue    []ServerHealth
	draining bool

	// probed, when set (by tests, before Start), is called by the probe goroutine
	// after the result of every probe has been recorded.
	probed func(e *balance.Endpoint, ok bool)
	// scheduled, when set (by tests, before Start), is called with the time
	// the next probe of e is due, after each probe or skipped probe.
	scheduled func(e *balance.Endpoint, at time.Time)
	// skipped, when set (by tests, before Start), is called when a probe of
	// e that fell due is skipped, with the reason.
	skipped func(e *balance.Endpoint, reason string)
}

// endpointState holds the streaks of one endpoint.
type endpointState struct {
	e     *balance.Endpoint
	name  string // e.URL.String()
	probe http.RoundTripper
	// request is the probe, built once: each probe sends a shallow copy
	// with its own context (Request.WithContext).
	request *http.Request

	mu       sync.Mutex
	failures atomic.Int64 // written under mu; read without it by ReportSuccess
	// probeFailures and successes count consecutive failed and successful
	// probes, under mu.
	probeFailures, successes int
	// judged: a transition of this checker said how e is, under mu.
	judged bool
	// outLocally: e is out on this replica's own evidence (a failure), not
	// by a followed verdict; published is the last verdict followed (see
	// Follow): 1 healthy, -1 unhealthy, 0 none. Under mu.
	outLocally bool
	published  int8

	// answered: a real request got an answer since the endpoint's last probe
	// fell due (see skipReason).
	answered atomic.Bool

	// next is the endpoint's place in the scheduler; probes counts the
	// probes started and skips the probes skipped in a row. Only one probe
	// of an endpoint is under way or scheduled at a time, and it owns them.
	next   *dueProbe
	probes int
	skips  int
}

// Authorizer is a probe round tripper that puts its credential on a
// request's headers once (transport.Transports.ProbeWhile), so that it need
// not copy every probe to add it.
type Authorizer interface {
	http.RoundTripper
	Authorize(http.Header)
}

// NewChecker returns a checker of endpoints, the servers of one cluster. probe returns what
// carries the probes of an endpoint (its transports' Probe: the gateway's
// credential, no impersonation, the endpoint's pooled connections);
// clk paces them; onTransition (may be nil) is told of every change of health,
// see Checker. Nothing runs before Start.
func NewChecker(endpoints []*balance.Endpoint, probe func(*balance.Endpoint) http.RoundTripper, cfg Config, clk clock.WithDelayedExecution, onTransition func(ServerHealth)) *Checker {
	cfg = cfg.normalized()
	c := &Checker{
		probeOK:      "GET " + cfg.Path + ": 200 OK",
		probeFailed:  "GET " + cfg.Path + ": ",
		cfg:          cfg,
		clk:          clk,
		onTransition: onTransition,
		byPtr:        make(map[*balance.Endpoint]*endpointState, len(endpoints)),
		done:         make(chan struct{}),
	}
	for _, e := range endpoints {
		if e == nil || c.byPtr[e] != nil {
			continue
		}
		u := *e.URL
		u.Path = strings.TrimSuffix(u.Path, "/") + c.cfg.Path
		u.RawPath, u.RawQuery, u.Fragment, u.User = "", "", "", nil
		st := &endpointState{e: e, name: e.URL.String(), probe: probe(e)}
		h := http.Header{"Accept": {"text/plain, */*"}}
		if a, ok := st.probe.(Authorizer); ok {
			a.Authorize(h)
		}
		// The servers of a cluster share a credential: one map of the
		// same headers for all, read only.
		if len(c.endpoints) > 0 && maps.EqualFunc(h, c.endpoints[0].request.Header, slices.Equal) {
			h = c.endpoints[0].request.Header
		}
		st.request = &http.Request{
			Method: http.MethodGet, URL: &u, Host: u.Host,
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h,
		}
		st.next = &dueProbe{c: c, s: st, index: -1, parkedAt: -1}
		c.endpoints = append(c.endpoints, st)
		c.byPtr[e] = st
	}
	return c
}

// Start has sched probe every endpoint every Interval, the first time at
// once, until ctx ends, and delivers transitions. It returns at once; Done
// tells when the checker has stopped. Call it once.
func (c *Checker) Start(ctx context.Context, sched *Scheduler) {
	if !c.started.CompareAndSwap(false, true) {
		panic("health: Checker.Start called twice")
	}
	c.mu.Lock()
	c.ctx, c.sched = ctx, sched
	deliver := c.startDelivery() // reports made before Start
	c.mu.Unlock()
	if deliver {
		go c.deliver()
	}
	now := c.clk.Now()
	for _, s := range c.endpoints {
		sched.add(s.next, now)
	}
	context.AfterFunc(ctx, c.stop)
}

// Done is closed when Start's context has ended and every probe and delivery
// of the checker has returned.
func (c *Checker) Done() <-chan struct{} { return c.done }

// stop ends the checker when Start's context ends: no probe starts from now
// on, reports are ignored, and done closes once the probes and the delivery
// under way return.
func (c *Checker) stop() {
	c.stopped.Store(true)
	c.sched.remove(c.endpoints)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	c.closeIfDone()
}

// closeIfDone closes done once the checker has stopped and nothing of it
// runs. With c.mu held.
func (c *Checker) closeIfDone() {
	if c.ended && c.busy == 0 {
		select {
		case <-c.done:
		default:
			close(c.done)
		}
	}
}

// begin counts a goroutine of the checker about to start; false when the
// checker has stopped.
func (c *Checker) begin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return false
	}
	c.busy++
	return true
}

// end uncounts a goroutine of the checker that returns.
func (c *Checker) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.busy--
	c.closeIfDone()
}

// ReportFailure records that a real request to e failed to connect or lost its
// connection (err says how). Failures of requests canceled by their client
// (context.Canceled) say nothing about e and are ignored, as are endpoints that
// are not this checker's. Safe for concurrent use; it never blocks on I/O.
func (c *Checker) ReportFailure(e *balance.Endpoint, err error) {
	if c.stopped.Load() || errors.Is(err, context.Canceled) {
		return
	}
	s := c.byPtr[e]
	if s == nil {
		return
	}
	msg := "connection failed"
	if err != nil {
		msg = transport.StripURL(err).Error()
	}
	// Nothing listens: the server is down or restarting, and once it listens
	// again it may answer before it is ready (a kube-apiserver denies
	// everything until its authorizer's informers have synced). Out until
	// a probe of its readiness succeeds.
	c.failure(s, passiveReason(failure.Of(err)), msg, false, errors.Is(err, syscall.ECONNREFUSED))
}

// passiveReason is the reason of a real request's failure of kind k.
func passiveReason(k failure.Kind) string {
	switch k {
	case failure.Proxy:
		return ReasonProxyFailed
	case failure.Tunnel:
		return ReasonTunnelFailed
	case failure.Timeout:
		return ReasonResponseTimedOut
	}
	return ReasonConnectionFailed
}

// ReportSuccess records that a real request to e got a response: the failure
// streak starts over, not the streak of failed probes. With ready (the answer
// shows e reaches its storage: a write, a consistent read), a healthy
// endpoint needs no probe this interval (see skipReason); other answers (from
// the member's caches, discovery) come while its storage stalls and its
// readiness fails, so they replace no probe. It does not make an unhealthy
// endpoint healthy; only probes do. Safe for concurrent use and lock-free on
// the usual path.
func (c *Checker) ReportSuccess(e *balance.Endpoint, ready bool) {
	s := c.byPtr[e]
	if s == nil || c.stopped.Load() {
		return
	}
	if s.failures.Load() != 0 {
		s.failures.Store(0)
	}
	if ready && !s.answered.Load() {
		s.answered.Store(true)
	}
}

// Follow takes the verdict another replica published on the server named
// endpoint (status.servers[]: healthy, reason, message, since), when this
// replica does not own the cluster (Scheduler.Share): an unhealthy verdict
// takes the server out here too; a healthy one brings back a server that
// was out by a followed verdict, not one this replica took out on its own
// evidence (its own probe does). The owner ignores it. Safe for concurrent
// use.
func (c *Checker) Follow(endpoint string, healthy bool, reason, message string, since time.Time) {
	if c.stopped.Load() || c.sched == nil || c.sched.owner(c.cfg.Key) {
		return
	}
	var s *endpointState
	for _, st := range c.endpoints {
		if st.name == endpoint {
			s = st
		}
	}
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := ServerHealth{Endpoint: s.name, Healthy: healthy, Reason: reason, Message: message, Since: since}
	switch {
	case !healthy:
		s.published = -1
		s.successes = 0
		if s.e.SetHealthy(false) {
			s.judged, s.outLocally = true, false
			c.enqueue(t)
		}
	case s.outLocally:
		s.published = 1 // this replica's own probe brings it back
		c.needProbe(s)
	default:
		s.published = 1
		if s.e.SetHealthy(true) || !s.judged {
			s.judged = true
			c.enqueue(t)
		}
	}
}

// needProbe tells the scheduler that s may need a probe of this replica's
// although another owns the cluster (see skipReason). With s.mu held.
func (c *Checker) needProbe(s *endpointState) {
	if c.sched != nil {
		c.sched.unpark(s.next)
	}
}

// failure records a failed probe (probe) or real request; refused (nothing
// listened) takes s out whatever the streaks.
func (c *Checker) failure(s *endpointState, reason, msg string, probe, refused bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.successes = 0
	if probe {
		s.probeFailures++
	}
	n := s.failures.Add(1)
	if (refused || n >= int64(c.cfg.UnhealthyThreshold) || s.probeFailures >= c.cfg.UnhealthyThreshold) && s.e.SetHealthy(false) {
		s.judged, s.outLocally = true, true
		c.needProbe(s)
		c.enqueue(ServerHealth{Endpoint: s.name, Healthy: false, Reason: reason, Message: msg, Since: c.clk.Now()})
	}
}

func (c *Checker) probeSuccess(s *endpointState, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures.Store(0)
	s.probeFailures = 0
	s.successes++
	// A server that takes requests but was never judged by this checker (a new
	// one, or one whose connection settings changed) is confirmed by its first
	// answer; one that was taken out needs HealthyThreshold of them.
	confirmed := !s.judged && s.e.Healthy()
	if confirmed || s.successes >= c.cfg.HealthyThreshold && s.e.SetHealthy(true) {
		s.judged, s.outLocally = true, false
		c.enqueue(ServerHealth{Endpoint: s.name, Healthy: true, Reason: ReasonProbeSucceeded, Message: msg, Since: c.clk.Now()})
	}
}

// enqueue queues t for delivery. Called with the endpoint's lock held, so that
// the queue order is the order of the changes.
func (c *Checker) enqueue(t ServerHealth) {
	if c.onTransition == nil {
		return
	}
	c.mu.Lock()
	c.queue = append(c.queue, t)
	deliver := c.startDelivery()
	c.mu.Unlock()
	if deliver {
		go c.deliver()
	}
}

// startDelivery tells whether a goroutine must start to deliver the queue,
// and counts it. With c.mu held.
func (c *Checker) startDelivery() bool {
	if c.draining || c.ended || c.sched == nil || len(c.queue) == 0 {
		return false
	}
	c.draining = true
	c.busy++
	return true
}

// deliver hands the queued transitions to onTransition, one at a time, until
// the queue is empty or the checker stops.
func (c *Checker) deliver() {
	defer c.end()
	for {
		c.mu.Lock()
		batch := c.queue
		c.queue = nil
		if len(batch) == 0 || c.ended || c.ctx.Err() != nil {
			c.draining = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		for _, t := range batch {
			if c.ctx.Err() != nil {
				break
			}
			c.onTransition(t)
		}
	}
}
