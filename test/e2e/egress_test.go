package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/health"
	"github.com/kubewharf/kube-gateway/test/harness"
)

const egressProxyPassword = "egress-pass-5d1c"

// egressProbes judge a server in one or two seconds: the test watches health
// follow the proxy going down and coming back.
var egressProbes = &gatewayv1alpha1.HealthCheck{Path: "/readyz", IntervalSeconds: 2, TimeoutSeconds: 1, UnhealthyThreshold: 1, HealthyThreshold: 1}

// Members reached through a forward proxy (spec.clientConfig.proxyURL):
// tinyproxy with Basic authentication (HTTP CONNECT) and Dante (SOCKS5) carry
// kubectl get, watch, exec and port-forward to member-a (whose stand-in
// kubelet serves exec), as their own logs show. A wrong proxy password, and a
// proxy that is down, make the servers unhealthy with a status that names the
// proxy; the proxy back on its port makes them healthy again.
func TestEgressProxy(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	tiny, err := env.StartTinyproxy(ctx, "egress-tinyproxy", "gateway", egressProxyPassword)
	stopWithTest(t, tiny)
	if err != nil {
		t.Fatal(err)
	}
	dante, err := env.StartDante(ctx, "egress-dante")
	stopWithTest(t, dante)
	if err != nil {
		t.Fatal(err)
	}

	proxySecret(ctx, t, "egress-http", egressProxyPassword)
	proxySecret(ctx, t, "egress-badauth", "wrong-"+egressProxyPassword)
	viaHTTP := egressCluster(t, "egress-http", tiny.URL, "egress-http", 0)
	// On member-a's second server: tinyproxy logs the CONNECTs it refuses
	// too, and those must not count as the first server's.
	badAuth := egressCluster(t, "egress-badauth", tiny.URL, "egress-badauth", 1)
	viaSOCKS := egressCluster(t, "egress-socks5", dante.URL, harness.MemberA, 0) // no proxy keys
	endpoint := viaHTTP.Spec.Servers[0].Endpoint
	memberHost := strings.TrimPrefix(endpoint, "https://")

	t.Run("http", func(t *testing.T) {
		kc := aliceKubeconfig(t, viaHTTP.Name)
		// tinyproxy logs "Request (file descriptor N): CONNECT host:port HTTP/1.1".
		connects := regexp.MustCompile(`: CONNECT ` + regexp.QuoteMeta(memberHost) + ` HTTP/1\.1$`)
		egressGet(ctx, t, kc)
		kubectlWatchSeesCreates(ctx, t, kc, "egress-watched", 20*time.Second)
		// Exec and port-forward dial a connection of their own (upgrade):
		// one more CONNECT each.
		before := countLines(t, tiny.Process.LogFile, connects)
		egressExec(ctx, t, kc)
		afterExec := waitMoreLines(t, tiny.Process.LogFile, connects, before, "kubectl exec")
		portForwardEcho(t, ctx, kc, nil, 1)
		waitMoreLines(t, tiny.Process.LogFile, connects, afterExec, "kubectl port-forward")
	})

	t.Run("socks5", func(t *testing.T) {
		kc := aliceKubeconfig(t, viaSOCKS.Name)
		// Dante logs the start of a session as "tcp/connect [: CLIENT PROXY ->
		// EXTERNAL TARGET", addresses written host.port.
		port := memberHost[strings.LastIndex(memberHost, ":")+1:]
		sessions := regexp.MustCompile(`tcp/connect \[: .* -> \S+ 127\.0\.0\.1\.` + port + `$`)
		egressGet(ctx, t, kc)
		before := countLines(t, dante.Process.LogFile, sessions)
		egressExec(ctx, t, kc)
		waitMoreLines(t, dante.Process.LogFile, sessions, before, "kubectl exec")
	})

	// The fleet cache reaches the member as requests do: its list and watch
	// go through the proxy (Dante logs their session), and the cache syncs.
	t.Run("fleet cache", func(t *testing.T) {
		port := memberHost[strings.LastIndex(memberHost, ":")+1:]
		sessions := regexp.MustCompile(`tcp/connect \[: .* -> \S+ 127\.0\.0\.1\.` + port + `$`)
		// The cluster's probes hold their connection through Dante once it
		// is healthy: new sessions after that are the cache's own.
		waitEgressStatus(t, viaSOCKS.Name, endpoint, true)
		before := countLines(t, dante.Process.LogFile, sessions)
		secret := grantCacheIdentity(ctx, t, env.Members[harness.MemberA], "egress-cache")
		label := "egress-cache-e2e"
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"yes"}},"spec":{"clientConfig":{"cacheSecretRef":{"namespace":%q,"name":%q}}}}`, label, harness.GatewayNamespace, secret)
		if _, err := upstreamClusters(t).Patch(ctx, viaSOCKS.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		cacheLabelled(ctx, t, "egress-cache", label, viaSOCKS.Name)
		waitMoreLines(t, dante.Process.LogFile, sessions, before, "the fleet cache's list and watch")
	})

	t.Run("wrong password", func(t *testing.T) {
		badEndpoint := badAuth.Spec.Servers[0].Endpoint
		msg := waitEgressStatus(t, badAuth.Name, badEndpoint, false, "egress proxy "+tiny.URL, "CONNECT "+strings.TrimPrefix(badEndpoint, "https://"), "proxy authentication failed")
		if strings.Contains(msg, egressProxyPassword) {
			t.Fatalf("status message reveals the proxy password: %s", msg)
		}
		waitDescribed(t, badAuth.Name, corev1.EventTypeWarning, "EndpointUnhealthy", "(ProxyFailed): GET /readyz: egress proxy "+tiny.URL)
		// A request gets a 503 that names the proxy.
		resp, body := rawGet(ctx, t, harness.UserAlice, badAuth.Name, "/api/v1/namespaces/"+harness.AliceNamespace+"/configmaps")
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "through its egress proxy") ||
			!strings.Contains(string(body), "egress proxy "+tiny.URL) || strings.Contains(string(body), egressProxyPassword) {
			t.Fatalf("GET through a proxy that refuses the password: %s %s, want a 503 naming the proxy", resp.Status, body)
		}
	})

	// `kube-gateway join --proxy-url` registers member-b through the proxy:
	// Ready means probes went through it, and its log shows them.
	t.Run("join", func(t *testing.T) {
		bin, ok := harness.GatewayBinary(env.BinDir)
		if !ok {
			t.Fatalf("no kube-gateway binary in %s: run make build", env.BinDir)
		}
		password := filepath.Join(t.TempDir(), "proxy-password")
		if err := os.WriteFile(password, []byte(egressProxyPassword+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		const name = "member-b-via-proxy"
		flags := []string{"--kubeconfig", env.Kubeconfig("hub-admin"), "--member-kubeconfig", env.Kubeconfig("member-b-admin"),
			"--identity-name", "kube-gateway-via-proxy"}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = exec.CommandContext(ctx, bin, append([]string{"unjoin", name}, flags...)...).Run()
		})
		memberB := strings.TrimPrefix(env.Members[harness.MemberB].Servers[0].URL, "https://")
		connects := regexp.MustCompile(`: CONNECT ` + regexp.QuoteMeta(memberB) + ` HTTP/1\.1$`)
		before := countLines(t, tiny.Process.LogFile, connects)
		runGatewayCLI(ctx, t, t.TempDir(), append([]string{bin, "join", name, "--timeout", "60s", "--proxy-url", tiny.URL,
			"--proxy-username", "gateway", "--proxy-password-file", password}, flags...)...)
		waitMoreLines(t, tiny.Process.LogFile, connects, before, "join")
		if resp, body := rawGet(ctx, t, harness.UserAdmin, name, "/api/v1/namespaces/default/configmaps"); resp.StatusCode != http.StatusOK {
			t.Fatalf("LIST through the joined cluster: %s %s", resp.Status, body)
		}
		runGatewayCLI(ctx, t, t.TempDir(), append([]string{bin, "unjoin", name}, flags...)...)
	})

	t.Run("proxy down and back", func(t *testing.T) {
		waitEgressStatus(t, viaHTTP.Name, endpoint, true)
		if err := tiny.Process.Stop(); err != nil {
			t.Fatal(err)
		}
		waitEgressStatus(t, viaHTTP.Name, endpoint, false, "egress proxy "+tiny.URL, "connection refused")
		if err := tiny.Process.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		waitEgressStatus(t, viaHTTP.Name, endpoint, true)
		egressGet(ctx, t, aliceKubeconfig(t, viaHTTP.Name))
	})
}

// A proxyURL with credentials, or of another scheme, is refused with 422 on
// spec.clientConfig.proxyURL, and the refusal does not repeat the password.
func TestEgressProxyURLIsValidated(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	for _, proxyURL := range []string{"http://gateway:" + egressProxyPassword + "@127.0.0.1:3128", "socks4://127.0.0.1:1080", "http://127.0.0.1:3128/path"} {
		uc := memberACluster("egress-invalid")
		uc.Spec.ClientConfig.ProxyURL = proxyURL
		_, err := upstreamClusters(t).Create(ctx, uc, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			_ = upstreamClusters(t).Delete(context.Background(), uc.Name, metav1.DeleteOptions{})
			t.Fatalf("proxyURL %q: %v, want 422 Invalid", proxyURL, err)
		}
		status := err.(apierrors.APIStatus).Status()
		if len(status.Details.Causes) != 1 || status.Details.Causes[0].Field != "spec.clientConfig.proxyURL" {
			t.Errorf("proxyURL %q: causes %+v, want spec.clientConfig.proxyURL", proxyURL, status.Details.Causes)
		}
		if strings.Contains(status.Message, egressProxyPassword) {
			t.Errorf("the 422 repeats the proxy password: %s", status.Message)
		}
	}
}

func stopWithTest(t *testing.T, p *harness.ForwardProxy) {
	if p != nil && p.Process != nil {
		t.Cleanup(func() { _ = p.Process.Stop() })
	}
}

// proxySecret creates a credential Secret with member-a's credential and the
// proxy's username and password.
func proxySecret(ctx context.Context, t *testing.T, name, password string) {
	t.Helper()
	hub, err := kubernetes.NewForConfig(env.HubConfig(harness.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	secrets := hub.CoreV1().Secrets(harness.GatewayNamespace)
	base, err := secrets.Get(ctx, harness.MemberA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{}}
	for k, v := range base.Data {
		s.Data[k] = v
	}
	s.Data[cluster.SecretKeyProxyUsername] = []byte("gateway")
	s.Data[cluster.SecretKeyProxyPassword] = []byte(password)
	if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = secrets.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// egressCluster registers member-a's server i under name, through proxyURL.
func egressCluster(t *testing.T, name, proxyURL, secret string, i int) *gatewayv1alpha1.UpstreamCluster {
	t.Helper()
	uc := memberACluster(name)
	uc.Spec.Servers = uc.Spec.Servers[i : i+1]
	uc.Spec.ClientConfig.SecretRef.Name = secret
	uc.Spec.ClientConfig.ProxyURL = proxyURL
	uc.Spec.HealthCheck = egressProbes
	return createCluster(t, uc)
}

// aliceKubeconfig writes alice's kubeconfig whose server is the proxy prefix
// of cluster.
func aliceKubeconfig(t *testing.T, clusterName string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(env.Kubeconfig(aliceA))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = env.Hub.Servers[0].URL + harness.ProxyPath(clusterName)
	}
	path := filepath.Join(t.TempDir(), "alice@"+clusterName+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// countLines counts the lines of path that match re.
func countLines(t *testing.T, path string, re *regexp.Regexp) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if re.MatchString(line) {
			n++
		}
	}
	return n
}

// waitMoreLines waits until the proxy's log at path has more lines matching
// re than before (the proxy logs from its own process, a moment after it
// relayed), and returns their number.
func waitMoreLines(t *testing.T, path string, re *regexp.Regexp, before int, what string) int {
	t.Helper()
	var n int
	eventually(t, 10*time.Second, func(context.Context) error {
		if n = countLines(t, path, re); n <= before {
			return errorf("%s logged %d lines matching %q before %s and %d after: %s did not go through it", filepath.Base(path), before, re, what, n, what)
		}
		return nil
	})
	return n
}

// egressGet lists alice's ConfigMaps through kc, retrying while the new
// cluster's first probe is on its way.
func egressGet(ctx context.Context, t *testing.T, kc string) {
	t.Helper()
	eventually(t, 20*time.Second, func(ctx context.Context) error {
		_, _, err := env.Kubectl(ctx, kc, "--namespace="+harness.AliceNamespace, "get", "configmaps", "-o", "name")
		return err
	})
}

// egressExec runs a command in the stand-in pod through kc (WebSocket,
// kubectl's default).
func egressExec(ctx context.Context, t *testing.T, kc string) {
	t.Helper()
	out, _, err := env.Kubectl(ctx, kc, "--namespace="+harness.AliceNamespace, "exec", harness.ShellPod, "-c", "main", "--", "echo", "through", "the", "egress", "proxy")
	if err != nil || out != "through the egress proxy\n" {
		t.Fatalf("kubectl exec: %q, %v", out, err)
	}
}

// waitEgressStatus waits until endpoint of cluster is healthy, or unhealthy
// with reason ProxyFailed and a message holding every one of subs, and returns
// the message.
func waitEgressStatus(t *testing.T, clusterName, endpoint string, healthy bool, subs ...string) string {
	t.Helper()
	var msg string
	var last error
	eventually(t, 20*time.Second, func(ctx context.Context) error {
		uc, err := upstreamClusters(t).Get(ctx, clusterName, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() != nil && last != nil {
				return last // cut by the deadline: report what was last seen
			}
			return err
		}
		last = statusError(uc, endpoint, healthy, subs, &msg)
		return last
	})
	if healthy {
		t.Logf("%s: %s healthy", clusterName, endpoint)
	} else {
		t.Logf("status of %s: %s", endpoint, msg)
	}
	return msg
}

// statusError says how the status of endpoint in uc differs from what
// waitEgressStatus waits for, or nil; it sets msg to the endpoint's message.
func statusError(uc *gatewayv1alpha1.UpstreamCluster, endpoint string, healthy bool, subs []string, msg *string) error {
	for _, s := range uc.Status.Servers {
		if s.Endpoint != endpoint {
			continue
		}
		*msg = s.Message
		if s.Healthy == nil || *s.Healthy != healthy {
			return errorf("status of %s: healthy=%s (%s: %s), want %v", endpoint, healthyString(s.Healthy), s.Reason, s.Message, healthy)
		}
		if healthy {
			return nil
		}
		if s.Reason != health.ReasonProxyFailed {
			return errorf("status of %s: reason %s (%s), want %s", endpoint, s.Reason, s.Message, health.ReasonProxyFailed)
		}
		for _, sub := range subs {
			if !strings.Contains(s.Message, sub) {
				return errorf("status of %s: %s: %q, want it to contain %q", endpoint, s.Reason, s.Message, sub)
			}
		}
		return nil
	}
	return errorf("status has no entry for %s: %+v", endpoint, uc.Status)
}
