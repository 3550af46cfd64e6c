package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/faultproxy"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// Member-a's second replica behind a fault proxy: the UpstreamClusters of these
// tests list the first replica directly and the second through the proxy (its
// serving certificate is valid for 127.0.0.1, where the proxy listens).

// slowLatency is what the proxy adds to every answer of the slow server.
const slowLatency = 2 * time.Second

// faultProbes keep active health checking out of the way: a probe passes
// through the latency (timeout above it), probes are rare, and an ejected
// server needs several of them to come back, so that what these tests see is
// the passive failures of real requests.
var faultProbes = &gatewayv1alpha1.HealthCheck{Path: "/readyz", IntervalSeconds: 30, TimeoutSeconds: 10, UnhealthyThreshold: 2, HealthyThreshold: 3}

// faultyReplica starts a fault proxy in front of member-a's second replica.
func faultyReplica(t *testing.T, mode faultproxy.Mode) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(strings.TrimPrefix(env.Members[harness.MemberA].Servers[1].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	p.Set(mode)
	return p
}

// faultCluster is an UpstreamCluster of member-a's first replica and p.
func faultCluster(name string, p *faultproxy.Proxy) *gatewayv1alpha1.UpstreamCluster {
	uc := memberACluster(name)
	uc.Spec.Servers = []gatewayv1alpha1.UpstreamServer{{Endpoint: env.Members[harness.MemberA].Servers[0].URL}, {Endpoint: p.URL()}}
	uc.Spec.HealthCheck = faultProbes
	return uc
}

// allRequests matches every request.
var allRequests = []gatewayv1alpha1.DispatchPolicyRule{
	{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
	{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
}

// faultTarget is a ConfigMap of alice's on member-a for GETs.
func faultTarget(ctx context.Context, t *testing.T) string {
	t.Helper()
	target := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "faults-target"}}
	if _, err := memberA(t).CoreV1().ConfigMaps(harness.AliceNamespace).Create(ctx, target, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return target.Name
}

// With LeastRequest, a server that answers slowly holds its requests longer
// and so gets (almost) none of a concurrent load: every request succeeds, and
// the slow replica's audit log shows a small share.
func TestSlowServerLeastRequest(t *testing.T) {
	replicas := env.Members[harness.MemberA].Servers
	slow := faultyReplica(t, faultproxy.Mode{Latency: slowLatency})
	uc := faultCluster("slow-least-request", slow)
	uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{Name: "all", Rules: allRequests, Strategy: gatewayv1alpha1.LeastRequest}}
	createCluster(t, uc)
	waitUsable(t, uc.Name)
	ctx := testContext(t, 2*time.Minute)
	target := faultTarget(ctx, t)

	before := [2]int{auditCount(t, replicas[0], "get", "configmaps", "alice"), auditCount(t, replicas[1], "get", "configmaps", "alice")}
	// No client-side rate limit: at client-go's default 5/s, the fast server
	// would be idle between requests too, and every pick a tie.
	cfg := env.ProxyConfig(harness.UserAlice, uc.Name)
	cfg.QPS, cfg.Burst = -1, 0
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Four clients share n GETs: the load stays concurrent to the end (a
	// client left alone would find both servers idle at every pick, a tie).
	const workers, n = 4, 200
	var next atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= n {
				if _, err := c.CoreV1().ConfigMaps(harness.AliceNamespace).Get(ctx, target, metav1.GetOptions{}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a GET failed: %v", err)
	}
	eventually(t, 10*time.Second, func(context.Context) error {
		fast := auditCount(t, replicas[0], "get", "configmaps", "alice") - before[0]
		slowServed := auditCount(t, replicas[1], "get", "configmaps", "alice") - before[1]
		if fast+slowServed != n {
			return errorf("the replicas' audit logs show %d + %d GETs, want %d", fast, slowServed, n)
		}
		// Round robin would give it n/2.
		if slowServed > n/10 {
			return errorf("the slow server got %d of %d GETs with LeastRequest, want at most %d", slowServed, n, n/10)
		}
		t.Logf("LeastRequest: the slow server got %d of %d GETs", slowServed, n)
		return nil
	})
}

// extraGatewayClient sends requests to a gateway started by the test, as the
// hub's front proxy would for the hub's admin.
type extraGatewayClient struct {
	t      *testing.T
	url    string // the gateway's
	prefix string // the proxy path of the cluster
	c      *http.Client
}

// proxy sends a request for the member path to the cluster.
func (g extraGatewayClient) proxy(ctx context.Context, method, path string) (int, string) {
	g.t.Helper()
	return g.do(ctx, method, g.prefix+path)
}

func (g extraGatewayClient) do(ctx context.Context, method, path string) (int, string) {
	g.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, g.url+path, nil)
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header = harness.AdminFrontProxyHeader()
	resp, err := g.c.Do(req)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// metric returns the value of the series of name with exactly labels on the
// gateway (counter or gauge), and whether there is one.
func (g extraGatewayClient) metric(ctx context.Context, name string, labels map[string]string) (float64, bool) {
	g.t.Helper()
	code, body := g.do(ctx, http.MethodGet, "/metrics")
	if code != http.StatusOK {
		g.t.Fatalf("GET /metrics: %d %s", code, body)
	}
	return seriesValue(g.t, body, name, labels)
}

// With round robin, a server slower than --member-response-header-timeout
// fails the requests that are not long-running: GETs are retried on the other
// server and succeed, a GET with no other server to try gets a 504 naming the
// server and the timeout, the timeouts eject the server (passive failures), and
// later requests all go to the healthy one. Watches are not bounded: one on the
// slow server is established although its headers come after the timeout.
//
// A gateway of the test's own runs with a 1s timeout; the hub's gateway holds
// the status Lease, so the ejection is read from this gateway's
// kube_gateway_upstream_server_healthy (its own view), not from the status.
func TestSlowServerTimesOut(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	const timeout = time.Second
	gw, url, err := env.StartExtraGateway(ctx, "kube-gateway-faults", "--member-response-header-timeout="+timeout.String())
	t.Cleanup(func() { _ = gw.Stop() })
	if err != nil {
		t.Fatal(err)
	}
	replicas := env.Members[harness.MemberA].Servers
	slow := faultyReplica(t, faultproxy.PassThrough)
	uc := faultCluster("slow-round-robin", slow)
	// /version has only the slow server to go to.
	uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{
		Name:           "version-on-the-slow-server",
		Rules:          []gatewayv1alpha1.DispatchPolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/version"}}},
		UpstreamSubset: []string{slow.URL()},
	}}
	createCluster(t, uc)
	target := faultTarget(ctx, t)
	g := extraGatewayClient{t: t, url: url, prefix: harness.ProxyPath(uc.Name), c: gatewayClient(t, true)}
	get := "/api/v1/namespaces/alice/configmaps/" + target
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		for _, path := range []string{"/version", get} {
			if code, body := g.proxy(ctx, http.MethodGet, path); code != http.StatusOK {
				return errorf("GET %s before the server is slow: %d %s", path, code, body)
			}
		}
		return nil
	})

	slow.Set(faultproxy.Mode{Latency: slowLatency})

	// Two watches: round robin puts one on each server; both are established.
	watchesBefore := auditCount(t, replicas[1], "watch", "configmaps", harness.UserAdmin)
	for i := 0; i < 2; i++ {
		if code, body := g.proxy(ctx, http.MethodGet, "/api/v1/namespaces/alice/configmaps?watch=true&timeoutSeconds=1"); code != http.StatusOK {
			t.Fatalf("watch %d: %d %s, want 200: watches are not bounded by the header timeout", i, code, body)
		}
	}
	eventually(t, 10*time.Second, func(context.Context) error {
		if n := auditCount(t, replicas[1], "watch", "configmaps", harness.UserAdmin) - watchesBefore; n != 1 {
			return errorf("the slow replica served %d of the 2 watches, want 1", n)
		}
		return nil
	})

	// No other server to retry on: 504.
	code, body := g.proxy(ctx, http.MethodGet, "/version")
	if code != http.StatusGatewayTimeout || !strings.Contains(body, `"reason":"Timeout"`) ||
		!strings.Contains(body, "server "+strings.TrimPrefix(slow.URL(), "https://")) || !strings.Contains(body, "no response headers within "+timeout.String()) {
		t.Fatalf("GET /version of the slow server only: %d %s, want a 504 Timeout naming the server and the timeout", code, body)
	}

	// GETs over both: all succeed; the timeouts eject the slow server.
	healthy := map[string]string{"cluster": uc.Name, "endpoint": slow.URL()}
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		if code, body := g.proxy(ctx, http.MethodGet, get); code != http.StatusOK {
			t.Fatalf("GET with the slow server in rotation: %d %s, want 200 (retried on the other)", code, body)
		}
		if v, ok := g.metric(ctx, "kube_gateway_upstream_server_healthy", healthy); !ok || v != 0 {
			return errorf("kube_gateway_upstream_server_healthy%v = %v (present %v), want 0", healthy, v, ok)
		}
		return nil
	})
	retries := map[string]string{"cluster": uc.Name, "endpoint": slow.URL()}
	retried, _ := g.metric(ctx, "kube_gateway_proxy_retries_total", retries)
	if retried < 1 {
		t.Fatalf("kube_gateway_proxy_retries_total%v = %v, want at least 1", retries, retried)
	}
	// Ejected: the next GETs go to the healthy server only, none waits for
	// the slow one.
	slowBefore := auditCount(t, replicas[1], "get", "configmaps", harness.UserAdmin)
	for i := 0; i < 10; i++ {
		if code, body := g.proxy(ctx, http.MethodGet, get); code != http.StatusOK {
			t.Fatalf("GET %d after the ejection: %d %s", i, code, body)
		}
	}
	if now, _ := g.metric(ctx, "kube_gateway_proxy_retries_total", retries); now != retried {
		t.Fatalf("retries because of the ejected server went from %v to %v: requests still go to it", retried, now)
	}
	if n := auditCount(t, replicas[1], "get", "configmaps", harness.UserAdmin) - slowBefore; n != 0 {
		t.Fatalf("the ejected server still got %d GETs", n)
	}
}

// bigNamespace holds enough ConfigMaps on member-a for a LIST of a few MB.
const bigNamespace = "faults-big"

// bigList fills bigNamespace with n ConfigMaps of random (incompressible) data.
func bigList(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	member := memberA(t)
	if _, err := member.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: bigNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = member.CoreV1().Namespaces().Delete(context.Background(), bigNamespace, metav1.DeleteOptions{})
	})
	for i := 0; i < n; i++ {
		data := make([]byte, 48<<10)
		_, _ = rand.Read(data)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%d", i)}, Data: map[string]string{"data": base64.StdEncoding.EncodeToString(data)}}
		if _, err := member.CoreV1().ConfigMaps(bigNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// waitUnhealthyStatus waits until the status of cluster (written by the hub's
// gateway, which holds the status Lease) shows endpoint unhealthy with a
// message that contains message, and returns its reason.
func waitUnhealthyStatus(t *testing.T, cluster, endpoint, message string) string {
	t.Helper()
	var reason string
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		uc, err := upstreamClusters(t).Get(ctx, cluster, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, s := range uc.Status.Servers {
			if s.Endpoint != endpoint {
				continue
			}
			if s.Healthy == nil || *s.Healthy || !strings.Contains(s.Message, message) {
				return errorf("status of %s: healthy=%s (%s: %s), want false with %q", endpoint, healthyString(s.Healthy), s.Reason, s.Message, message)
			}
			reason = s.Reason
			t.Logf("status of %s: %s: %s", endpoint, s.Reason, s.Message)
			return nil
		}
		return errorf("status has no entry for %s: %+v", endpoint, uc.Status)
	})
	return reason
}

// A server that answers TLS with garbage: GETs are retried on the other server
// and succeed; a request that cannot be retried gets a 502 naming the server
// and the TLS error; the server is ejected, and the status and an
// EndpointUnhealthy Event say why.
func TestBrokenServerGarbage(t *testing.T) {
	broken := faultyReplica(t, faultproxy.Mode{Garbage: true})
	uc := faultCluster("broken-garbage", broken)
	// Three failures to go out: the first probe and a GET or two leave it in
	// rotation long enough for a GET to be retried.
	probes := *faultProbes
	probes.UnhealthyThreshold = 3
	uc.Spec.HealthCheck = &probes
	// POSTs of ConfigMaps can only go to the broken server.
	uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{
		Name:           "creates-on-the-broken-server",
		Rules:          []gatewayv1alpha1.DispatchPolicyRule{{Verbs: []string{"create"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}},
		UpstreamSubset: []string{broken.URL()},
	}}
	createCluster(t, uc)
	waitUsable(t, uc.Name)
	ctx := testContext(t, 2*time.Minute)
	target := faultTarget(ctx, t)
	c := proxyClient(t, harness.UserAlice, uc.Name)
	const tlsError = "first record does not look like a TLS handshake"

	retries := map[string]string{"cluster": uc.Name, "endpoint": broken.URL()}
	for i := 0; i < 4; i++ {
		if _, err := c.CoreV1().ConfigMaps(harness.AliceNamespace).Get(ctx, target, metav1.GetOptions{}); err != nil {
			t.Fatalf("GET %d: %v, want success (retried on the other server)", i, err)
		}
	}
	if n := gatewayCounter(t, "kube_gateway_proxy_retries_total", retries); n < 1 {
		t.Fatalf("kube_gateway_proxy_retries_total%v = %v, want at least 1: GETs round robin sent to the broken server went to the other", retries, n)
	}
	_, err := c.CoreV1().ConfigMaps(harness.AliceNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "faults-"}}, metav1.CreateOptions{})
	status, ok := err.(apierrors.APIStatus)
	if !ok || status.Status().Code != http.StatusBadGateway ||
		!strings.Contains(status.Status().Message, "server "+strings.TrimPrefix(broken.URL(), "https://")) || !strings.Contains(status.Status().Message, tlsError) {
		t.Fatalf("POST to the broken server: %v, want a 502 naming the server and the TLS error", err)
	}
	reason := waitUnhealthyStatus(t, uc.Name, broken.URL(), tlsError)
	t.Logf("status reason of the broken server: %s", reason)
	waitDescribed(t, uc.Name, corev1.EventTypeWarning, "EndpointUnhealthy", "server "+broken.URL()+" is unhealthy")
}

// A server whose connection is reset in the middle of a large LIST: the client
// gets an error, never a short list that looks complete; the LIST is not
// retried (part of it was sent); the resets eject the server, and later LISTs
// are whole.
func TestBrokenServerResetMidResponse(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	const items = 24 // 24 x 64 KiB of base64: about 1.5 MB
	bigList(ctx, t, items)
	// Reset once the server sent 256 KiB on a connection: probes and small
	// requests pass, every LIST breaks off.
	broken := faultyReplica(t, faultproxy.Mode{ResetAfter: 256 << 10})
	uc := faultCluster("broken-reset", broken)
	// /version has only the broken server to go to.
	uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{
		Name:           "version-on-the-broken-server",
		Rules:          []gatewayv1alpha1.DispatchPolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/version"}}},
		UpstreamSubset: []string{broken.URL()},
	}}
	createCluster(t, uc)
	waitUsable(t, uc.Name)
	c := proxyClient(t, harness.UserAdmin, uc.Name)

	retries := map[string]string{"cluster": uc.Name, "endpoint": broken.URL()}
	retriedBefore := gatewayCounter(t, "kube_gateway_proxy_retries_total", retries)

	// kubectl fails, and prints no items: round robin sends one of the first
	// LISTs to the broken server.
	server := "--server=" + env.ProxyConfig(harness.UserAdmin, uc.Name).Host
	aborts := map[string]string{"cluster": uc.Name, "door": "hub", "policy": "", "schema": "", "verb": "list", "resource": "configmaps"}
	abortedBefore := gatewayCounter(t, "kube_gateway_proxy_request_aborts_total", aborts)
	kubectlFailed := false
	for i := 0; i < 4 && !kubectlFailed; i++ {
		stdout, _, err := env.Kubectl(ctx, "hub-admin", server, "get", "configmaps", "--namespace="+bigNamespace, "-o", "name")
		if err != nil {
			kubectlFailed = true
			t.Logf("kubectl get: %v", err)
			if stdout != "" {
				t.Fatalf("kubectl failed but printed %d lines", strings.Count(stdout, "\n"))
			}
			continue
		}
		if n := strings.Count(stdout, "\n"); n != items {
			t.Fatalf("kubectl get %d: %d of %d ConfigMaps without an error", i, n, items)
		}
	}
	if !kubectlFailed {
		t.Fatal("no kubectl LIST failed: the broken server got none of them, or the reset did not break them")
	}

	failed := 0
	for i := 0; i < 6; i++ {
		list, err := c.CoreV1().ConfigMaps(bigNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			failed++
			t.Logf("LIST %d: %v", i, err)
			continue
		}
		if len(list.Items) != items {
			t.Fatalf("LIST %d returned %d of %d items without an error", i, len(list.Items), items)
		}
	}
	if failed == 0 {
		t.Fatal("no LIST failed: the broken server got none of them, or the reset did not break them")
	}
	if n := gatewayCounter(t, "kube_gateway_proxy_retries_total", retries); n != retriedBefore {
		t.Fatalf("kube_gateway_proxy_retries_total%v went from %v to %v: a LIST was retried after part of it was sent", retries, retriedBefore, n)
	}
	// Every LIST that broke off is counted as aborted (the kubectl one too).
	if n := gatewayCounter(t, "kube_gateway_proxy_request_aborts_total", aborts); n-abortedBefore < float64(failed+1) {
		t.Fatalf("kube_gateway_proxy_request_aborts_total%v went from %v to %v, want at least %d more", aborts, abortedBefore, n, failed+1)
	}
	// Ejected by the broken LISTs themselves (passive failures): probes pass.
	waitUnhealthyStatus(t, uc.Name, broken.URL(), "")
	for i := 0; i < 4; i++ {
		list, err := c.CoreV1().ConfigMaps(bigNamespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != items {
			t.Fatalf("LIST %d after the ejection: %v", i, err)
		}
	}

	// Reset before the server answered anything, with no other server to
	// try: a 503 naming the server and the reset.
	broken.Set(faultproxy.Mode{ResetAfter: 1})
	resp, body := rawGet(ctx, t, harness.UserAdmin, uc.Name, "/version")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "server "+strings.TrimPrefix(broken.URL(), "https://")) ||
		!strings.Contains(string(body), "connection reset by peer") {
		t.Fatalf("GET /version of the broken server only: %s %s, want a 503 naming the server and the reset", resp.Status, body)
	}
}
