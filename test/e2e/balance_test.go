package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/metrics"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// fastHealthCheck notices a dead replica within seconds.
var fastHealthCheck = &gatewayv1alpha1.HealthCheck{Path: "/readyz", IntervalSeconds: 2, TimeoutSeconds: 1, UnhealthyThreshold: 2, HealthyThreshold: 1}

// Round robin over member-a's two replicas splits 1000 GETs evenly, as each
// replica's own audit log shows.
func TestRoundRobinSplitsEvenly(t *testing.T) {
	replicas := env.Members[harness.MemberA].Servers
	uc := memberACluster("round-robin")
	createCluster(t, uc)
	waitUsable(t, uc.Name)

	ctx := testContext(t, 2*time.Minute)
	target := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "round-robin-target"}}
	if _, err := memberA(t).CoreV1().ConfigMaps(harness.AliceNamespace).Create(ctx, target, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	before := [2]int{auditCount(t, replicas[0], "get", "configmaps", "alice"), auditCount(t, replicas[1], "get", "configmaps", "alice")}
	c := proxyClient(t, harness.UserAlice, uc.Name)
	const n = 1000
	for i := 0; i < n; i++ {
		if _, err := c.CoreV1().ConfigMaps(harness.AliceNamespace).Get(ctx, target.Name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, func(context.Context) error {
		first := auditCount(t, replicas[0], "get", "configmaps", "alice") - before[0]
		second := auditCount(t, replicas[1], "get", "configmaps", "alice") - before[1]
		if first+second != n || first < n/2-10 || first > n/2+10 {
			return errorf("replica 1 served %d, replica 2 served %d of %d GETs; want %d +- 10 each", first, second, n, n/2)
		}
		return nil
	})
}

// Under a steady load of GETs, one replica of member-a dies: no GET fails, the
// status shows the replica unhealthy within the configured thresholds, a watch
// on it ends and a new one succeeds; once restarted, traffic returns to it.
func TestFailover(t *testing.T) {
	replicas := env.Members[harness.MemberA].Servers
	victim := replicas[1]
	uc := memberACluster("failover")
	// Three failures take a server out: the broken watch is one and a new
	// watch on the dead replica can be another, so that at least one GET still
	// meets the dead replica and is retried (counted below).
	hc := *fastHealthCheck
	hc.UnhealthyThreshold = 3
	uc.Spec.HealthCheck = &hc
	createCluster(t, uc)
	waitUsable(t, uc.Name)
	ctx := testContext(t, 3*time.Minute)
	c := proxyClient(t, harness.UserAlice, uc.Name)

	// Two watches: round robin puts one on each replica.
	var watches []watch.Interface
	for i := 0; i < 2; i++ {
		w, err := c.CoreV1().ConfigMaps(harness.AliceNamespace).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		watches = append(watches, w)
	}

	// Steady load: 50 GETs per second until the test says stop.
	cfg := env.ProxyConfig(harness.UserAlice, uc.Name)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := cfg.Host + "/api/v1/namespaces/alice/configmaps"
	var failures atomic.Int64
	var requests atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			requests.Add(1)
			if resp, body, err := tryGet(ctx, httpClient, url); err != nil || resp.StatusCode != http.StatusOK {
				if failures.Add(1) == 1 {
					firstFailure.Store(fmt.Sprintf("%s %s %v", statusOf(resp), body, err))
				}
			}
		}
	}()
	stopLoad := func() {
		close(stop)
		wg.Wait()
	}

	// Let the load run on both replicas, then kill one.
	eventually(t, 10*time.Second, func(context.Context) error {
		if requests.Load() < 25 {
			return errorf("load not started")
		}
		return nil
	})
	// A crash, not a graceful shutdown.
	if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = victim.Process.Restart(context.Background())
		}
	})

	// One of the two watches ends with its replica.
	ended := make(chan struct{}, len(watches))
	for _, w := range watches {
		go func() {
			for range w.ResultChan() {
			}
			ended <- struct{}{}
		}()
	}
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("no watch ended when its replica died")
	}
	// GETs the dead replica failed before health checking took it out are
	// retried on the other one, and counted.
	retries := map[string]string{"cluster": uc.Name, "endpoint": victim.URL}
	eventually(t, 10*time.Second, func(context.Context) error {
		if n := gatewayCounter(t, "kube_gateway_proxy_retries_total", retries); n < 1 {
			return errorf("kube_gateway_proxy_retries_total{cluster=%q,endpoint=%q} = %v, want at least 1", uc.Name, victim.URL, n)
		}
		return nil
	})
	// A new watch succeeds (on the surviving replica).
	eventually(t, 20*time.Second, func(ctx context.Context) error {
		w, err := c.CoreV1().ConfigMaps(harness.AliceNamespace).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		w.Stop()
		return nil
	})

	// The status says so, within the thresholds: 3 failures 2 s apart (passive
	// failures come sooner), a 1 s probe timeout, the status write, slack.
	eventually(t, 15*time.Second-time.Since(killed), func(ctx context.Context) error {
		return serverHealth(ctx, t, uc.Name, victim.URL, false)
	})

	// Restart it: once it is ready, the next probe finds it healthy (one
	// success is enough) and it takes traffic again: within two intervals,
	// plus slack for the probe's own timeout, the audit log and a loaded CI
	// machine.
	servedBefore := auditCount(t, victim, "list", "configmaps", "alice")
	if err := victim.Process.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	interval := time.Duration(fastHealthCheck.IntervalSeconds) * time.Second
	eventually(t, 2*interval+5*time.Second, func(ctx context.Context) error {
		if err := serverHealth(ctx, t, uc.Name, victim.URL, true); err != nil {
			return err
		}
		if auditCount(t, victim, "list", "configmaps", "alice") == servedBefore {
			return errorf("the restarted replica gets no traffic yet")
		}
		return nil
	})
	stopLoad()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d of %d GETs failed during the failover; first: %v", n, requests.Load(), firstFailure.Load())
	}
	t.Logf("%d GETs, none failed", requests.Load())
}

// tryGet GETs url and reads the whole body; it does not end the test, so
// goroutines may use it.
func tryGet(ctx context.Context, c *http.Client, url string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

func statusOf(resp *http.Response) string {
	if resp == nil {
		return "no response"
	}
	return resp.Status
}

// serverHealth checks what the status of cluster says about endpoint.
func serverHealth(ctx context.Context, t *testing.T, cluster, endpoint string, healthy bool) error {
	uc, err := upstreamClusters(t).Get(ctx, cluster, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, s := range uc.Status.Servers {
		if s.Endpoint == endpoint {
			if s.Healthy == nil || *s.Healthy != healthy {
				return errorf("status of %s: healthy=%s (%s: %s), want %v", endpoint, healthyString(s.Healthy), s.Reason, s.Message, healthy)
			}
			return nil
		}
	}
	return errorf("status has no entry for %s: %+v", endpoint, uc.Status)
}

// 200 concurrent clients share a handful of connections to each member server.
func TestConnectionsArePooled(t *testing.T) {
	uc := memberACluster("pooled")
	createCluster(t, uc)
	waitUsable(t, uc.Name)
	ctx := testContext(t, time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 5; j++ {
				if resp, body := rawGet(ctx, t, harness.UserAlice, uc.Name, "/api/v1/namespaces/alice/configmaps"); resp.StatusCode != http.StatusOK {
					errs <- errorf("%s: %s", resp.Status, body)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, s := range env.Members[harness.MemberA].Servers {
		n, err := connectionsTo(env.Gateway.PID(), s.Port)
		if err != nil {
			t.Fatal(err)
		}
		// HTTP/2 multiplexes: a handful at most (probes and clusters share none
		// of the other tests' pools, which hold their own few).
		if n > 8 {
			t.Errorf("the gateway holds %d TCP connections to %s", n, s.URL)
		}
		t.Logf("gateway -> %s: %d TCP connections", s.URL, n)
	}
}

// A gateway run with --probe-with-new-connections probes over connections of
// their own and keeps none: a cluster nobody sent a request to holds no
// connection to its servers although they are probed and healthy; a proxied
// request opens the pooled connection, which stays for the next ones.
func TestProbesWithNewConnections(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	gw, url, err := env.StartExtraGateway(ctx, "kube-gateway-probe-connections", "--probe-with-new-connections")
	t.Cleanup(func() { _ = gw.Stop() })
	if err != nil {
		t.Fatal(err)
	}
	uc := memberACluster("probe-connections")
	createCluster(t, uc)
	g := extraGatewayClient{t: t, url: url, prefix: harness.ProxyPath(uc.Name), c: gatewayClient(t, true)}
	servers := env.Members[harness.MemberA].Servers
	// Healthy as this gateway sees it: its own probes answered.
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		for _, s := range servers {
			if v, ok := g.metric(ctx, metrics.ServerHealthyName, map[string]string{"cluster": uc.Name, "endpoint": s.URL}); !ok || v != 1 {
				return errorf("%s of %s is not healthy on the test's gateway yet (%v, %v)", s.URL, uc.Name, v, ok)
			}
		}
		return nil
	})
	// Every cluster of the suite is idle for this gateway: its probes open
	// connections of their own.
	if v, ok := g.metric(ctx, metrics.HealthProbesName, map[string]string{"connection": metrics.ConnectionNew}); !ok || v == 0 {
		t.Errorf("%s{connection=%q} = %v (%v) while every server is idle", metrics.HealthProbesName, metrics.ConnectionNew, v, ok)
	}
	// The gateway probes every cluster of the suite over new connections and
	// proxies nothing: it holds no connection to member-a, but for a probe in
	// flight at the moment of a look.
	toMemberA := func() int {
		n := 0
		for _, s := range servers {
			c, err := connectionsTo(gw.PID(), s.Port)
			if err != nil {
				t.Fatal(err)
			}
			n += c
		}
		return n
	}
	eventually(t, 30*time.Second, func(context.Context) error {
		if n := toMemberA(); n != 0 {
			return errorf("the gateway holds %d connections to member-a's servers without any request", n)
		}
		return nil
	})
	for i := 0; i < len(servers); i++ { // round robin: one request for each server
		if code, body := g.proxy(ctx, http.MethodGet, "/api/v1/namespaces/alice/configmaps"); code != http.StatusOK {
			t.Fatalf("GET through the test's gateway: %d %s", code, body)
		}
	}
	if n := toMemberA(); n < len(servers) {
		t.Errorf("after a request to each server the gateway holds %d connections to them, want the %d pooled ones", n, len(servers))
	}
	// Servers in use are probed over their pooled connection.
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		if v, ok := g.metric(ctx, metrics.HealthProbesName, map[string]string{"connection": metrics.ConnectionPooled}); !ok || v < float64(len(servers)) {
			return errorf("%s{connection=%q} = %v (%v): the servers in use were not probed over their pooled connections yet", metrics.HealthProbesName, metrics.ConnectionPooled, v, ok)
		}
		return nil
	})
}

// connectionsTo counts the established TCP connections of process pid to port
// on 127.0.0.1, from /proc: the socket inodes the process holds, matched with
// the kernel's TCP table.
func connectionsTo(pid, port int) (int, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	remote := fmt.Sprintf("0100007F:%04X", port)
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// sl local rem st ... inode
		if len(fields) < 10 || fields[2] != remote || fields[3] != "01" { // 01: ESTABLISHED
			continue
		}
		if inodes[fields[9]] {
			n++
		}
	}
	return n, sc.Err()
}

// healthyString prints status.servers[].healthy: true, false or unset.
func healthyString(healthy *bool) string {
	if healthy == nil {
		return "unset"
	}
	return fmt.Sprint(*healthy)
}
