package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/version"

	"github.com/kubewharf/kube-gateway/test/harness"
)

// kubectl get --raw through the hub reaches every member, for resource and
// non-resource paths.
func TestRawPathsThroughTheHub(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	for _, member := range []string{harness.MemberA, harness.MemberB} {
		t.Run(member, func(t *testing.T) {
			out, _, err := env.Kubectl(ctx, "hub-admin", "get", "--raw", harness.ProxyPath(member)+"/version")
			if err != nil {
				t.Fatal(err)
			}
			var v version.Info
			if err := json.Unmarshal([]byte(out), &v); err != nil || v.GitVersion == "" {
				t.Fatalf("/version through the gateway is not a version: %q (%v)", out, err)
			}

			out, _, err = env.Kubectl(ctx, "hub-admin", "get", "--raw", harness.ProxyPath(member)+"/readyz")
			if err != nil || strings.TrimSpace(out) != "ok" {
				t.Fatalf("/readyz through the gateway: %q, %v", out, err)
			}

			out, _, err = env.Kubectl(ctx, "hub-admin", "get", "--raw", harness.ProxyPath(member)+"/api/v1/namespaces")
			if err != nil {
				t.Fatal(err)
			}
			var list corev1.NamespaceList
			if err := json.Unmarshal([]byte(out), &list); err != nil {
				t.Fatalf("namespaces: %v: %q", err, out)
			}
			if !hasNamespace(list, harness.AliceNamespace) {
				t.Fatalf("the member's namespace %q is missing from %v", harness.AliceNamespace, list.Items)
			}
		})
	}
}

// The member answers the query string the client sent, untouched.
func TestQueryStringReachesTheMember(t *testing.T) {
	ctx := testContext(t, time.Minute)
	out, _, err := env.Kubectl(ctx, "hub-admin", "get", "--raw",
		harness.ProxyPath(harness.MemberA)+"/api/v1/namespaces?fieldSelector=metadata.name%3Dalice&limit=5")
	if err != nil {
		t.Fatal(err)
	}
	var list corev1.NamespaceList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != harness.AliceNamespace {
		t.Fatalf("field selector not applied by the member: got %d namespaces", len(list.Items))
	}
}

func hasNamespace(list corev1.NamespaceList, name string) bool {
	for _, ns := range list.Items {
		if ns.Name == name {
			return true
		}
	}
	return false
}
