package health

import (
	"context"
	"encoding/pem"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"testing"

	"k8s.io/utils/clock"

	"github.com/kubewharf/kube-gateway/proxy/balance"
	"github.com/kubewharf/kube-gateway/proxy/transport"
)

// BenchmarkProbe sends one probe at a time over the gateway's pooled HTTP/2
// transport to a TLS server in the same process (its share is in ns/op and
// allocs/op too): the cost of an idle cluster's probe.
func BenchmarkProbe(b *testing.B) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	b.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	tr, err := transport.New(transport.Config{CAData: ca, BearerToken: testToken})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(tr.CloseIdleConnections)
	ep := balance.NewEndpoint(u)
	ep.Transports = tr
	probe := func(e *balance.Endpoint) http.RoundTripper { return e.Transports.ProbeWhile(e.BusyWithin, nil) }
	c := NewChecker([]*balance.Endpoint{ep}, probe, testConfig, clock.RealClock{}, nil)
	var failed int
	c.probed = func(_ *balance.Endpoint, ok bool) {
		if !ok {
			failed++
		}
	}
	ctx := context.Background()
	s := c.endpoints[0]
	c.probeOnce(ctx, s) // the connection
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		c.probeOnce(ctx, s)
	}
	b.StopTimer()
	if failed > 0 {
		b.Fatalf("%d probes failed", failed)
	}
}

// The probe is built once, with the credential of the cluster's transports
// on it: each probe carries it without a copy of the request, and the
// servers of one cluster share the headers, which no probe changes.
func TestProbeAuthorizedOnce(t *testing.T) {
	a, b := newMember(t), newMember(t)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw})
	builder, err := transport.NewBuilder(transport.Config{CAData: ca, BearerToken: testToken})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*member{a, b} {
		m.ep.Transports = builder.New()
		t.Cleanup(m.ep.Transports.CloseIdleConnections)
	}
	probe := func(e *balance.Endpoint) http.RoundTripper { return e.Transports.ProbeWhile(e.BusyWithin, nil) }
	c := NewChecker([]*balance.Endpoint{a.ep, b.ep}, probe, testConfig, clock.RealClock{}, nil)
	results := map[bool]int{}
	c.probed = func(_ *balance.Endpoint, ok bool) { results[ok]++ }
	for range 3 {
		for _, s := range c.endpoints {
			c.probeOnce(context.Background(), s)
		}
	}
	if results[true] != 6 {
		t.Fatalf("probe results %v, want 6 answered (the members refuse a probe without the credential)", results)
	}
	want := http.Header{"Accept": {"text/plain, */*"}, "Authorization": {"Bearer " + testToken}}
	for _, s := range c.endpoints {
		if !maps.EqualFunc(s.request.Header, want, slices.Equal) {
			t.Errorf("probe headers of %s %v, want %v", s.name, s.request.Header, want)
		}
	}
	if reflect.ValueOf(c.endpoints[0].request.Header).UnsafePointer() != reflect.ValueOf(c.endpoints[1].request.Header).UnsafePointer() {
		t.Error("the servers of one cluster have probe headers of their own")
	}
}
