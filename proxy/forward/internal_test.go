package forward

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kubewharf/kube-gateway/proxy/health"
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

// A late response is reported to health checking as a slow server
// (ResponseTimedOut), not as a connection that failed.
func TestHeaderTimeoutIsResponseTimedOut(t *testing.T) {
	var err error = &headerTimeoutError{after: time.Second}
	if !errors.Is(err, health.ErrResponseTimedOut) {
		t.Fatalf("%v is not health.ErrResponseTimedOut", err)
	}
}
