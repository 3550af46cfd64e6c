package measure

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestLoadRateKeepsTheSchedule(t *testing.T) {
	var inFlight, maxInFlight atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		time.Sleep(20 * time.Millisecond) // slower than the interval: requests overlap
		w.Write([]byte("{}"))
	}))
	defer srv.Close()
	tg := &Target{Key: "test", Base: srv.URL, Client: srv.Client()}
	r := tg.LoadRate(context.Background(), "/", 200, time.Second, 64)
	if r.Errors > 0 {
		t.Fatalf("%d errors, first %v", r.Errors, r.FirstErr)
	}
	// An open loop sends on schedule, not when the previous answer came back:
	// requests overlap at the server (a closed loop of one would never), and
	// the schedule never runs ahead of the rate, however fast the machine.
	if m := maxInFlight.Load(); m < 2 {
		t.Errorf("at most %d request at the server at once: the sender waited for answers", m)
	}
	if r.Scheduled > 201 {
		t.Errorf("scheduled %d requests in 1 s at 200/s", r.Scheduled)
	}
	if p := r.Pct(50); p < 20*time.Millisecond {
		t.Errorf("p50 %s is less than the server's own 20 ms", p)
	}
}

func TestLoadRateCountsQueueingFromTheSchedule(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(50 * time.Millisecond)
	}))
	defer srv.Close()
	tg := &Target{Key: "test", Base: srv.URL, Client: srv.Client()}
	// One request at a time at 100/s against a 50 ms server: it sustains 20/s,
	// and every request waits longer than the one before.
	r := tg.LoadRate(context.Background(), "/", 100, time.Second, 1)
	if r.RPS() > 30 {
		t.Errorf("achieved %.0f/s with one request outstanding at 50 ms each", r.RPS())
	}
	if r.MaxLag < 40*time.Millisecond {
		t.Errorf("max lag %s: the schedule never waited", r.MaxLag)
	}
	if p := r.Pct(99); p < 90*time.Millisecond {
		t.Errorf("p99 %s does not include the wait for the previous request", p)
	}
}

func TestMetricsSum(t *testing.T) {
	text := `# TYPE go_goroutines gauge
go_goroutines 42
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",subresource="/readyz",verb="GET"} 7
apiserver_request_total{code="500",subresource="/readyz",verb="GET"} 1
apiserver_request_total{code="200",resource="configmaps",verb="LIST"} 100
# TYPE go_memstats_alloc_bytes_total counter
go_memstats_alloc_bytes_total 1.5e+06
`
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	m := Metrics(fams)
	for _, tt := range []struct {
		name  string
		match map[string]string
		want  float64
		ok    bool
	}{
		{"go_goroutines", nil, 42, true},
		{"apiserver_request_total", map[string]string{"subresource": "/readyz"}, 8, true},
		{"apiserver_request_total", map[string]string{"subresource": "/readyz", "code": "200"}, 7, true},
		{"apiserver_request_total", map[string]string{"subresource": "/livez"}, 0, true},
		{"go_threads", nil, 0, false},
	} {
		if got, ok := m.Sum(tt.name, tt.match); got != tt.want || ok != tt.ok {
			t.Errorf("Sum(%s, %v) = %v, %v; want %v, %v", tt.name, tt.match, got, ok, tt.want, tt.ok)
		}
	}
	if v, err := m.AllocBytes(); err != nil || v != 1.5e6 {
		t.Errorf("AllocBytes = %v, %v", v, err)
	}
}

func TestTCPConnsSeesOwnConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	defer s.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	conns, err := TCPConns(0)
	if err != nil {
		t.Fatal(err)
	}
	if out, in := CountConns(conns, port, true), CountConns(conns, port, false); out != 1 || in != 1 {
		t.Errorf("to port %d: %d outbound, %d inbound; want 1 and 1 (%v)", port, out, in, conns)
	}
}
