package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/kubewharf/kube-gateway/test/harness"
)

// collector is an OTLP trace receiver (gRPC, what k8s.io/component-base's
// tracing exports to) that keeps every span it receives.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracev1.Span
}

func (c *collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			c.spans = append(c.spans, ss.GetSpans()...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (c *collector) find(traceID, parentID []byte) *tracev1.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.spans {
		if bytes.Equal(s.GetTraceId(), traceID) && bytes.Equal(s.GetParentSpanId(), parentID) {
			return s
		}
	}
	return nil
}

// With --tracing-config-file, a proxied request is traced: the gateway's server
// span continues the caller's trace (for a privileged caller, as the hub's
// front proxy forwards it) and is exported. That the member receives the
// gateway's trace context is checked in proxy/forward's unit tests: a member
// kube-apiserver shows it only in its own exported spans.
func TestTracingCoversProxiedRequests(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &collector{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, col)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)

	config := filepath.Join(t.TempDir(), "tracing.yaml")
	if err := os.WriteFile(config, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\nendpoint: "+
		l.Addr().String()+"\nsamplingRatePerMillion: 1000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw, url, err := env.StartExtraGateway(ctx, "kube-gateway-traced", "--tracing-config-file="+config)
	t.Cleanup(func() { _ = gw.Stop() })
	if err != nil {
		t.Fatal(err)
	}

	traceID, _ := hex.DecodeString("4bf92f3577b34da6a3ce929d0e0e4736")
	parentID, _ := hex.DecodeString("00f067aa0ba902b7")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+harness.ProxyPath(harness.MemberA)+"/api/v1/namespaces/default/configmaps", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Traceparent", "00-"+hex.EncodeToString(traceID)+"-"+hex.EncodeToString(parentID)+"-01")
	req.Header.Set("X-Remote-User", harness.UserAdmin)
	req.Header["X-Remote-Group"] = harness.AdminGroups()
	resp, err := gatewayClient(t, true).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("proxied GET: %s: %s", resp.Status, body)
	}

	// Spans are exported in batches (every 5 s by default).
	var span *tracev1.Span
	eventually(t, 30*time.Second, func(context.Context) error {
		if span = col.find(traceID, parentID); span == nil {
			return errorf("no span of the proxied request in the caller's trace yet")
		}
		return nil
	})
	if span.GetKind() != tracev1.Span_SPAN_KIND_SERVER {
		t.Errorf("span %q is of kind %v, want a server span", span.GetName(), span.GetKind())
	}
	t.Logf("span %q", span.GetName())
}
