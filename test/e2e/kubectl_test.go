package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewharf/kube-gateway/test/harness"
)

// aliceA is alice's kubeconfig whose server is the proxy prefix of member-a.
const aliceA = "alice@member-a"

// memberA returns an admin client straight to member-a, to check what the
// member itself holds.
func memberA(t *testing.T) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(env.Members[harness.MemberA].AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func memberConfigMap(ctx context.Context, t *testing.T, name string) (*corev1.ConfigMap, error) {
	t.Helper()
	return memberA(t).CoreV1().ConfigMaps(harness.AliceNamespace).Get(ctx, name, metav1.GetOptions{})
}

// kubectl with a kubeconfig whose server is the proxy prefix works like kubectl
// against the member itself: create, get, list, apply (client- and server-side),
// patch, delete.
func TestKubectlThroughTheProxyPrefix(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	ns := "--namespace=" + harness.AliceNamespace
	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		cmd := env.KubectlCmd(ctx, aliceA, append([]string{ns}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	kubectl("", "create", "configmap", "kubectl-create", "--from-literal=a=1")
	if cm, err := memberConfigMap(ctx, t, "kubectl-create"); err != nil || cm.Data["a"] != "1" {
		t.Fatalf("created configmap not on the member: %v %v", cm, err)
	}
	if out := kubectl("", "get", "configmap", "kubectl-create", "-o", "jsonpath={.data.a}"); out != "1" {
		t.Fatalf("get: %q", out)
	}
	if out := kubectl("", "get", "configmaps", "-o", "name"); !strings.Contains(out, "configmap/kubectl-create") {
		t.Fatalf("list misses the configmap: %q", out)
	}

	kubectl("", "patch", "configmap", "kubectl-create", "--type=merge", "-p", `{"data":{"b":"2"}}`)
	if cm, err := memberConfigMap(ctx, t, "kubectl-create"); err != nil || cm.Data["b"] != "2" {
		t.Fatalf("patch not on the member: %v %v", cm, err)
	}

	manifest := `apiVersion: v1
kind: ConfigMap
metadata:
  name: %s
data:
  key: %s
`
	kubectl(sprintf(manifest, "kubectl-apply", "v1"), "apply", "-f", "-")
	kubectl(sprintf(manifest, "kubectl-apply", "v2"), "apply", "-f", "-")
	if cm, err := memberConfigMap(ctx, t, "kubectl-apply"); err != nil || cm.Data["key"] != "v2" {
		t.Fatalf("client-side apply not on the member: %v %v", cm, err)
	}

	kubectl(sprintf(manifest, "kubectl-ssa", "v1"), "apply", "--server-side", "--field-manager=e2e-ssa", "-f", "-")
	cm, err := memberConfigMap(ctx, t, "kubectl-ssa")
	if err != nil {
		t.Fatal(err)
	}
	if !managedBy(cm.ManagedFields, "e2e-ssa", metav1.ManagedFieldsOperationApply) {
		t.Fatalf("server-side apply did not reach the member as an apply by e2e-ssa: %+v", cm.ManagedFields)
	}

	kubectl("", "delete", "configmap", "kubectl-create", "kubectl-apply", "kubectl-ssa")
	for _, name := range []string{"kubectl-create", "kubectl-apply", "kubectl-ssa"} {
		if _, err := memberConfigMap(ctx, t, name); !apierrors.IsNotFound(err) {
			t.Fatalf("%s still on the member after delete: %v", name, err)
		}
	}
}

// A server-side dry run through the gateway is a dry run on the member: the
// member validates and answers, nothing is stored.
func TestServerSideDryRun(t *testing.T) {
	ctx := testContext(t, time.Minute)
	manifest := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dry-run\ndata:\n  a: b\n"
	for _, args := range [][]string{
		{"apply", "--dry-run=server", "-f", "-"},
		{"apply", "--server-side", "--dry-run=server", "-f", "-"},
		{"create", "--dry-run=server", "-f", "-"},
	} {
		cmd := env.KubectlCmd(ctx, aliceA, append([]string{"--namespace=" + harness.AliceNamespace}, args...)...)
		cmd.Stdin = strings.NewReader(manifest)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		if !strings.Contains(string(out), "(server dry run)") {
			t.Fatalf("kubectl %v: not reported as a server dry run: %s", args, out)
		}
		if _, err := memberConfigMap(ctx, t, "dry-run"); !apierrors.IsNotFound(err) {
			t.Fatalf("kubectl %v stored the object on the member: %v", args, err)
		}
	}
	// The member's own validation answers the dry run: an invalid object is refused.
	cmd := env.KubectlCmd(ctx, aliceA, "--namespace="+harness.AliceNamespace, "create", "--dry-run=server", "-f", "-")
	cmd.Stdin = strings.NewReader("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Not_Valid\n")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "Invalid") {
		t.Fatalf("invalid object in a dry run: err=%v out=%s", err, out)
	}
}

// kubectl get -w through the gateway streams events as the member emits them.
func TestWatchThroughTheProxyPrefix(t *testing.T) {
	kubectlWatchSeesCreates(testContext(t, time.Minute), t, aliceA, "watched", 30*time.Second)
}

// Discovery through the gateway is the member's discovery.
func TestAPIResourcesThroughTheProxyPrefix(t *testing.T) {
	ctx := testContext(t, time.Minute)
	out, _, err := env.Kubectl(ctx, aliceA, "api-resources", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pods", "configmaps", "deployments.apps", "roles.rbac.authorization.k8s.io"} {
		if !containsLine(out, want) {
			t.Fatalf("api-resources misses %q:\n%s", want, out)
		}
	}
	// The gateway's own API lives on the hub, not on the member.
	if strings.Contains(out, "upstreamclusters") {
		t.Fatalf("the member's discovery lists the hub's upstreamclusters:\n%s", out)
	}
}

func managedBy(entries []metav1.ManagedFieldsEntry, manager string, op metav1.ManagedFieldsOperationType) bool {
	for _, e := range entries {
		if e.Manager == manager && e.Operation == op {
			return true
		}
	}
	return false
}

func containsLine(out, want string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) == want {
			return true
		}
	}
	return false
}
