package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"syscall"
	"time"

	"github.com/kubewharf/kube-gateway/proxy/failure"
	"github.com/kubewharf/kube-gateway/proxy/transport"
)

// Active checking: the probes that the Scheduler paces.

// Reasons of probes that were due and not sent (Scheduler.Skipped).
const (
	// SkipTraffic: the server answered a real request since its last probe
	// fell due, it is healthy and its last probe succeeded.
	SkipTraffic = "Traffic"
	// SkipNotOwner: another replica probes the cluster and publishes its
	// verdicts (Scheduler.Share), and this one has no reason of its own to
	// doubt the server.
	SkipNotOwner = "NotOwner"
)

// maxSkips bounds the probes of a server skipped in a row: a server that
// answers requests while its readiness fails (an apiserver whose etcd
// stalls serves its caches) is still probed every maxSkips+1 intervals, and
// its first failed probe stops the skipping.
const maxSkips = 5

// startProbe starts the probe of s that the scheduler found due at at, on a
// goroutine of its own, which schedules the next one when it ends; or skips
// it (see skipReason) and schedules the next one an Interval later.
func (c *Checker) startProbe(s *endpointState, at time.Time) {
	if !c.begin() {
		return
	}
	handover := c.sched.handover()
	if reason := c.skipReason(s); reason != "" {
		s.skips++
		c.sched.skip(reason)
		next := at.Add(c.cfg.Interval)
		if reason == SkipNotOwner {
			c.sched.park(s.next, next, handover)
			if c.skipped != nil {
				c.skipped(s.e, reason)
			}
			c.end()
			return
		}
		if c.skipped != nil {
			c.skipped(s.e, reason)
		}
		if c.scheduled != nil {
			c.scheduled(s.e, next)
		}
		c.sched.add(s.next, next)
		c.end()
		return
	}
	s.skips = 0
	s.probes++
	go func() {
		defer c.end()
		start := c.clk.Now()
		c.probeOnce(c.ctx, s)
		if c.ctx.Err() != nil {
			return
		}
		at := c.nextProbe(s, start, c.clk.Now())
		if c.scheduled != nil {
			c.scheduled(s.e, at)
		}
		c.sched.add(s.next, at)
	}()
}

// skipReason says why the probe of s that fell due is not needed, "" when
// it is. Passive results count: a server that answered a real request within
// the interval, whose streaks are clean, is known to be up without one. A
// server out of rotation always is probed (only probes bring it back), as is
// one whose last probe failed.
//
// With shared health checks, a replica that does not own the cluster probes
// only a server that it took out itself (a refused connection, a failure
// streak of its requests) while the published verdict says healthy: only its
// own probe can bring it back; the rest it follows.
func (c *Checker) skipReason(s *endpointState) string {
	answered := s.answered.Swap(false)
	if !c.sched.owner(c.cfg.Key) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.e.Healthy() || !s.outLocally || s.published < 0 {
			return SkipNotOwner
		}
		return ""
	}
	if !answered || s.skips >= maxSkips {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.judged && s.e.Healthy() && s.probeFailures == 0 && s.failures.Load() == 0 {
		return SkipTraffic
	}
	return ""
}

// nextProbe is when the probe of s after the one from start to end is due:
// Interval after the start of the last one, or at once if that took longer.
// With Spread, the second probe comes at a random point of the first Interval,
// which sets the endpoint's phase for good.
func (c *Checker) nextProbe(s *endpointState, start, end time.Time) time.Time {
	if s.probes == 1 && c.cfg.Spread {
		return end.Add(time.Duration(rand.Int64N(int64(c.cfg.Interval))))
	}
	if next := start.Add(c.cfg.Interval); next.After(end) {
		return next
	}
	return end
}

// probeReason is the reason of a probe's failure of kind k.
func probeReason(k failure.Kind) string {
	switch k {
	case failure.Proxy:
		return ReasonProxyFailed
	case failure.Tunnel:
		return ReasonTunnelFailed
	case failure.Timeout:
		return ReasonProbeTimedOut
	}
	return ReasonProbeFailed
}

// errTimedOut is the cause of a probe's context when its timeout passed.
type errTimedOut time.Duration

func (e errTimedOut) Error() string { return fmt.Sprintf("timed out after %s", time.Duration(e)) }

func (e errTimedOut) Unwrap() error { return failure.ErrTimedOut }

// probeOnce sends one probe and records its result.
func (c *Checker) probeOnce(ctx context.Context, s *endpointState) {
	if ctx.Err() != nil {
		return
	}
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The timeout runs on the checker's clock, so that tests drive it; a
	// timer function, not a goroutine waiting for the probe or its timer.
	timer := c.clk.AfterFunc(c.cfg.Timeout, func() { cancel(errTimedOut(c.cfg.Timeout)) })
	status, err := c.get(s.probe, s.request.WithContext(pctx))
	timer.Stop()

	if ctx.Err() != nil { // shutting down: the result says nothing about s
		return
	}
	ok := err == nil && status == ""
	switch {
	case ok:
		c.probeSuccess(s, c.probeOK)
	case err != nil:
		// Once the probe's timeout has passed, err only says how the
		// canceled request ended: the timeout is the failure.
		if cause := context.Cause(pctx); cause != nil {
			err = cause
		}
		c.failure(s, probeReason(failure.Of(err)), c.probeFailed+transport.StripURL(err).Error(), true, errors.Is(err, syscall.ECONNREFUSED))
	default:
		c.failure(s, ReasonProbeFailed, c.probeFailed+status, true, false)
	}
	if c.probed != nil {
		c.probed(s.e, ok)
	}
}

// maxDrain bounds the body read to reuse the connection; a longer body closes it.
const maxDrain = 64 << 10

// get sends req and returns "" on 200, else the status line; or the error.
// Redirects are not followed: a redirect is a failure.
func (c *Checker) get(rt http.RoundTripper, req *http.Request) (status string, err error) {
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return "", err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	_ = resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return "", nil
	}
	status = resp.Status
	if status == "" {
		status = fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	return status, nil
}
