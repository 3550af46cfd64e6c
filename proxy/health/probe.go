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

// startProbe starts the probe of s that the scheduler found due, on a
// goroutine of its own, which schedules the next one when it ends.
func (c *Checker) startProbe(s *endpointState) {
	if !c.begin() {
		return
	}
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

// probeOnce sends one probe and records its result. It returns when the probe
// and its timer goroutine have ended.
func (c *Checker) probeOnce(ctx context.Context, s *endpointState) {
	if ctx.Err() != nil {
		return
	}
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The timeout runs on the checker's clock, so that tests drive it.
	timer := c.clk.NewTimer(c.cfg.Timeout)
	probeDone, timerDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(timerDone)
		select {
		case <-timer.C():
			cancel(errTimedOut(c.cfg.Timeout))
		case <-probeDone:
		}
	}()
	status, err := c.get(pctx, s.probe, s.probeURL)
	close(probeDone)
	timer.Stop()
	<-timerDone

	if ctx.Err() != nil { // shutting down: the result says nothing about s
		return
	}
	ok := err == nil && status == ""
	prefix := "GET " + c.cfg.Path + ": "
	switch {
	case ok:
		c.probeSuccess(s, prefix+"200 OK")
	case err != nil:
		// Once the probe's timeout has passed, err only says how the
		// canceled request ended: the timeout is the failure.
		if cause := context.Cause(pctx); cause != nil {
			err = cause
		}
		c.failure(s, probeReason(failure.Of(err)), prefix+transport.StripURL(err).Error(), true, errors.Is(err, syscall.ECONNREFUSED))
	default:
		c.failure(s, ReasonProbeFailed, prefix+status, true, false)
	}
	if c.probed != nil {
		c.probed(s.e, ok)
	}
}

// maxDrain bounds the body read to reuse the connection; a longer body closes it.
const maxDrain = 64 << 10

// get sends GET u and returns "" on 200, else the status line; or the error.
// Redirects are not followed: a redirect is a failure.
func (c *Checker) get(ctx context.Context, rt http.RoundTripper, u string) (status string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "text/plain, */*")
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
