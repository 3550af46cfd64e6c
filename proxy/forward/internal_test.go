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
	"github.com/kubewharf/kube-gateway/proxy/request"
	"k8s.io/apiserver/pkg/authentication/user"
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

// Only answers that needed the member's storage stand for a readiness probe:
// a member whose etcd stalls still answers the others from its caches.
func TestReachesStorage(t *testing.T) {
	for _, tt := range []struct {
		method, path, query string
		want                bool
	}{
		{"GET", "/api/v1/namespaces/a/configmaps", "", true},
		{"GET", "/api/v1/namespaces/a/configmaps/x", "", true},
		{"POST", "/api/v1/namespaces/a/configmaps", "", true},
		{"DELETE", "/api/v1/namespaces/a/configmaps/x", "", true},
		{"PUT", "/api/v1/namespaces/a/pods/x/status", "", true},
		{"GET", "/api/v1/namespaces/a/configmaps", "resourceVersion=0", false},
		{"GET", "/api/v1/namespaces/a/configmaps", "limit=10&resourceVersion=12&resourceVersionMatch=NotOlderThan", false},
		{"GET", "/api/v1/namespaces/a/configmaps", "resourceVersionMatch=Exact", true},
		{"GET", "/api/v1/namespaces/a/configmaps", "watch=true", false},
		{"GET", "/api/v1/namespaces/a/pods/x/log", "", false},
		{"GET", "/version", "", false},
		{"GET", "/apis", "", false},
	} {
		attrs, err := request.Parse(tt.method, tt.path, tt.query, &user.DefaultInfo{Name: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if got := reachesStorage(&attrs, tt.query); got != tt.want {
			t.Errorf("%s %s?%s: reaches storage %v, want %v", tt.method, tt.path, tt.query, got, tt.want)
		}
	}
}
