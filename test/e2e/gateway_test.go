package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kubewharf/kube-gateway/proxy/metrics"
)

// gatewayClient calls the gateway directly; with the front-proxy certificate it
// is trusted to assert identities in X-Remote-* headers, as the hub is.
func gatewayClient(t *testing.T, frontProxy bool) *http.Client {
	t.Helper()
	caPEM, err := os.ReadFile(env.GatewayCAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if frontProxy {
		cert, err := tls.LoadX509KeyPair(env.FrontProxyClientCert())
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

func gatewayGet(t *testing.T, c *http.Client, path string, header http.Header) (int, string) {
	t.Helper()
	return gatewayDo(context.Background(), t, c, env.GatewayURL, path, header)
}

// gatewayCounter scrapes the gateway's /metrics as the hub's admin and returns
// the value of counter name's series with exactly labels (0 when there is none).
func gatewayCounter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	admin := http.Header{"X-Remote-User": {"admin"}, "X-Remote-Group": {"system:masters"}}
	code, body := gatewayGet(t, gatewayClient(t, true), "/metrics", admin)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	v, _ := seriesValue(t, body, name, labels)
	return v
}

// seriesValue returns the value of the series of name with exactly labels
// (counter or gauge) in body, the text of a /metrics scrape, and whether there
// is one.
func seriesValue(t *testing.T, body, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
series:
	for _, m := range families[name].GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		for _, l := range m.GetLabel() {
			if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
				continue series
			}
		}
		if m.GetGauge() != nil {
			return m.GetGauge().GetValue(), true
		}
		return m.GetCounter().GetValue(), true
	}
	return 0, false
}

// The gateway's health endpoints answer anyone (probes carry no credentials);
// its metrics need an authorized user.
func TestGatewayHealthAndMetrics(t *testing.T) {
	anonymous := gatewayClient(t, false)
	for _, path := range []string{"/healthz", "/livez", "/readyz"} {
		if code, body := gatewayGet(t, anonymous, path, nil); code != http.StatusOK || body != "ok" {
			t.Errorf("GET %s: %d %q", path, code, body)
		}
	}
	code, body := gatewayGet(t, anonymous, "/readyz?verbose", nil)
	for _, check := range []string{"upstreamclusters-loaded", "front-proxy-ca-loaded"} {
		if code != http.StatusOK || !strings.Contains(body, "[+]"+check+" ok") {
			t.Errorf("readyz does not report %s: %d %s", check, code, body)
		}
	}

	if code, _ := gatewayGet(t, anonymous, "/metrics", nil); code != http.StatusForbidden {
		t.Errorf("anonymous GET /metrics: %d, want 403", code)
	}
	admin := http.Header{"X-Remote-User": {"admin"}, "X-Remote-Group": {"system:masters"}}
	code, body = gatewayGet(t, gatewayClient(t, true), "/metrics", admin)
	if code != http.StatusOK || !strings.Contains(body, "apiserver_request_total") {
		t.Fatalf("GET /metrics as the hub's admin: %d (%d bytes)", code, len(body))
	}
	// The suite's gateway probes over the pooled connections only.
	pooled, okPooled := seriesValue(t, body, metrics.HealthProbesName, map[string]string{"connection": metrics.ConnectionPooled})
	own, okOwn := seriesValue(t, body, metrics.HealthProbesName, map[string]string{"connection": metrics.ConnectionNew})
	if !okPooled || !okOwn || pooled == 0 || own != 0 {
		t.Errorf("%s: pooled %v (%v), new %v (%v); want probes over pooled connections only", metrics.HealthProbesName, pooled, okPooled, own, okOwn)
	}
}
