package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewharf/kube-gateway/test/harness"
)

// A ValidatingAdmissionPolicy on the hub that matches CONNECT on
// upstreamclusters/proxy refuses proxied requests at the gateway; the gateway
// skips CONNECT admission only while the hub has no policy or webhook, so it
// must notice the policy's arrival and its removal.
func TestAdmissionPolicyOnProxyRequests(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	hub, err := kubernetes.NewForConfig(env.HubConfig(harness.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	const marker = "/apis/admission.e2e.example"
	denied := harness.ProxyPath(harness.MemberA) + marker + "/v1"
	policy, binding := proxyPolicy("e2e-deny-proxy-path", "!object.path.startsWith('"+marker+"')", "this member path is closed by the e2e policy")
	get := func(ctx context.Context, path string) string {
		out, stderr, err := env.Kubectl(ctx, "hub-admin", "get", "--raw", path)
		if err != nil {
			return stderr
		}
		return out
	}
	// Without the policy the member answers (it serves no such group: 404).
	if got := get(ctx, denied); !strings.Contains(got, "NotFound") && !strings.Contains(got, "not found") {
		t.Fatalf("before the policy: %q, want the member's 404", got)
	}

	createProxyPolicy(ctx, t, hub, policy, binding)
	eventually(t, time.Minute, func(ctx context.Context) error {
		if got := get(ctx, denied); !strings.Contains(got, "closed by the e2e policy") {
			return errorf("with the policy: %q, want the policy's refusal", got)
		}
		return nil
	})
	if got := get(ctx, harness.ProxyPath(harness.MemberA)+"/version"); !strings.Contains(got, "gitVersion") {
		t.Fatalf("a path the policy does not match: %q", got)
	}

	if err := hub.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := hub.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, policy.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func(ctx context.Context) error {
		if got := get(ctx, denied); strings.Contains(got, "closed by the e2e policy") {
			return errorf("after the policy was deleted: %q", got)
		}
		return nil
	})
}

// proxyPolicy is a ValidatingAdmissionPolicy, and its binding, that refuses
// CONNECT on upstreamclusters/proxy (a proxied request) unless expression
// (CEL over object, the ProxyOptions with the member path, and request)
// holds.
func proxyPolicy(name, expression, message string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Connect},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{"gateway.kubewharf.io"}, APIVersions: []string{"*"}, Resources: []string{"upstreamclusters/proxy"},
						},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: expression, Message: message}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return policy, binding
}

// createProxyPolicy creates policy and binding on the hub, deleted when the
// test ends.
func createProxyPolicy(ctx context.Context, t *testing.T, hub kubernetes.Interface, policy *admissionregistrationv1.ValidatingAdmissionPolicy, binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	if _, err := hub.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = hub.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		_ = hub.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), policy.Name, metav1.DeleteOptions{})
	})
	if _, err := hub.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
