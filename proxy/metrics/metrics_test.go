package metrics

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/component-base/metrics/legacyregistry"
)

func registered(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	m, reg := New(), prometheus.NewPedanticRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	return m, reg
}

func TestObserve(t *testing.T) {
	m, reg := registered(t)
	m.Observe(Series{Cluster: "member-a", Door: DoorHub, Policy: "list-pods", Schema: "tb"}, "list", "pods", 200, 30*time.Millisecond)
	m.Observe(Series{Cluster: "member-a", Door: DoorHub, Policy: "list-pods", Schema: "tb"}, "list", "pods", 200, 2*time.Second)
	m.Observe(Series{Cluster: "member-a", Door: DoorHub, Policy: "", Schema: ""}, "get", "pods/log", 404, 3*time.Millisecond)
	m.Observe(Series{Cluster: "member-b", Door: DoorMember, Policy: "", Schema: ""}, "get", "", 200, time.Millisecond) // non-resource, member door
	m.ObserveLongRunning(Series{Cluster: "member-a", Door: DoorHub, Policy: "watchers", Schema: ""}, "watch", "pods", 200)

	want := `
# HELP kube_gateway_proxy_requests_total Requests forwarded to a member cluster and finished, by the HTTP status code the client got.
# TYPE kube_gateway_proxy_requests_total counter
kube_gateway_proxy_requests_total{cluster="member-a",code="200",door="hub",policy="list-pods",resource="pods",schema="tb",verb="list"} 2
kube_gateway_proxy_requests_total{cluster="member-a",code="200",door="hub",policy="watchers",resource="pods",schema="",verb="watch"} 1
kube_gateway_proxy_requests_total{cluster="member-a",code="404",door="hub",policy="",resource="pods/log",schema="",verb="get"} 1
kube_gateway_proxy_requests_total{cluster="member-b",code="200",door="member",policy="",resource="",schema="",verb="get"} 1
# HELP kube_gateway_proxy_request_duration_seconds Duration of proxied requests that are not long-running (watch, exec, attach, port-forward, log follow are excluded).
# TYPE kube_gateway_proxy_request_duration_seconds histogram
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="",verb="get",le="0.005"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="",verb="get",le="0.01"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="",verb="get",le="0.025"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="",verb="get",le="0.05"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="",verb="get",le="0.1"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="",verb="get",le="0.25"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="",verb="get",le="0.5"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="",verb="get",le="1"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="",verb="get",le="2.5"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="",verb="get",le="5"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="",verb="get",le="10"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="",verb="get",le="30"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="",verb="get",le="60"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="",verb="get",le="+Inf"} 1
kube_gateway_proxy_request_duration_seconds_sum{cluster="member-a",door="hub",policy="",verb="get"} 0.003
kube_gateway_proxy_request_duration_seconds_count{cluster="member-a",door="hub",policy="",verb="get"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="list-pods",verb="list",le="0.005"} 0
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="list-pods",verb="list",le="0.01"} 0
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="list-pods",verb="list",le="0.025"} 0
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="list-pods",verb="list",le="0.05"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="list-pods",verb="list",le="0.1"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="list-pods",verb="list",le="0.25"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="list-pods",verb="list",le="0.5"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="list-pods",verb="list",le="1"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="list-pods",verb="list",le="2.5"} 2
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="list-pods",verb="list",le="5"} 2
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="list-pods",verb="list",le="10"} 2
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="list-pods",verb="list",le="30"} 2
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="list-pods",verb="list",le="60"} 2
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-a",door="hub",policy="list-pods",verb="list",le="+Inf"} 2
kube_gateway_proxy_request_duration_seconds_sum{cluster="member-a",door="hub",policy="list-pods",verb="list"} 2.03
kube_gateway_proxy_request_duration_seconds_count{cluster="member-a",door="hub",policy="list-pods",verb="list"} 2
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-b",door="member",policy="",verb="get",le="0.005"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-b",door="member",policy="",verb="get",le="0.01"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-b",door="member",policy="",verb="get",le="0.025"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-b",door="member",policy="",verb="get",le="0.05"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-b",door="member",policy="",verb="get",le="0.1"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-b",door="member",policy="",verb="get",le="0.25"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-b",door="member",policy="",verb="get",le="0.5"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-b",door="member",policy="",verb="get",le="1"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-b",door="member",policy="",verb="get",le="2.5"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-b",door="member",policy="",verb="get",le="5"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-b",door="member",policy="",verb="get",le="10"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-b",door="member",policy="",verb="get",le="30"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-b",door="member",policy="",verb="get",le="60"} 1
kube_gateway_proxy_request_duration_seconds_bucket{cluster="member-b",door="member",policy="",verb="get",le="+Inf"} 1
kube_gateway_proxy_request_duration_seconds_sum{cluster="member-b",door="member",policy="",verb="get"} 0.001
kube_gateway_proxy_request_duration_seconds_count{cluster="member-b",door="member",policy="",verb="get"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"kube_gateway_proxy_requests_total", "kube_gateway_proxy_request_duration_seconds"); err != nil {
		t.Fatal(err)
	}
	// The watch is counted but kept out of the histogram.
	if n := testutil.CollectAndCount(m.duration); n != 3 {
		t.Fatalf("%d histogram series, want 3 (no watch)", n)
	}
}

func TestInFlightAndRejected(t *testing.T) {
	m, reg := registered(t)
	g := m.InFlight(Series{Cluster: "member-a", Door: DoorHub, Policy: "heavy", Schema: "mif"})
	g.Inc()
	g.Inc()
	m.InFlight(Series{Cluster: "member-a", Door: DoorHub, Policy: "heavy", Schema: "mif"}).Inc()
	g.Dec()
	if v := testutil.ToFloat64(m.InFlight(Series{Cluster: "member-a", Door: DoorHub, Policy: "heavy", Schema: "mif"})); v != 2 {
		t.Fatalf("in flight = %v, want 2", v)
	}
	m.Rejected(Series{Cluster: "member-a", Door: DoorHub, Policy: "list-pods", Schema: "tb"}, ReasonTokenBucket)
	m.Rejected(Series{Cluster: "member-a", Door: DoorHub, Policy: "list-pods", Schema: "tb"}, ReasonTokenBucket)
	m.Rejected(Series{Cluster: "member-a", Door: DoorHub, Policy: "heavy", Schema: "mif"}, ReasonMaxInflight)
	m.Rejected(Series{Cluster: "member-b", Door: DoorHub, Policy: "", Schema: ""}, ReasonNoReadyServer)
	want := `
# HELP kube_gateway_proxy_inflight_requests Requests being forwarded to a member cluster, long-running ones included.
# TYPE kube_gateway_proxy_inflight_requests gauge
kube_gateway_proxy_inflight_requests{cluster="member-a",door="hub",policy="heavy",schema="mif"} 2
# HELP kube_gateway_proxy_rejected_requests_total Requests the gateway refused without forwarding them, by reason (TokenBucket, MaxInflight, NoReadyServer, LongRunningPerUser).
# TYPE kube_gateway_proxy_rejected_requests_total counter
kube_gateway_proxy_rejected_requests_total{cluster="member-a",door="hub",policy="heavy",reason="MaxInflight",schema="mif"} 1
kube_gateway_proxy_rejected_requests_total{cluster="member-a",door="hub",policy="list-pods",reason="TokenBucket",schema="tb"} 2
kube_gateway_proxy_rejected_requests_total{cluster="member-b",door="hub",policy="",reason="NoReadyServer",schema=""} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"kube_gateway_proxy_inflight_requests", "kube_gateway_proxy_rejected_requests_total"); err != nil {
		t.Fatal(err)
	}
}

func TestRetried(t *testing.T) {
	m, reg := registered(t)
	m.Retried("member-a", "https://10.0.0.1:6443")
	m.Retried("member-a", "https://10.0.0.1:6443")
	m.Retried("member-a", "https://10.0.0.2:6443")
	want := `
# HELP kube_gateway_proxy_retries_total Idempotent requests tried again on another server because this endpoint failed them before answering.
# TYPE kube_gateway_proxy_retries_total counter
kube_gateway_proxy_retries_total{cluster="member-a",endpoint="https://10.0.0.1:6443"} 2
kube_gateway_proxy_retries_total{cluster="member-a",endpoint="https://10.0.0.2:6443"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kube_gateway_proxy_retries_total"); err != nil {
		t.Fatal(err)
	}
}

func TestForgetCluster(t *testing.T) {
	m, reg := registered(t)
	for _, c := range []string{"member-a", "member-b"} {
		m.Observe(Series{Cluster: c, Door: DoorHub, Policy: "p", Schema: "s"}, "get", "pods", 200, time.Millisecond)
		m.ObserveLongRunning(Series{Cluster: c, Door: DoorHub, Policy: "p", Schema: "s"}, "watch", "pods", 200)
		m.InFlight(Series{Cluster: c, Door: DoorHub, Policy: "p", Schema: "s"}).Inc()
		m.Rejected(Series{Cluster: c, Door: DoorHub, Policy: "p", Schema: "s"}, ReasonTokenBucket)
		m.Retried(c, "https://192.0.2.1:6443")
	}
	m.ForgetCluster("member-a")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			n++
			for _, l := range metric.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() != "member-b" {
					t.Errorf("%s: a series of cluster %q is left", f.GetName(), l.GetValue())
				}
			}
		}
	}
	if n != 6 {
		t.Fatalf("%d series left, want member-b's 6", n)
	}
}

func TestLabelsBounded(t *testing.T) {
	m, _ := registered(t)
	// Unknown verbs, odd codes, invalid UTF-8 and long values do not panic and are
	// folded into <other>.
	m.Observe(Series{Cluster: "c", Door: DoorHub, Policy: "p", Schema: "s"}, "PROPFIND", "pods", 200, 0)
	m.Observe(Series{Cluster: "c", Door: DoorHub, Policy: "p", Schema: "s"}, "get", "pods", 7000, 0)
	m.Observe(Series{Cluster: "c", Door: DoorHub, Policy: "p", Schema: "s"}, "get", "pods\xff", 200, 0)
	m.Observe(Series{Cluster: "c", Door: DoorHub, Policy: "p", Schema: "s"}, "get", strings.Repeat("x", 200), 200, 0)
	m.Observe(Series{Cluster: "c\xff", Door: DoorHub, Policy: "p\xff", Schema: "s\xff"}, "get", "pods", 200, 0)
	m.Rejected(Series{Cluster: "c", Door: DoorHub, Policy: "p", Schema: "s"}, "\xff")
	m.InFlight(Series{Cluster: "\xff", Door: DoorHub, Policy: "p", Schema: "s"}).Inc()
	for _, tt := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"c", "hub", "p", "s", Other, "pods", "200"}, 1},
		{[]string{"c", "hub", "p", "s", "get", "pods", Other}, 1},
		{[]string{"c", "hub", "p", "s", "get", Other, "200"}, 2},
		{[]string{Other, "hub", Other, Other, "get", "pods", "200"}, 1},
	} {
		if v := testutil.ToFloat64(m.requests.WithLabelValues(tt.labels...)); v != tt.want {
			t.Errorf("requests_total%v = %v, want %v", tt.labels, v, tt.want)
		}
	}

	// At most MaxResourcesPerCluster resource values per cluster.
	for i := 0; i < MaxResourcesPerCluster+10; i++ {
		m.Observe(Series{Cluster: "flood", Door: DoorHub, Policy: "", Schema: ""}, "get", fmt.Sprint("res", i), 404, 0)
	}
	m.Observe(Series{Cluster: "flood", Door: DoorHub, Policy: "", Schema: ""}, "get", "res0", 200, 0) // known before the cap: kept
	if n := testutil.CollectAndCount(m.requests); n < MaxResourcesPerCluster {
		t.Fatalf("only %d series", n)
	}
	if v := testutil.ToFloat64(m.requests.WithLabelValues("flood", "hub", "", "", "get", Other, "404")); v != 10 {
		t.Errorf("resources beyond the cap: %v, want 10 in <other>", v)
	}
	if v := testutil.ToFloat64(m.requests.WithLabelValues("flood", "hub", "", "", "get", "res0", "200")); v != 1 {
		t.Errorf("a known resource was folded: %v", v)
	}
	// Other clusters have a budget of their own, and forgetting resets it.
	m.Observe(Series{Cluster: "other-cluster", Door: DoorHub, Policy: "", Schema: ""}, "get", "res5000", 200, 0)
	if v := testutil.ToFloat64(m.requests.WithLabelValues("other-cluster", "hub", "", "", "get", "res5000", "200")); v != 1 {
		t.Errorf("another cluster shares the cap: %v", v)
	}
	m.ForgetCluster("flood")
	m.Observe(Series{Cluster: "flood", Door: DoorHub, Policy: "", Schema: ""}, "get", "res5000", 200, 0)
	if v := testutil.ToFloat64(m.requests.WithLabelValues("flood", "hub", "", "", "get", "res5000", "200")); v != 1 {
		t.Errorf("ForgetCluster did not reset the resource cap: %v", v)
	}
}

func TestResourceLabel(t *testing.T) {
	for _, tt := range []struct {
		isResource            bool
		resource, subresource string
		want                  string
	}{
		{true, "pods", "", "pods"},
		{true, "pods", "log", "pods/log"},
		{true, "deployments", "scale", "deployments/scale"},
		{false, "", "", ""},
		{false, "healthz", "", ""},
	} {
		if got := ResourceLabel(tt.isResource, tt.resource, tt.subresource); got != tt.want {
			t.Errorf("ResourceLabel(%v, %q, %q) = %q, want %q", tt.isResource, tt.resource, tt.subresource, got, tt.want)
		}
	}
}

func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := New().Register(reg); err != nil {
		t.Fatal(err)
	}
	// A second Metrics clashes, and leaves nothing of itself registered.
	if err := New().Register(reg); err == nil {
		t.Fatal("registered twice")
	}

	reg = prometheus.NewRegistry()
	// The same metric from another collector (a prometheus.Registry remembers the
	// label names of a metric name even after Unregister, hence an exact copy).
	clash := New().inflight
	reg.MustRegister(clash)
	m := New()
	if err := m.Register(reg); err == nil {
		t.Fatal("no error on a clash")
	}
	reg.Unregister(clash)
	if err := m.Register(reg); err != nil {
		t.Fatalf("Register is not all-or-none: %v", err)
	}
}

// The server registers on the legacy registry that k8s.io/apiserver serves on
// /metrics.
func TestLegacyRegistry(t *testing.T) {
	m := New()
	if err := m.Register(legacyregistry.Registerer()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range m.collectors() {
			legacyregistry.Registerer().Unregister(c)
		}
	}()
	m.Rejected(Series{Cluster: "member-a", Door: DoorHub, Policy: "p", Schema: "s"}, ReasonMaxInflight)
	n, err := testutil.GatherAndCount(legacyregistry.DefaultGatherer, "kube_gateway_proxy_rejected_requests_total")
	if err != nil || n != 1 {
		t.Fatalf("legacy registry gathers %d series (%v), want 1", n, err)
	}
}

func TestConcurrent(t *testing.T) {
	m, reg := registered(t)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			c := fmt.Sprint("member-", g%2)
			for i := 0; i < 500; i++ {
				gauge := m.InFlight(Series{Cluster: c, Door: DoorHub, Policy: "p", Schema: "s"})
				gauge.Inc()
				m.Observe(Series{Cluster: c, Door: DoorHub, Policy: "p", Schema: "s"}, "get", fmt.Sprint("res", i%50), 200, time.Millisecond)
				gauge.Dec()
				if i%100 == 0 {
					m.ForgetCluster(c)
				}
			}
		}(g)
	}
	wg.Wait()
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkObserve(b *testing.B) {
	m := New()
	if err := m.Register(prometheus.NewRegistry()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		g := m.InFlight(Series{Cluster: "member-a", Door: DoorHub, Policy: "list-pods", Schema: "tb"})
		g.Inc()
		m.Observe(Series{Cluster: "member-a", Door: DoorHub, Policy: "list-pods", Schema: "tb"}, "list", "pods", 200, 20*time.Millisecond)
		g.Dec()
	}
}

func BenchmarkObserveParallel(b *testing.B) {
	m := New()
	if err := m.Register(prometheus.NewRegistry()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Observe(Series{Cluster: "member-a", Door: DoorHub, Policy: "list-pods", Schema: "tb"}, "list", "pods", 200, 20*time.Millisecond)
		}
	})
}
