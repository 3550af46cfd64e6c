package e2e

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/health"
	"github.com/kubewharf/kube-gateway/proxy/metrics"
	"github.com/kubewharf/kube-gateway/test/faultproxy"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// probeCounts are one replica's health probe counters: sent, and skipped
// because another replica owns the cluster or because of traffic.
type probeCounts struct{ sent, notOwner, traffic float64 }

func (c probeCounts) due() float64 { return c.sent + c.notOwner + c.traffic }

func readProbeCounts(ctx context.Context, g extraGatewayClient) probeCounts {
	pooled, _ := g.metric(ctx, metrics.HealthProbesName, map[string]string{"connection": metrics.ConnectionPooled})
	own, _ := g.metric(ctx, metrics.HealthProbesName, map[string]string{"connection": metrics.ConnectionNew})
	notOwner, _ := g.metric(ctx, metrics.HealthProbesSkippedName, map[string]string{"reason": health.SkipNotOwner})
	traffic, _ := g.metric(ctx, metrics.HealthProbesSkippedName, map[string]string{"reason": health.SkipTraffic})
	return probeCounts{sent: pooled + own, notOwner: notOwner, traffic: traffic}
}

// probesPerServer measures, over the replicas gws, how many probes each
// member server gets per health check interval from them together: a
// replica's due probes are one per server and interval, so the probes all
// sent divided by the due ones of a replica counted over the whole window
// (the most) is it. The window is the time the replicas take to reach
// minDue due probes together.
func probesPerServer(ctx context.Context, t *testing.T, minDue float64, gws ...extraGatewayClient) float64 {
	t.Helper()
	before := make([]probeCounts, len(gws))
	for i, g := range gws {
		before[i] = readProbeCounts(ctx, g)
	}
	return probesPerServerSince(ctx, t, minDue, before, gws...)
}

// probesPerServerSince is probesPerServer from the counts before (zero for
// a replica counted from its start).
func probesPerServerSince(ctx context.Context, t *testing.T, minDue float64, before []probeCounts, gws ...extraGatewayClient) float64 {
	t.Helper()
	var sent, due, most float64
	eventually(t, 2*time.Minute, func(ctx context.Context) error {
		sent, due, most = 0, 0, 0
		for i, g := range gws {
			c := readProbeCounts(ctx, g)
			sent += c.sent - before[i].sent
			d := c.due() - before[i].due()
			due += d
			most = max(most, d)
		}
		if due < minDue {
			return errorf("%v due probes over %d replicas, waiting for %v", due, len(gws), minDue)
		}
		return nil
	})
	return sent / most
}

// Three replicas sharing health checks probe each member server about once
// per interval between them, not three times; when one dies (SIGKILL: its
// Lease stays until it expires), the two others take its clusters over
// within a Lease lifetime, and each server is still probed once; when a
// replica joins, counted from its start, still about once.
//
// The replicas are gateways of the test's own, in a replica group of their
// own; they compile every UpstreamCluster of the suite, and the probe
// counters cover all of them.
func TestHealthChecksSharedAcrossReplicas(t *testing.T) {
	const group = "health-share-e2e-status"
	ctx := testContext(t, 5*time.Minute)
	grantReplicaLeases(ctx, t)
	// Clusters enough that every replica owns some (each owns none with
	// odds of (2/3)^20): 40 servers, 2 probed per cluster.
	for i := range 20 {
		createCluster(t, memberACluster(fmt.Sprintf("health-share-%d", i)))
	}

	var gws [3]extraGatewayClient
	var procs [3]*harness.Process
	for i := range gws {
		p, url, err := env.StartExtraGateway(ctx, fmt.Sprintf("kube-gateway-health-share-%d", i), "--status-lease-name="+group)
		t.Cleanup(func() { _ = p.Stop() })
		if err != nil {
			t.Fatal(err)
		}
		procs[i] = p
		gws[i] = extraGatewayClient{t: t, url: url, c: gatewayClient(t, true)}
	}
	waitReplicas := func(within time.Duration, want float64, gws ...extraGatewayClient) {
		t.Helper()
		eventually(t, within, func(ctx context.Context) error {
			for i, g := range gws {
				if v, _ := g.metric(ctx, "kube_gateway_replicas", nil); v != want {
					return errorf("replica %d counts %v replicas, want %v", i, v, want)
				}
			}
			return nil
		})
	}
	waitReplicas(30*time.Second, 3, gws[:]...)
	// Each replica has as many due probes per interval as the suite has
	// enabled servers: 40 and more, so a few intervals.
	const minDue = 400
	three := probesPerServer(ctx, t, minDue, gws[:]...)
	t.Logf("3 replicas sharing health checks: %.2f probes per server per interval (3 without sharing)", three)
	if three < 0.8 || three > 1.25 {
		t.Fatalf("3 replicas sharing health checks probe each server %.2f times per interval, want about 1", three)
	}

	// A server that fails its probes is taken out by every replica: by the
	// owner's probes, by the others from the published verdict (status),
	// before any request reached them; requests then go to the other server
	// through every replica, none retried off the bad one. Probes passing
	// again bring it back everywhere.
	bad := faultyReplica(t, faultproxy.Mode{Garbage: true})
	uc := faultCluster("health-share-verdict", bad)
	uc.Spec.HealthCheck = &gatewayv1alpha1.HealthCheck{Path: "/readyz", IntervalSeconds: 2, TimeoutSeconds: 1, UnhealthyThreshold: 1, HealthyThreshold: 1}
	createCluster(t, uc)
	target := faultTarget(ctx, t)
	healthy := map[string]string{"cluster": uc.Name, "endpoint": bad.URL()}
	everyReplica := func(what string, want float64) {
		t.Helper()
		// The test's context: a scrape cut by the poll's deadline would fail
		// the test without saying which replica disagrees.
		eventually(t, 30*time.Second, func(context.Context) error {
			for i, g := range gws {
				if v, ok := g.metric(ctx, "kube_gateway_upstream_server_healthy", healthy); !ok || v != want {
					return errorf("replica %d: kube_gateway_upstream_server_healthy%v = %v (present %v), want %v: %s", i, healthy, v, ok, want, what)
				}
			}
			return nil
		})
	}
	everyReplica("the bad server taken out", 0)
	for i, g := range gws {
		g.prefix = harness.ProxyPath(uc.Name)
		for range 10 {
			if code, body := g.proxy(ctx, http.MethodGet, "/api/v1/namespaces/"+harness.AliceNamespace+"/configmaps/"+target); code != http.StatusOK {
				t.Fatalf("GET through replica %d: %d %s", i, code, body)
			}
		}
		if n, _ := g.metric(ctx, "kube_gateway_proxy_retries_total", healthy); n != 0 {
			t.Errorf("replica %d retried %v requests off the bad server: it routed to a server the verdict took out", i, n)
		}
	}
	bad.Set(faultproxy.PassThrough)
	everyReplica("the server back once its probes pass", 1)

	// The replica dies without deleting its Lease: the others count it
	// until the Lease expires (15 s), then own its clusters.
	if err := procs[2].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitReplicas(30*time.Second, 2, gws[:2]...)
	two := probesPerServer(ctx, t, minDue, gws[:2]...)
	t.Logf("2 replicas after one died: %.2f probes per server per interval", two)
	if two < 0.8 || two > 1.25 {
		t.Fatalf("after a replica died, the other 2 probe each server %.2f times per interval, want about 1 (its clusters taken over)", two)
	}

	// A replica joins (the dead one's pod started again). Counted from its
	// start: once it sees the others' Leases it probes only what it owns,
	// once they see its Lease they stop probing that, and nothing goes
	// unprobed meanwhile.
	before := []probeCounts{readProbeCounts(ctx, gws[0]), readProbeCounts(ctx, gws[1]), {}}
	p, url, err := env.StartExtraGateway(ctx, "kube-gateway-health-share-joined", "--status-lease-name="+group)
	t.Cleanup(func() { _ = p.Stop() })
	if err != nil {
		t.Fatal(err)
	}
	gws[2] = extraGatewayClient{t: t, url: url, c: gatewayClient(t, true)}
	joined := probesPerServerSince(ctx, t, minDue, before, gws[:]...)
	t.Logf("3 replicas, counted from the third's start: %.2f probes per server per interval", joined)
	if joined < 0.8 || joined > 1.25 {
		t.Fatalf("while a replica joined, the 3 probed each server %.2f times per interval, want about 1", joined)
	}
	waitReplicas(30*time.Second, 3, gws[:]...)
}
