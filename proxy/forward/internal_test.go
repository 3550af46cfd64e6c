package forward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kubewharf/kube-gateway/proxy/health"
	"github.com/kubewharf/kube-gateway/proxy/transport"
)

// A long-running response waits for Stop without a goroutine of its own: a
// gateway holding thousands of watches pays for none.
func TestStoppableBodyNeedsNoGoroutine(t *testing.T) {
	stopping, stop := context.WithCancel(context.Background())
	before := runtime.NumGoroutine()
	bodies := make([]*body, 100)
	for i := range bodies {
		bodies[i] = newBody(context.Background(), io.NopCloser(strings.NewReader("event\n")), stopping, func() {}, nil)
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Fatalf("%d goroutines for %d waiting bodies, want none", after-before, len(bodies))
	}
	_ = bodies[0].Close() // a body closed before Stop is no longer stopped
	stop()
	for i, b := range bodies {
		got, err := io.ReadAll(b)
		if err != nil {
			t.Fatalf("body %d: %v, want a clean end", i, err)
		}
		if i == 0 && string(got) != "event\n" {
			t.Errorf("body closed before Stop: read %q", got)
		}
	}
}

// Failures at the egress proxy are told apart from the member's, on the
// ordinary path (the error) and the upgrade path (its flattened text).
func TestIsProxyError(t *testing.T) {
	pe := &transport.ProxyError{Proxy: "http://192.0.2.20:3128", Err: errors.New("CONNECT 192.0.2.10:6443: 407 Proxy Authentication Required")}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&url.Error{Op: "Get", URL: "https://192.0.2.10:6443/api", Err: pe}, true},
		{fmt.Errorf("error dialing backend: %v", pe), true},
		{errors.New("error dialing backend: dial tcp 192.0.2.10:6443: connect: connection refused"), false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}, false},
	} {
		if got := isProxyError(tc.err); got != tc.want {
			t.Errorf("isProxyError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// A late response is reported to health checking as a slow server
// (ResponseTimedOut), not as a connection that failed.
func TestHeaderTimeoutIsResponseTimedOut(t *testing.T) {
	var err error = &headerTimeoutError{after: time.Second}
	if !errors.Is(err, health.ErrResponseTimedOut) {
		t.Fatalf("%v is not health.ErrResponseTimedOut", err)
	}
}
