package e2e

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewharf/kube-gateway/test/harness"
)

// Agent metrics that count the connections it opened toward the member, and
// the server's count of dials that found no agent.
const (
	agentDials      = "konnectivity_network_proxy_agent_dial_duration_seconds_count"
	serverNoAgent   = "konnectivity_network_proxy_server_dial_failure_count"
	tunnelCluster   = "member-a-tunnel"
	tunnelNamespace = harness.AliceNamespace
)

// member-a registered a second time through a konnectivity server and an agent
// that dials out to it from a network namespace of its own, the only place its
// endpoints answer (member-a: its stand-in kubelet serves exec and
// port-forward). kubectl get, a watch, exec and port-forward go through the
// tunnel, as the agent's dial count shows; with the agent gone the cluster turns
// unhealthy with a status naming the tunnel, and it recovers when the agent
// comes back, and after a restart of the konnectivity server, with the same
// gateway process.
func TestKonnectivityTunnel(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	k, err := env.StartKonnectivity(ctx, harness.MemberA, tunnelCluster)
	t.Cleanup(func() {
		_ = upstreamClusters(t).Delete(context.Background(), tunnelCluster, metav1.DeleteOptions{})
		_ = hubAdmin(t).CoreV1().Secrets(harness.GatewayNamespace).Delete(context.Background(), tunnelCluster+"-konnectivity", metav1.DeleteOptions{})
		if k != nil {
			if err := k.Close(); err != nil {
				t.Error(err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	gatewayPID := env.Gateway.PID()
	metric := func(of func(context.Context, string) (float64, error), name string) float64 {
		t.Helper()
		v, err := of(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if n := metric(k.AgentMetric, agentDials); n < 1 {
		t.Fatalf("the cluster answered but the agent dialed the member %v times", n)
	}
	// The agent runs in a network namespace of its own, where the endpoints'
	// ports are: the gateway cannot have dialed them itself.
	endpoint := k.Endpoints[0]
	if k.Isolated {
		if c, err := net.DialTimeout("tcp", strings.TrimPrefix(endpoint, "https://"), 5*time.Second); err == nil {
			c.Close()
			t.Fatalf("%s answers on the host: the tunnel is not the only way", endpoint)
		}
	} else {
		t.Log("not root: the agent shares the host's network; only its dial count proves the path")
	}
	aliceTunnel := "alice@" + tunnelCluster

	// kubectl get, and a watch that sees an event.
	if out, _, err := env.Kubectl(ctx, aliceTunnel, "--namespace="+tunnelNamespace, "get", "pod", harness.ShellPod, "-o", "name"); err != nil || strings.TrimSpace(out) != "pod/"+harness.ShellPod {
		t.Fatalf("kubectl get through the tunnel: %q, %v", out, err)
	}
	alice, err := kubernetes.NewForConfig(env.ProxyConfig(harness.UserAlice, tunnelCluster))
	if err != nil {
		t.Fatal(err)
	}
	w, err := alice.CoreV1().ConfigMaps(tunnelNamespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=tunnel-watch"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	admin, err := kubernetes.NewForConfig(env.Members[harness.MemberA].AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "tunnel-watch"}}
	if _, err := admin.CoreV1().ConfigMaps(tunnelNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().ConfigMaps(tunnelNamespace).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
	})
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Added {
			t.Fatalf("watch through the tunnel: %s %+v, want ADDED", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("the watch through the tunnel saw no event")
	}

	// exec and port-forward: upgrades, dialed by the upgrade transport.
	dialsBefore := metric(k.AgentMetric, agentDials)
	if out, _, err := env.Kubectl(ctx, aliceTunnel, "--namespace="+tunnelNamespace, "exec", harness.ShellPod, "-c", "main", "--", "echo", "through", "the", "tunnel"); err != nil || out != "through the tunnel\n" {
		t.Fatalf("kubectl exec through the tunnel: %q, %v", out, err)
	}
	portForwardEcho(t, ctx, aliceTunnel, nil, 1)
	if n := metric(k.AgentMetric, agentDials); n < dialsBefore+2 {
		t.Errorf("exec and port-forward made the agent dial %v times, want a dial each", n-dialsBefore)
	}

	// The agent goes away: dials find no agent, the cluster turns unhealthy
	// with a status naming the tunnel, and requests get a 503 that says so.
	// (SIGKILL: the agent lingers on SIGTERM while connections are open.)
	if err := k.Agent.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func(context.Context) error {
		if k.Agent.Running() {
			return errorf("agent still running")
		}
		return nil
	})
	if reason := waitUnhealthyStatus(t, tunnelCluster, endpoint, "konnectivity server "+k.ServerAddresses[0]); reason != "TunnelFailed" {
		t.Errorf("status reason %s, want TunnelFailed", reason)
	}
	_, err = alice.CoreV1().ConfigMaps(tunnelNamespace).Get(ctx, cm.Name, metav1.GetOptions{})
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "konnectivity server "+k.ServerAddresses[0]) {
		t.Fatalf("GET with the agent gone: %v, want a 503 naming the konnectivity server", err)
	}
	if n := metric(k.ServerMetric, serverNoAgent); n < 1 {
		t.Errorf("the konnectivity server counted %v dials without an agent", n)
	}

	// The agent comes back: healthy again, same gateway.
	if err := k.Agent.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		uc, err := upstreamClusters(t).Get(ctx, tunnelCluster, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, s := range uc.Status.Servers {
			if s.Healthy == nil || !*s.Healthy {
				return errorf("%s: healthy=%s (%s: %s)", s.Endpoint, healthyString(s.Healthy), s.Reason, s.Message)
			}
		}
		_, err = alice.CoreV1().ConfigMaps(tunnelNamespace).Get(ctx, cm.Name, metav1.GetOptions{})
		return err
	})

	// The konnectivity server restarts: the gateway's gRPC connection redials,
	// the agent reconnects, requests go through again.
	if err := k.Servers[0].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		_, err := alice.CoreV1().ConfigMaps(tunnelNamespace).Get(ctx, cm.Name, metav1.GetOptions{})
		return err
	})
	if pid := env.Gateway.PID(); pid != gatewayPID {
		t.Errorf("gateway pid %d, was %d: it restarted", pid, gatewayPID)
	}

	// The fleet cache reaches the member as requests do: through the tunnel
	// (the endpoints answer nowhere else), and the cache syncs.
	dialsBefore = metric(k.AgentMetric, agentDials)
	secret := grantCacheIdentity(ctx, t, env.Members[harness.MemberA], "tunnel-cache")
	const label = "tunnel-cache-e2e"
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"yes"}},"spec":{"clientConfig":{"cacheSecretRef":{"namespace":%q,"name":%q}}}}`, label, harness.GatewayNamespace, secret)
	if _, err := upstreamClusters(t).Patch(ctx, tunnelCluster, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	cacheLabelled(ctx, t, "tunnel-cache", label, tunnelCluster)
	if n := metric(k.AgentMetric, agentDials); n <= dialsBefore {
		t.Errorf("the cache synced, but the agent dialed no connection for it")
	}

	// `kube-gateway join --konnectivity-address` registers member-a once more
	// through the tunnel: Ready means its probes went through the agent.
	bin, ok := harness.GatewayBinary(env.BinDir)
	if !ok {
		t.Fatalf("no kube-gateway binary in %s: run make build", env.BinDir)
	}
	const joined = tunnelCluster + "-joined"
	flags := []string{"--kubeconfig", env.Kubeconfig("hub-admin"), "--member-kubeconfig", env.Kubeconfig(harness.MemberA + "-admin"),
		"--identity-name", "kube-gateway-tunnel-joined"}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = exec.CommandContext(ctx, bin, append([]string{"unjoin", joined}, flags...)...).Run()
	})
	dialsBefore = metric(k.AgentMetric, agentDials)
	runGatewayCLI(ctx, t, t.TempDir(), append([]string{bin, "join", joined, "--timeout", "60s", "--server", endpoint,
		"--konnectivity-address", k.ServerAddresses[0], "--konnectivity-secret", tunnelCluster + "-konnectivity"}, flags...)...)
	if n := metric(k.AgentMetric, agentDials); n <= dialsBefore {
		t.Errorf("join made %s Ready, but the agent dialed no connection for it", joined)
	}
	runGatewayCLI(ctx, t, t.TempDir(), append([]string{bin, "unjoin", joined}, flags...)...)
}
