package transport

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	proxyutil "k8s.io/apimachinery/pkg/util/proxy"
)

// Config.Dial opens every connection toward the server: ordinary requests,
// probes and upgrades alike (a konnectivity tunnel must carry all of them). The
// endpoint's host is a name only the dialer knows.
func TestDialCarriesEveryConnection(t *testing.T) {
	memberURL, caPEM := member(t, tls.VersionTLS12, tls.VersionTLS13)
	listener := strings.TrimPrefix(memberURL, "https://")
	var dials atomic.Int32
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		if address != "member.tunnel.invalid:6443" {
			t.Errorf("dialed %q, want the endpoint's host and port", address)
		}
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, listener)
	}
	tr, err := New(Config{CAData: caPEM, ServerName: "example.com", BearerToken: token, Dial: dial})
	if err != nil {
		t.Fatal(err)
	}
	const endpoint = "https://member.tunnel.invalid:6443"
	if err := probe(tr, endpoint); err != nil {
		t.Fatalf("probe: %v", err)
	}
	tr.CloseIdleConnections() // the next request dials again
	req, _ := http.NewRequest(http.MethodGet, endpoint+"/api", nil)
	resp, err := tr.Pooled.RoundTrip(req)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	resp.Body.Close()
	u, _ := url.Parse(endpoint + "/api/v1/namespaces/default/pods/p/exec")
	conn, err := proxyutil.DialURL(context.Background(), u, tr.upgrade)
	if err != nil {
		t.Fatalf("upgrade dial: %v", err)
	}
	conn.Close()
	if got := dials.Load(); got != 3 {
		t.Errorf("Config.Dial opened %d connections, want 3 (probe, pooled request, upgrade)", got)
	}
}
