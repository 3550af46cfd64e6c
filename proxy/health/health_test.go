package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/balance"
	"github.com/kubewharf/kube-gateway/proxy/konnectivity"
	"github.com/kubewharf/kube-gateway/proxy/transport"
)

const (
	testToken   = "s3cr3t-gateway-token"
	testTimeout = 10 * time.Second // deadline of every wait for an event
)

// member is a member apiserver whose /readyz answer the test controls.
type member struct {
	t   *testing.T
	srv *httptest.Server
	ep  *balance.Endpoint

	mu      sync.Mutex
	status  int           // answer of /readyz; 0: block until release is closed
	release chan struct{} // closed to let blocked requests finish
	hits    chan struct{} // one value per /readyz request received
}

func newMember(t *testing.T) *member {
	t.Helper()
	m := &member{t: t, status: http.StatusOK, release: make(chan struct{}), hits: make(chan struct{}, 100)}
	m.srv = httptest.NewTLSServer(http.HandlerFunc(m.serve))
	t.Cleanup(func() {
		m.unblock()
		m.srv.Close()
	})
	u, err := url.Parse(m.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	m.ep = balance.NewEndpoint(u)
	return m
}

func (m *member) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/readyz" {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	m.mu.Lock()
	status, release := m.status, m.release
	m.mu.Unlock()
	select {
	case m.hits <- struct{}{}:
	default:
		m.t.Errorf("hits of %s overflowed", m.srv.URL)
	}
	if status == 0 {
		select {
		case <-release:
			return
		case <-r.Context().Done():
			// Never an answer to a probe the client gave up on: returning
			// would send 200 OK, which a racing client read could take as a
			// success.
			panic(http.ErrAbortHandler)
		}
	}
	w.WriteHeader(status)
	if status == http.StatusOK {
		_, _ = w.Write([]byte("ok"))
	} else {
		_, _ = w.Write([]byte("[-]etcd failed: reason withheld\nreadyz check failed"))
	}
}

func (m *member) set(status int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status = status
}

func (m *member) unblock() {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.release:
	default:
		close(m.release)
	}
}

func (m *member) waitHit() {
	m.t.Helper()
	select {
	case <-m.hits:
	case <-time.After(testTimeout):
		m.t.Fatalf("no probe reached %s", m.srv.URL)
	}
}

// bearer adds the gateway's credential, as transport.Transports.Probe does.
type bearer struct{ rt http.RoundTripper }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+testToken)
	return b.rt.RoundTrip(r)
}

type probeEvent struct {
	endpoint string
	ok       bool
}

// harness runs a Checker over members on a fake clock.
type harness struct {
	t       *testing.T
	clk     *clocktesting.FakeClock
	cfg     Config
	c       *Checker
	members []*member
	tr      *http.Transport
	probes  chan probeEvent
	trans   chan ServerHealth
	sched   *Scheduler
	owns    func(key string) bool // set before run: shared health checks
	cancel  context.CancelFunc
	done    <-chan struct{}
}

var testConfig = Config{Path: "/readyz", Interval: 5 * time.Second, Timeout: 2 * time.Second, HealthyThreshold: 1, UnhealthyThreshold: 2}

func newHarness(t *testing.T, cfg Config, members ...*member) *harness {
	t.Helper()
	h := &harness{
		t:       t,
		clk:     clocktesting.NewFakeClock(time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)),
		cfg:     cfg,
		members: members,
		probes:  make(chan probeEvent, 100),
		trans:   make(chan ServerHealth, 100),
	}
	// One client transport trusting every member's certificate (all httptest
	// servers share the same one).
	h.tr = members[0].srv.Client().Transport.(*http.Transport).Clone()
	var eps []*balance.Endpoint
	for _, m := range members {
		eps = append(eps, m.ep)
	}
	h.c = NewChecker(eps, func(*balance.Endpoint) http.RoundTripper { return bearer{h.tr} }, cfg, h.clk, func(tr ServerHealth) { h.trans <- tr })
	h.c.probed = func(e *balance.Endpoint, ok bool) { h.probes <- probeEvent{e.URL.String(), ok} }
	return h
}

// start runs the checker, waits for the first round of probes and takes the
// transitions of the servers that answered (their health was unknown before).
func (h *harness) start() {
	h.t.Helper()
	h.run()
	h.expectConfirmed(h.awaitProbes(len(h.members)))
}

// run runs the checker, on a scheduler of its own, until the test ends.
func (h *harness) run() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.sched, h.done = runChecker(ctx, h.c, h.clk, h.owns)
	h.t.Cleanup(h.stop)
}

// runChecker starts c on a new scheduler of clk until ctx ends; the channel
// is closed when both have stopped.
func runChecker(ctx context.Context, c *Checker, clk clock.Clock, owns func(string) bool) (*Scheduler, <-chan struct{}) {
	sched := NewScheduler(clk)
	if owns != nil {
		sched.Share(owns)
	}
	done := make(chan struct{})
	scheduling := make(chan struct{})
	go func() { sched.Run(ctx); close(scheduling) }()
	c.Start(ctx, sched)
	go func() {
		<-scheduling
		<-c.Done()
		close(done)
	}()
	return sched, done
}

// expectConfirmed takes one ProbeSucceeded transition, in any order, for each
// endpoint of results whose probe succeeded.
func (h *harness) expectConfirmed(results map[string]bool) {
	h.t.Helper()
	want := map[string]bool{}
	for endpoint, ok := range results {
		if ok {
			want[endpoint] = true
		}
	}
	for len(want) > 0 {
		select {
		case tr := <-h.trans:
			if !want[tr.Endpoint] || !tr.Healthy || tr.Reason != ReasonProbeSucceeded || tr.Message != "GET /readyz: 200 OK" {
				h.t.Fatalf("transition %+v, want the first answer of one of %v", tr, want)
			}
			delete(want, tr.Endpoint)
		case <-time.After(testTimeout):
			h.t.Fatalf("no first-answer transition of %v", want)
		}
	}
}

// stop cancels the checker and its scheduler and waits for them to stop.
func (h *harness) stop() {
	h.t.Helper()
	h.cancel()
	select {
	case <-h.done:
	case <-time.After(testTimeout):
		h.t.Fatal("the checker did not stop after cancel")
	}
	h.tr.CloseIdleConnections()
}

// awaitProbes waits for n recorded probe results and returns them by endpoint.
func (h *harness) awaitProbes(n int) map[string]bool {
	h.t.Helper()
	got := map[string]bool{}
	for range n {
		select {
		case p := <-h.probes:
			if _, dup := got[p.endpoint]; dup {
				h.t.Fatalf("two probes of %s in one round", p.endpoint)
			}
			got[p.endpoint] = p.ok
		case <-time.After(testTimeout):
			h.t.Fatalf("got %d of %d probes", len(got), n)
		}
	}
	return got
}

// round advances the clock by one interval and waits for every endpoint's probe.
func (h *harness) round() map[string]bool {
	h.t.Helper()
	h.clk.Step(h.cfg.Interval)
	return h.awaitProbes(len(h.members))
}

// expect waits for the next transition and checks it.
func (h *harness) expect(m *member, healthy bool, reason string) ServerHealth {
	h.t.Helper()
	select {
	case tr := <-h.trans:
		if tr.Endpoint != m.srv.URL || tr.Healthy != healthy || tr.Reason != reason {
			h.t.Fatalf("transition %+v, want endpoint %s healthy=%v reason %s", tr, m.srv.URL, healthy, reason)
		}
		if !tr.Since.Equal(h.clk.Now()) {
			h.t.Errorf("transition time %v, want %v", tr.Since, h.clk.Now())
		}
		if strings.Contains(tr.Message, testToken) || strings.Contains(tr.Message, "Bearer") {
			h.t.Errorf("message leaks the credential: %q", tr.Message)
		}
		if m.ep.Healthy() != healthy {
			h.t.Errorf("endpoint healthy=%v after transition to %v", m.ep.Healthy(), healthy)
		}
		return tr
	case <-time.After(testTimeout):
		h.t.Fatalf("no transition of %s to healthy=%v", m.srv.URL, healthy)
		return ServerHealth{}
	}
}

// expectNone checks that no transition is pending: transitions are delivered in
// order, so a marker queued now must be the next one delivered.
func (h *harness) expectNone() {
	h.t.Helper()
	marker := ServerHealth{Endpoint: "marker", Reason: fmt.Sprint(time.Now().UnixNano())}
	h.c.enqueue(marker)
	select {
	case tr := <-h.trans:
		if tr != marker {
			h.t.Fatalf("unexpected transition %+v", tr)
		}
	case <-time.After(testTimeout):
		h.t.Fatal("marker transition not delivered")
	}
}

func TestConfigFrom(t *testing.T) {
	def := Config{Path: "/readyz", Interval: 5 * time.Second, Timeout: 2 * time.Second, HealthyThreshold: 1, UnhealthyThreshold: 2, Spread: true}
	for _, tc := range []struct {
		name string
		in   *gatewayv1alpha1.HealthCheck
		want Config
	}{
		{"nil", nil, def},
		{"empty", &gatewayv1alpha1.HealthCheck{}, def},
		{"set", &gatewayv1alpha1.HealthCheck{Path: "/livez", IntervalSeconds: 10, TimeoutSeconds: 3, UnhealthyThreshold: 4, HealthyThreshold: 2},
			Config{Path: "/livez", Interval: 10 * time.Second, Timeout: 3 * time.Second, HealthyThreshold: 2, UnhealthyThreshold: 4, Spread: true}},
		{"partial", &gatewayv1alpha1.HealthCheck{IntervalSeconds: 30},
			Config{Path: "/readyz", Interval: 30 * time.Second, Timeout: 2 * time.Second, HealthyThreshold: 1, UnhealthyThreshold: 2, Spread: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// What a Checker runs with: a field the API left empty (an object
			// written past it) gets the API's default.
			if got := ConfigFrom(tc.in).normalized(); got != tc.want {
				t.Errorf("ConfigFrom = %+v, want %+v", got, tc.want)
			}
		})
	}
	// The defaults are the API's.
	uc := &gatewayv1alpha1.UpstreamCluster{}
	gatewayv1alpha1.SetObjectDefaults_UpstreamCluster(uc)
	if got := ConfigFrom(uc.Spec.HealthCheck); got != def {
		t.Errorf("ConfigFrom(defaulted) = %+v, want %+v", got, def)
	}
}

func TestThresholds(t *testing.T) {
	a, b := newMember(t), newMember(t)
	cfg := testConfig
	cfg.UnhealthyThreshold, cfg.HealthyThreshold = 2, 2
	h := newHarness(t, cfg, a, b)
	h.start()
	h.expectNone()
	if !a.ep.Healthy() || !b.ep.Healthy() {
		t.Fatal("endpoints not healthy after successful probes")
	}

	// a answers 500: one failure is not enough, the second takes it out.
	a.set(http.StatusInternalServerError)
	if got := h.round(); got[a.srv.URL] || !got[b.srv.URL] {
		t.Fatalf("round results %v", got)
	}
	h.expectNone()
	if !a.ep.Healthy() {
		t.Fatal("a unhealthy after 1 of 2 failures")
	}
	h.round()
	tr := h.expect(a, false, ReasonProbeFailed)
	if tr.Message != "GET /readyz: 500 Internal Server Error" {
		t.Errorf("message %q", tr.Message)
	}
	// More failures: no more transitions.
	h.round()
	h.expectNone()

	// a recovers: one success is not enough, the second brings it back.
	a.set(http.StatusOK)
	h.round()
	h.expectNone()
	if a.ep.Healthy() {
		t.Fatal("a healthy after 1 of 2 successes")
	}
	// A failure in between starts the success streak over.
	a.set(http.StatusServiceUnavailable)
	h.round()
	a.set(http.StatusOK)
	h.round()
	h.expectNone()
	if a.ep.Healthy() {
		t.Fatal("a healthy after a broken success streak")
	}
	h.round()
	h.expect(a, true, ReasonProbeSucceeded)
	h.round()
	h.expectNone()
	if !b.ep.Healthy() {
		t.Fatal("b went unhealthy")
	}
}

// A server's health is unknown until its first answer or a failure streak:
// either is a transition, whatever HealthyThreshold says; a server taken out
// before (by an earlier checker of the same endpoint) still needs the threshold.
func TestFirstJudgement(t *testing.T) {
	cfg := testConfig
	cfg.UnhealthyThreshold, cfg.HealthyThreshold = 2, 3

	t.Run("fails, then answers", func(t *testing.T) {
		a := newMember(t)
		a.set(http.StatusInternalServerError)
		h := newHarness(t, cfg, a)
		h.start()
		h.expectNone() // one failure of two: still unknown, still taking requests
		if !a.ep.Healthy() {
			t.Fatal("a taken out after 1 of 2 failures")
		}
		a.set(http.StatusOK)
		h.round()
		h.expect(a, true, ReasonProbeSucceeded)
		h.round()
		h.expectNone()
	})

	t.Run("fails to the threshold", func(t *testing.T) {
		a := newMember(t)
		a.set(http.StatusInternalServerError)
		h := newHarness(t, cfg, a)
		h.start()
		h.round()
		h.expect(a, false, ReasonProbeFailed)
		a.set(http.StatusOK)
		for range cfg.HealthyThreshold - 1 {
			h.round()
			h.expectNone()
		}
		h.round()
		h.expect(a, true, ReasonProbeSucceeded)
	})

	t.Run("taken out before", func(t *testing.T) {
		a := newMember(t)
		a.ep.SetHealthy(false)
		h := newHarness(t, cfg, a)
		h.run()
		if got := h.awaitProbes(1); !got[a.srv.URL] {
			t.Fatalf("probe results %v", got)
		}
		h.expectNone() // no first-answer transition: a was judged before
		for range cfg.HealthyThreshold - 2 {
			h.round()
			h.expectNone()
		}
		if a.ep.Healthy() {
			t.Fatal("a back before HealthyThreshold answers")
		}
		h.round()
		h.expect(a, true, ReasonProbeSucceeded)
	})
}

func TestProbeConnectionFailed(t *testing.T) {
	a, b := newMember(t), newMember(t)
	h := newHarness(t, testConfig, a, b)
	h.start()
	// Closed listener: connections are refused, which takes it out at once.
	a.srv.Close()
	h.round()
	tr := h.expect(a, false, ReasonProbeFailed)
	if !strings.HasPrefix(tr.Message, "GET /readyz: ") || strings.Contains(tr.Message, a.srv.URL+"/readyz") {
		t.Errorf("message %q: want the error without the URL", tr.Message)
	}
	t.Logf("message: %s", tr.Message)
	h.expectNone()
	if !b.ep.Healthy() {
		t.Fatal("b went unhealthy")
	}
}

// Passive failures at the egress proxy or on the konnectivity path, and real
// requests whose server sent no response headers in time, have reasons of
// their own; the message says what failed (for the tunnel: names the
// konnectivity server).
func TestPassiveFailureReasons(t *testing.T) {
	for _, tc := range []struct {
		err          error
		reason, want string
		contains     bool // want is a part of the message, not all of it
	}{
		{&url.Error{Op: "Get", URL: "https://192.0.2.10:6443/api", Err: &transport.ProxyError{Proxy: "http://192.0.2.20:3128", Err: errors.New("CONNECT 192.0.2.10:6443: the proxy answered 502 Bad Gateway")}},
			ReasonProxyFailed, "egress proxy http://192.0.2.20:3128: CONNECT 192.0.2.10:6443: the proxy answered 502 Bad Gateway", false},
		{&url.Error{Op: "Get", URL: "https://192.0.2.10:6443/api", Err: &net.OpError{Op: "dial", Net: "tcp",
			Err: &konnectivity.Error{Server: "192.0.2.30:8090", Err: errors.New("No agent available")}}},
			ReasonTunnelFailed, "konnectivity server 192.0.2.30:8090", true},
		{headerTimeout{}, ReasonResponseTimedOut, "no response headers within 1m10s", false},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			a := newMember(t)
			cfg := testConfig
			cfg.UnhealthyThreshold = 1
			h := newHarness(t, cfg, a)
			h.start()
			h.c.ReportFailure(a.ep, tc.err)
			tr := h.expect(a, false, tc.reason)
			if tc.contains && !strings.Contains(tr.Message, tc.want) || !tc.contains && tr.Message != tc.want {
				t.Errorf("message %q, want %q", tr.Message, tc.want)
			}
		})
	}
}

// headerTimeout is an error like the forwarder's when the headers are late.
type headerTimeout struct{}

func (headerTimeout) Error() string { return "no response headers within 1m10s" }
func (headerTimeout) Unwrap() error { return ErrResponseTimedOut }

func TestNon200IsFailure(t *testing.T) {
	for _, status := range []int{http.StatusNoContent, http.StatusFound, http.StatusUnauthorized, http.StatusNotFound} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			a := newMember(t)
			cfg := testConfig
			cfg.UnhealthyThreshold = 1
			h := newHarness(t, cfg, a)
			h.start()
			a.set(status)
			h.round()
			tr := h.expect(a, false, ReasonProbeFailed)
			if want := "GET /readyz: " + fmt.Sprint(status) + " " + http.StatusText(status); tr.Message != want {
				t.Errorf("message %q, want %q", tr.Message, want)
			}
		})
	}
}

func TestPassiveFailuresTakeEndpointOut(t *testing.T) {
	a, b := newMember(t), newMember(t)
	cfg := testConfig
	cfg.UnhealthyThreshold = 3
	h := newHarness(t, cfg, a, b)
	h.start()

	dialErr := &url.Error{Op: "Get", URL: a.srv.URL + "/api/v1/pods?token=x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}}
	h.c.ReportFailure(a.ep, dialErr)
	h.c.ReportFailure(a.ep, dialErr)
	if !a.ep.Healthy() {
		t.Fatal("a unhealthy after 2 of 3 failures")
	}
	// Canceled client requests say nothing about the endpoint.
	h.c.ReportFailure(a.ep, fmt.Errorf("proxy: %w", context.Canceled))
	if !a.ep.Healthy() {
		t.Fatal("a canceled request counted as a failure")
	}
	h.c.ReportFailure(a.ep, dialErr)
	// Out at once, before any further probe.
	if a.ep.Healthy() {
		t.Fatal("a healthy after 3 passive failures")
	}
	tr := h.expect(a, false, ReasonConnectionFailed)
	if tr.Message != "dial tcp: connect: connection refused" {
		t.Errorf("message %q", tr.Message)
	}
	h.c.ReportFailure(a.ep, dialErr)
	h.expectNone()

	// Passive successes do not bring it back; a probe does.
	h.c.ReportSuccess(a.ep, true)
	h.expectNone()
	if a.ep.Healthy() {
		t.Fatal("a passive success made a healthy")
	}
	h.round()
	h.expect(a, true, ReasonProbeSucceeded)

	// Probe and passive failures count alike.
	a.set(http.StatusInternalServerError)
	h.round()
	h.c.ReportFailure(a.ep, dialErr)
	h.expectNone()
	h.c.ReportFailure(a.ep, dialErr)
	h.expect(a, false, ReasonConnectionFailed)
	if !b.ep.Healthy() {
		t.Fatal("b went unhealthy")
	}
}

// A refused connection (nothing listens: the server is down or restarting)
// takes the server out at once, whatever the threshold, by a request or a
// probe; it comes back when a probe of its readiness succeeds.
func TestRefusedConnectionTakesEndpointOut(t *testing.T) {
	a, b := newMember(t), newMember(t)
	cfg := testConfig
	cfg.UnhealthyThreshold = 3
	h := newHarness(t, cfg, a, b)
	h.start()
	refused := &url.Error{Op: "Get", URL: a.srv.URL + "/api", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	h.c.ReportFailure(a.ep, refused)
	if a.ep.Healthy() {
		t.Fatal("a still takes requests after its connection was refused")
	}
	h.expect(a, false, ReasonConnectionFailed)
	h.round()
	h.expect(a, true, ReasonProbeSucceeded)

	// A probe refused likewise: b stops listening.
	b.srv.Close()
	h.round()
	h.expect(b, false, ReasonProbeFailed)
	if !a.ep.Healthy() {
		t.Fatal("a went out with b")
	}
}

// A real request that succeeds breaks a streak of failures, not one of
// failed probes: a server that answers requests while its health check fails
// (an apiserver whose etcd stalls) still goes out.
func TestPassiveSuccessResetsStreak(t *testing.T) {
	a := newMember(t)
	cfg := testConfig
	cfg.UnhealthyThreshold = 3
	h := newHarness(t, cfg, a)
	h.start()
	dialErr := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	h.c.ReportFailure(a.ep, dialErr)
	h.c.ReportFailure(a.ep, dialErr)
	h.c.ReportSuccess(a.ep, true) // 2 failures forgotten
	h.c.ReportFailure(a.ep, dialErr)
	h.c.ReportFailure(a.ep, dialErr)
	h.expectNone()
	if !a.ep.Healthy() {
		t.Fatal("a unhealthy although a passive success broke the streak")
	}
	h.round() // a successful probe: a clean slate

	a.set(http.StatusInternalServerError)
	h.round()
	h.round()
	h.c.ReportSuccess(a.ep, true) // the streak of failures starts over, not the probes'
	h.expectNone()
	h.round()
	h.expect(a, false, ReasonProbeFailed)
}

func TestProbeTimeout(t *testing.T) {
	slow, fast := newMember(t), newMember(t)
	slow.set(0) // block until released
	h := newHarness(t, testConfig, slow, fast)
	h.run()

	for round := range 2 {
		if round > 0 {
			h.clk.Step(h.cfg.Interval - h.cfg.Timeout) // to the next tick
		}
		// The slow endpoint's probe hangs; the fast one's completes meanwhile.
		slow.waitHit()
		got := h.awaitProbes(1)
		if !got[fast.srv.URL] {
			t.Fatalf("round %d: fast probe result %v", round, got)
		}
		if round == 0 {
			h.expectConfirmed(got)
		}
		// The timeout passes: the hanging probe fails.
		h.clk.Step(h.cfg.Timeout)
		if got := h.awaitProbes(1); got[slow.srv.URL] || len(got) != 1 {
			t.Fatalf("round %d: slow probe result %v", round, got)
		}
	}
	tr := h.expect(slow, false, ReasonProbeTimedOut)
	if tr.Message != "GET /readyz: timed out after 2s" {
		t.Errorf("message %q", tr.Message)
	}
	h.expectNone()
	if !fast.ep.Healthy() {
		t.Fatal("fast went unhealthy")
	}
	// No two probes of one endpoint overlap: the hanging probe ended before the
	// next one started, so exactly one request per round reached slow.
	select {
	case <-slow.hits:
		t.Fatal("an extra probe reached slow")
	default:
	}
}

func TestStopWithProbeInFlight(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		slow, fast := newMember(t), newMember(t)
		slow.set(0)
		h := newHarness(t, testConfig, slow, fast)
		ctx, cancel := context.WithCancel(context.Background())
		h.cancel = cancel
		h.sched, h.done = runChecker(ctx, h.c, h.clk, h.owns)
		slow.waitHit()
		h.awaitProbes(1)
		h.stop() // cancel; the checker stops although slow's probe was in flight
		if slow.ep.Healthy() != true {
			t.Error("the probe canceled by shutdown counted")
		}
		// Reports after the checker stopped are ignored.
		for range 5 {
			h.c.ReportFailure(fast.ep, errors.New("boom"))
		}
		if !fast.ep.Healthy() {
			t.Error("report after the checker stopped changed health")
		}
		slow.unblock()
		slow.srv.Close()
		fast.srv.Close()
	}()
	// Nothing of the checker, the servers or the transport keeps running.
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, testTimeout, true, func(context.Context) (bool, error) {
		return runtime.NumGoroutine() <= before, nil
	})
	if err != nil {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines: %d before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
	}
}

func TestConcurrentReports(t *testing.T) {
	a, b := newMember(t), newMember(t)
	h := newHarness(t, testConfig, a, b) // unhealthy after 2 failures, healthy after 1 probe
	skips := h.recordSkips()             // a probe that falls due after a success may be skipped
	h.start()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				e := a.ep
				if (i+j)%2 == 0 {
					e = b.ep
				}
				if j%5 == 0 {
					h.c.ReportSuccess(e, true)
				} else {
					h.c.ReportFailure(e, errors.New("connection reset by peer"))
				}
			}
		})
	}
	for range 5 {
		h.dueRound(skips)
	}
	close(stop)
	wg.Wait()
	// Whatever the interleaving, transitions alternate per endpoint.
	h.stop()
	last := map[string]bool{a.srv.URL: true, b.srv.URL: true}
	for {
		select {
		case tr := <-h.trans:
			if tr.Healthy == last[tr.Endpoint] {
				t.Fatalf("transition %+v repeats the previous health", tr)
			}
			last[tr.Endpoint] = tr.Healthy
			continue
		default:
		}
		break
	}
}

func TestUnknownEndpointIgnored(t *testing.T) {
	a := newMember(t)
	h := newHarness(t, testConfig, a)
	other := balance.NewEndpoint(&url.URL{Scheme: "https", Host: "192.0.2.1:6443"})
	h.c.ReportFailure(other, errors.New("x"))
	h.c.ReportFailure(other, errors.New("x"))
	h.c.ReportSuccess(other, true)
	if !other.Healthy() {
		t.Fatal("a foreign endpoint was changed")
	}
}

func TestProbeURL(t *testing.T) {
	u, _ := url.Parse("https://192.0.2.10:6443")
	u2, _ := url.Parse("https://user:pw@192.0.2.11:6443/prefix/")
	c := NewChecker([]*balance.Endpoint{balance.NewEndpoint(u), balance.NewEndpoint(u2)}, func(*balance.Endpoint) http.RoundTripper { return http.DefaultTransport }, Config{Path: "livez"}, clocktesting.NewFakeClock(time.Now()), nil)
	if got, want := c.endpoints[0].request.URL.String(), "https://192.0.2.10:6443/livez"; got != want {
		t.Errorf("probe URL %q, want %q", got, want)
	}
	if got, want := c.endpoints[1].request.URL.String(), "https://192.0.2.11:6443/prefix/livez"; got != want {
		t.Errorf("probe URL %q, want %q", got, want)
	}
	if c.cfg.Interval != 5*time.Second || c.cfg.Timeout != 2*time.Second || c.cfg.HealthyThreshold != 1 || c.cfg.UnhealthyThreshold != 2 {
		t.Errorf("normalized config %+v", c.cfg)
	}
}

// Servers registered together are probed once at once, then each at a phase of
// its own: the second probes of 20 servers are due at points spread over the
// interval instead of together, and from then on every Interval.
func TestSpreadProbes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	var eps []*balance.Endpoint
	for range 20 {
		eps = append(eps, balance.NewEndpoint(u))
	}
	const interval = 5 * time.Second
	cfg := Config{Path: "/readyz", Interval: interval, Timeout: interval / 2, HealthyThreshold: 1, UnhealthyThreshold: 1, Spread: true}
	clk := clocktesting.NewFakeClock(time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC))
	c := NewChecker(eps, func(*balance.Endpoint) http.RoundTripper { return http.DefaultTransport }, cfg, clk, nil)
	type due struct {
		e  *balance.Endpoint
		at time.Time
	}
	scheduled := make(chan due, 2*len(eps))
	c.scheduled = func(e *balance.Endpoint, at time.Time) { scheduled <- due{e, at} }
	ctx, cancel := context.WithCancel(context.Background())
	_, done := runChecker(ctx, c, clk, nil)
	defer func() { cancel(); <-done }()

	next := func() due {
		t.Helper()
		select {
		case d := <-scheduled:
			return d
		case <-time.After(testTimeout):
			t.Fatal("no probe was scheduled")
			return due{}
		}
	}
	start := clk.Now() // the fake clock stands still: every first probe ends now
	second := map[*balance.Endpoint]time.Time{}
	first, last := start.Add(interval), start
	for range eps {
		d := next()
		if d.at.Before(start) || !d.at.Before(start.Add(interval)) {
			t.Fatalf("second probe due at +%v, want within the first interval", d.at.Sub(start))
		}
		second[d.e] = d.at
		first, last = minTime(first, d.at), maxTime(last, d.at)
	}
	if len(second) != len(eps) {
		t.Fatalf("%d of %d servers scheduled", len(second), len(eps))
	}
	// Lock-step probing would schedule them all at one point.
	if spread := last.Sub(first); spread < interval/4 {
		t.Errorf("second probes of %d servers due within %v of each other, want them spread over the %v interval", len(eps), spread, interval)
	}
	// Past the phase, the period is Interval from each probe's start (here all
	// start when the clock jumps past their phases).
	clk.Step(interval)
	for range eps {
		if d := next(); !d.at.Equal(start.Add(2 * interval)) {
			t.Errorf("third probe due at +%v, want +%v", d.at.Sub(start), 2*interval)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Between probes a checker holds no goroutine, whatever its number of
// servers: a thousand idle clusters cost one goroutine, the scheduler's.
func TestIdleCheckersHoldNoGoroutine(t *testing.T) {
	var ms []*member
	for range 5 {
		ms = append(ms, newMember(t))
	}
	h := newHarness(t, testConfig, ms...)
	other := NewChecker([]*balance.Endpoint{ms[0].ep}, func(*balance.Endpoint) http.RoundTripper { return bearer{h.tr} }, testConfig, h.clk, nil)
	h.start()
	ctx, cancel := context.WithCancel(context.Background())
	other.Start(ctx, h.sched)
	defer func() { cancel(); <-other.Done() }()
	h.round()
	var stacks string
	checkers, schedulers := 0, 0
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, testTimeout, true, func(context.Context) (bool, error) {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		checkers, schedulers = 0, 0
		for _, g := range strings.Split(stacks, "\n\n") {
			switch {
			case strings.Contains(g, "health.(*Checker)"):
				checkers++
			case strings.Contains(g, "health.(*Scheduler).Run"):
				schedulers++
			}
		}
		return checkers == 0 && schedulers == 1, nil
	})
	if err != nil {
		t.Fatalf("%d goroutines of the checkers and %d of the scheduler between probes, want 0 and 1:\n%s", checkers, schedulers, stacks)
	}
}

// dueOutcome is what became of one due probe: sent (and whether it
// succeeded) or skipped.
type dueOutcome struct {
	skipped string // the reason; "" when sent
	ok      bool
}

// outcomes records the skipped probes of h's checker; call before start.
func (h *harness) recordSkips() chan probeEvent {
	skips := make(chan probeEvent, 100)
	h.c.skipped = func(e *balance.Endpoint, reason string) { skips <- probeEvent{endpoint: e.URL.String() + " " + reason} }
	return skips
}

// dueRound advances the clock by one interval and returns, for each
// endpoint, whether its due probe was sent or skipped.
func (h *harness) dueRound(skips chan probeEvent) map[string]dueOutcome {
	h.t.Helper()
	h.clk.Step(h.cfg.Interval)
	got := map[string]dueOutcome{}
	for len(got) < len(h.members) {
		select {
		case p := <-h.probes:
			got[p.endpoint] = dueOutcome{ok: p.ok}
		case s := <-skips:
			endpoint, reason, _ := strings.Cut(s.endpoint, " ")
			got[endpoint] = dueOutcome{skipped: reason}
		case <-time.After(testTimeout):
			h.t.Fatalf("%d of %d due probes sent or skipped: %v", len(got), len(h.members), got)
		}
	}
	return got
}

// Passive results count: a healthy server that answered a real request
// within the interval, with a clean probe streak, is not probed; one without
// traffic is; one whose last probe failed, or that is out, always is; and a
// server with traffic is still probed every maxSkips+1 intervals.
func TestTrafficSkipsProbes(t *testing.T) {
	busy, idle := newMember(t), newMember(t)
	h := newHarness(t, testConfig, busy, idle)
	skips := h.recordSkips()
	h.start()
	skipped := func() uint64 { return h.sched.Skipped()[SkipTraffic] }

	h.c.ReportSuccess(busy.ep, true)
	got := h.dueRound(skips)
	if got[busy.srv.URL].skipped != SkipTraffic || got[idle.srv.URL].skipped != "" {
		t.Fatalf("busy server's probe skipped %q, idle one's %q; want %s and sent", got[busy.srv.URL].skipped, got[idle.srv.URL].skipped, SkipTraffic)
	}
	if n := skipped(); n != 1 {
		t.Errorf("%d probes counted skipped, want 1", n)
	}
	// The answer counted for one interval only.
	if got := h.dueRound(skips); got[busy.srv.URL].skipped != "" {
		t.Fatalf("busy server's probe skipped %q without traffic in the interval", got[busy.srv.URL].skipped)
	}
	// Answers that do not show the server reaches its storage (its caches,
	// discovery) replace no probe.
	h.c.ReportSuccess(busy.ep, false)
	if got := h.dueRound(skips); got[busy.srv.URL].skipped != "" {
		t.Fatalf("busy server's probe skipped %q after answers from its caches only", got[busy.srv.URL].skipped)
	}

	// Traffic every interval: probed every maxSkips+1 intervals all the same.
	for i := range 2 * (maxSkips + 1) {
		h.c.ReportSuccess(busy.ep, true)
		got := h.dueRound(skips)
		if sent, want := got[busy.srv.URL].skipped == "", i%(maxSkips+1) == maxSkips; sent != want {
			t.Fatalf("interval %d with traffic: probe sent %v, want %v", i, sent, want)
		}
	}
	h.expectNone()

	// A failed probe needs the next one, traffic or not; the server goes out.
	busy.set(http.StatusInternalServerError)
	h.c.ReportSuccess(busy.ep, true)
	if got := h.dueRound(skips); got[busy.srv.URL].skipped != SkipTraffic {
		t.Fatalf("probe with traffic after a sent one: %+v, want skipped", got[busy.srv.URL])
	}
	if got := h.dueRound(skips); got[busy.srv.URL].skipped != "" || got[busy.srv.URL].ok {
		t.Fatalf("probe without traffic: %+v, want sent and failed", got[busy.srv.URL])
	}
	h.c.ReportSuccess(busy.ep, true)
	if got := h.dueRound(skips); got[busy.srv.URL].skipped != "" || got[busy.srv.URL].ok {
		t.Fatalf("probe after a failed one: %+v, want sent and failed", got[busy.srv.URL])
	}
	h.expect(busy, false, ReasonProbeFailed)

	// Out: only probes bring it back, traffic (the fallback to all servers)
	// does not spare them.
	busy.set(http.StatusOK)
	h.c.ReportSuccess(busy.ep, true)
	if got := h.dueRound(skips); got[busy.srv.URL].skipped != "" || !got[busy.srv.URL].ok {
		t.Fatalf("probe of an unhealthy server with traffic: %+v, want sent", got[busy.srv.URL])
	}
	h.expect(busy, true, ReasonProbeSucceeded)
	if n := skipped(); n != 1+2*maxSkips+1 {
		t.Errorf("%d probes counted skipped, want %d", n, 1+2*maxSkips+1)
	}
}

// With shared health checks, a replica that does not own the cluster sends
// no probe and follows the published verdicts, but a server it took out on
// its own evidence (a refused connection) it probes itself until it is back;
// the owner probes and ignores published verdicts.
func TestFollowVerdicts(t *testing.T) {
	a := newMember(t)
	cfg := testConfig
	cfg.Key = "member-x"
	h := newHarness(t, cfg, a)
	var owner atomic.Bool
	h.owns = func(key string) bool {
		if key != "member-x" {
			t.Errorf("owner asked about %q", key)
		}
		return owner.Load()
	}
	skips := h.recordSkips()
	h.run()
	notOwner := func() uint64 { return h.sched.Skipped()[SkipNotOwner] }
	select { // the first probe, due at once
	case s := <-skips:
		if want := a.srv.URL + " " + SkipNotOwner; s.endpoint != want {
			t.Fatalf("skipped %q, want %q", s.endpoint, want)
		}
	case p := <-h.probes:
		t.Fatalf("a replica that does not own the cluster probed %s", p.endpoint)
	case <-time.After(testTimeout):
		t.Fatal("the first probe was neither sent nor skipped")
	}
	// A probe found not needed is parked: it falls due, and counts as
	// skipped, every interval without being popped to be skipped again.
	parked := func() bool {
		h.sched.mu.Lock()
		defer h.sched.mu.Unlock()
		return h.c.endpoints[0].next.parkedAt >= 0
	}
	expectSkipped := func() {
		t.Helper()
		before := notOwner()
		h.clk.Step(h.cfg.Interval)
		if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, testTimeout, true, func(context.Context) (bool, error) {
			return parked() && notOwner() == before+1, nil
		}); err != nil {
			t.Fatalf("due probe: parked %v, %d counted skipped as not owned; want parked, %d", parked(), notOwner(), before+1)
		}
		select {
		case p := <-h.probes:
			t.Fatalf("probed %s, want skipped %s", p.endpoint, SkipNotOwner)
		default:
		}
		for len(skips) > 0 {
			if s := <-skips; s.endpoint != a.srv.URL+" "+SkipNotOwner {
				t.Fatalf("skipped %q, want %s", s.endpoint, SkipNotOwner)
			}
		}
	}
	expectSent := func() {
		t.Helper()
		if got := h.dueRound(skips)[a.srv.URL]; got.skipped != "" || !got.ok {
			t.Fatalf("due probe: %+v, want sent and successful", got)
		}
	}

	// The owner's verdicts, both ways.
	h.c.Follow(a.srv.URL, false, ReasonProbeFailed, "GET /readyz: 500 Internal Server Error", h.clk.Now())
	h.expect(a, false, ReasonProbeFailed)
	expectSkipped()
	h.c.Follow(a.srv.URL, false, ReasonProbeFailed, "GET /readyz: 500 Internal Server Error", h.clk.Now())
	h.expectNone() // no change
	h.c.Follow(a.srv.URL, true, ReasonProbeSucceeded, "GET /readyz: 200 OK", h.clk.Now())
	h.expect(a, true, ReasonProbeSucceeded)
	h.c.Follow("https://192.0.2.1:6443", false, ReasonProbeFailed, "not a server of the cluster", h.clk.Now())
	expectSkipped()
	h.expectNone()

	// Its own evidence: out at once, and its own probe brings it back, not
	// the owner's unchanged verdict.
	refused := &url.Error{Op: "Get", URL: a.srv.URL + "/api", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	h.c.ReportFailure(a.ep, refused)
	h.expect(a, false, ReasonConnectionFailed)
	h.c.Follow(a.srv.URL, true, ReasonProbeSucceeded, "GET /readyz: 200 OK", h.clk.Now())
	if a.ep.Healthy() {
		t.Fatal("a published healthy verdict overrode a refused connection")
	}
	expectSent()
	h.expect(a, true, ReasonProbeSucceeded)

	// Out here and by the owner too: it waits for the owner's verdict.
	h.c.ReportFailure(a.ep, refused)
	h.expect(a, false, ReasonConnectionFailed)
	h.c.Follow(a.srv.URL, false, ReasonProbeFailed, "GET /readyz: connection refused", h.clk.Now())
	expectSkipped()
	h.c.Follow(a.srv.URL, true, ReasonProbeSucceeded, "GET /readyz: 200 OK", h.clk.Now())
	expectSent()
	h.expect(a, true, ReasonProbeSucceeded)
	// Parked over several intervals, each counts.
	expectSkipped()
	before := notOwner()
	h.clk.Step(3 * h.cfg.Interval)
	if n := notOwner(); n != before+3 {
		t.Errorf("%d probes counted skipped as not owned after three intervals, want %d", n, before+3)
	}
	if n := notOwner(); n != 8 {
		t.Errorf("%d probes counted skipped as not owned, want 8", n)
	}

	// Ownership moves here (Reshard): it probes, and follows no one.
	owner.Store(true)
	h.sched.Reshard()
	if n := notOwner(); n != 8 {
		t.Errorf("%d probes counted skipped as not owned after Reshard, want still 8", n)
	}
	expectSent()
	h.c.Follow(a.srv.URL, false, ReasonProbeFailed, "GET /readyz: 500 Internal Server Error", h.clk.Now())
	h.expectNone()
	if !a.ep.Healthy() {
		t.Fatal("the owner followed a published verdict")
	}
}
