package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestServerHealthCollector(t *testing.T) {
	servers := map[string]bool{"https://192.0.2.10:6443": true, "https://192.0.2.11:6443": false}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewServerHealthCollector(func(fn func(cluster, endpoint string, healthy bool)) {
		for e, h := range servers {
			fn("member-a", e, h)
		}
	}))
	want := `
# HELP kube_gateway_upstream_server_healthy Whether an enabled server of a member cluster receives requests (1) or not (0), as this gateway replica sees it.
# TYPE kube_gateway_upstream_server_healthy gauge
kube_gateway_upstream_server_healthy{cluster="member-a",endpoint="https://192.0.2.10:6443"} 1
kube_gateway_upstream_server_healthy{cluster="member-a",endpoint="https://192.0.2.11:6443"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), ServerHealthyName); err != nil {
		t.Fatal(err)
	}
	// Read at each scrape: a removed server has no series any more.
	delete(servers, "https://192.0.2.11:6443")
	if n, err := testutil.GatherAndCount(reg, ServerHealthyName); err != nil || n != 1 {
		t.Fatalf("%d series (%v) after a server was removed, want 1", n, err)
	}
}
