package harness

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestStart brings the environment up, checks that every member replica
// answers through its own admin config and, when the kube-gateway binary is
// built, that the hub proxies member-a's /version through the gateway.
func TestStart(t *testing.T) {
	binDir, err := DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkBinaries(binDir, "etcd", "kube-apiserver", "kubectl"); err != nil {
		t.Fatal(err)
	}
	_, haveGateway := GatewayBinary(binDir)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	began := time.Now()
	// KUBE_GATEWAY_TEST_WORKDIR keeps the work dir (logs) for debugging.
	workDir := os.Getenv("KUBE_GATEWAY_TEST_WORKDIR")
	if workDir == "" {
		workDir = t.TempDir()
	}
	env, err := Start(ctx, Config{WorkDir: workDir, NoGateway: !haveGateway, Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()
	t.Logf("Start took %.1fs (gateway: %v)", time.Since(began).Seconds(), haveGateway)

	for _, name := range []string{MemberA, MemberB} {
		c := env.Members[name]
		for i, s := range c.Servers {
			cs, err := kubernetes.NewForConfig(c.Config(UserAdmin, i))
			if err != nil {
				t.Fatal(err)
			}
			v, err := cs.Discovery().ServerVersion()
			if err != nil {
				t.Errorf("%s: version: %v", s.Name, err)
				continue
			}
			t.Logf("%s at %s: %s", s.Name, s.URL, v.GitVersion)
			if _, err := cs.CoreV1().ServiceAccounts(AliceNamespace).Get(ctx, "default", metav1.GetOptions{}); err != nil {
				t.Errorf("%s: serviceaccount alice/default: %v", s.Name, err)
			}
		}
	}
	cs := kubernetes.NewForConfigOrDie(env.Members[MemberA].AdminConfig)
	pod, err := cs.CoreV1().Pods(AliceNamespace).Get(ctx, ShellPod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Status.Phase != "Running" || pod.Spec.NodeName != StandInNode {
		t.Errorf("pod alice/shell: phase %q node %q", pod.Status.Phase, pod.Spec.NodeName)
	}
	// exec through member-a's own apiserver reaches the stand-in kubelet.
	out, _, err := env.Kubectl(ctx, "member-a-admin", "exec", "-n", AliceNamespace, ShellPod, "--", "echo", "hello")
	if err != nil {
		t.Errorf("kubectl exec on member-a: %v", err)
	} else if out != "hello\n" {
		t.Errorf("kubectl exec on member-a: got %q", out)
	}
	for _, name := range []string{"hub-admin", "alice@member-a", "member-b-admin"} {
		if _, err := os.Stat(env.Kubeconfig(name)); err != nil {
			t.Errorf("kubeconfig %s: %v", name, err)
		}
	}

	// A replica can be stopped and restarted on the same port and data.
	replica := env.Members[MemberA].Servers[1]
	if err := replica.Process.Stop(); err != nil {
		t.Fatalf("stop %s: %v", replica.Name, err)
	}
	if replica.Process.Running() {
		t.Fatalf("%s still running after Stop", replica.Name)
	}
	if err := replica.Process.Restart(ctx); err != nil {
		t.Fatalf("restart %s: %v", replica.Name, err)
	}

	if !haveGateway {
		t.Fatal("_output/bin/kube-gateway is not built: run make build (make test-e2e does)")
	}
	// The gateway has an etcd of its own, so that stopping it leaves the hub
	// and the members running.
	if env.GatewayEtcd == nil || env.GatewayEtcd.PID() == env.Etcd.PID() || env.GatewayEtcdURL == env.EtcdURL {
		t.Fatalf("gateway's etcd is not its own process: %s vs %s", env.GatewayEtcdURL, env.EtcdURL)
	}
	hub := kubernetes.NewForConfigOrDie(env.HubConfig(UserAdmin))
	var code int
	body, err := hub.Discovery().RESTClient().Get().AbsPath(ProxyPath(MemberA) + "/version").Do(ctx).StatusCode(&code).Raw()
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s/version through the hub: %d %v %s", ProxyPath(MemberA), code, err, body)
	}
	t.Logf("member-a /version through hub and gateway: %s", body)

	// alice: edit in namespace alice on member-a, nothing on member-b.
	aliceA := kubernetes.NewForConfigOrDie(env.ProxyConfig(UserAlice, MemberA))
	if _, err := aliceA.CoreV1().Pods(AliceNamespace).Get(ctx, ShellPod, metav1.GetOptions{}); err != nil {
		t.Errorf("alice gets alice/shell on member-a through the gateway: %v", err)
	}
	aliceB := kubernetes.NewForConfigOrDie(env.ProxyConfig(UserAlice, MemberB))
	if _, err := aliceB.CoreV1().Pods(AliceNamespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice lists pods on member-b through the gateway: want Forbidden, got %v", err)
	}
	bob := kubernetes.NewForConfigOrDie(env.ProxyConfig(UserBob, MemberA))
	if _, err := bob.Discovery().ServerVersion(); !apierrors.IsForbidden(err) {
		t.Errorf("bob gets /version of member-a through the hub: want Forbidden, got %v", err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}
