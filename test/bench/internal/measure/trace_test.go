package measure

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"runtime/trace"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Requests through an HTTP/2 reverse proxy to an HTTP/2 member, traced: one
// handler burns the CPU, one sleeps, one runs a collection, the member takes
// its time for one, the rest answer at once. ReadTrace finds each proxied
// request once, leaves out the requests the server answered without the
// proxy, and puts the time where it belongs, also the running time of every
// goroutine by its kind.
func TestHandlingsSplitsEachRequest(t *testing.T) {
	const slow = 30 * time.Millisecond
	member := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow-member" {
			time.Sleep(slow)
		}
		io.WriteString(w, "ok")
	}))
	member.EnableHTTP2 = true
	member.StartTLS()
	defer member.Close()
	u, _ := url.Parse(member.URL)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = member.Client().Transport
	mux := http.NewServeMux()
	mux.HandleFunc("/spin", func(w http.ResponseWriter, r *http.Request) {
		for end := time.Now().Add(slow); time.Now().Before(end); {
		}
		rp.ServeHTTP(w, r)
	})
	mux.HandleFunc("/sleep", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(slow)
		rp.ServeHTTP(w, r)
	})
	mux.HandleFunc("/gc", func(w http.ResponseWriter, r *http.Request) {
		runtime.GC()
		rp.ServeHTTP(w, r)
	})
	mux.Handle("/fast", rp)
	mux.Handle("/slow-member", rp)
	mux.HandleFunc("/other", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "not proxied") })
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	client := srv.Client()
	get := func(path string) {
		t.Helper()
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("%s over %s, not HTTP/2", path, resp.Proto)
		}
	}
	get("/fast") // the connections, before the trace

	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Skipf("the test binary is traced already: %v", err)
	}
	idle := runtime.NumGoroutine() // the tracer's own included
	const fast = 40
	for i := 0; i < fast; i++ {
		get("/fast")
		get("/other")
	}
	get("/spin")
	get("/sleep")
	get("/gc")
	get("/slow-member")
	// A handler's goroutine ends a little after its client has the answer;
	// only requests whose goroutine ended in the trace are whole.
	// Best effort: a request still running is missing below, and reported.
	_ = wait.PollUntilContextTimeout(context.Background(), time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return runtime.NumGoroutine() <= idle, nil
	})
	trace.Stop()

	tr, err := ReadTrace(&buf, "httputil.(*ReverseProxy).ServeHTTP")
	if err != nil {
		t.Fatal(err)
	}
	// The spinning handler ran at least that long; the connections' read
	// loops and serve loops, older than the trace, are known by their stacks.
	for kind, least := range map[string]time.Duration{KindHandler: slow, KindMemberReader: 1, KindCallerServe: 1, KindCallerReader: 1} {
		if tr.Running[kind] < least {
			t.Errorf("%s ran for %v, want at least %v: %v", kind, tr.Running[kind], least, tr.Running)
		}
	}
	hs := tr.Requests
	if len(hs) != fast+4 {
		t.Fatalf("%d proxied requests found, want %d", len(hs), fast+4)
	}
	var spin, sleep, slowMember Handling
	var inGC int
	for _, h := range hs {
		if h.InGC > 0 {
			inGC++
		}
		var sum time.Duration
		for _, d := range h.Parts {
			sum += d
		}
		if sum != h.Total {
			t.Errorf("parts add up to %v, the request took %v: %v", sum, h.Total, h.Parts)
		}
		if h.Parts[PartRunning] > spin.Parts[PartRunning] {
			spin = h
		}
		if h.Parts["blocked: sleep"] > sleep.Parts["blocked: sleep"] {
			sleep = h
		}
		if h.Parts[PartMember] > slowMember.Parts[PartMember] {
			slowMember = h
		}
	}
	// The spinning handler can be preempted (runnable) on a busy machine,
	// but it runs for most of its time.
	if got := spin.Parts[PartRunning] + spin.Parts[PartRunnable]; got < slow {
		t.Errorf("the spinning request ran for %v, less than %v: %v", got, slow, spin.Parts)
	}
	if got := sleep.Parts["blocked: sleep"]; got < slow {
		t.Errorf("the sleeping request slept for %v, less than %v: %v", got, slow, sleep.Parts)
	}

	if got := slowMember.Parts[PartMember]; got < slow {
		t.Errorf("the request to the slow member waited %v for it, less than %v: %v", got, slow, slowMember.Parts)
	}
	if inGC == 0 {
		t.Error("no request overlapped the collection one of them ran")
	}

	median, slowest, err := Bands(hs)
	if err != nil {
		t.Fatal(err)
	}
	if slowest.N != 1 || slowest.Total < slow || median.Total >= slow {
		t.Errorf("median %v (%d requests), slowest %v (%d): the slow requests should be the tail", median.Total, median.N, slowest.Total, slowest.N)
	}
	if _, _, err := Bands(hs[:10]); err == nil {
		t.Error("a tail of 10 requests")
	}
}
