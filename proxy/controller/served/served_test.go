package served

import (
	"errors"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// discovery of a small member: core pods (with log) and namespaces, apps
// deployments (with scale).
var member = []*metav1.APIResourceList{
	{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "pods"}, {Name: "pods/log"}, {Name: "namespaces"}}},
	{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{{Name: "deployments"}, {Name: "deployments/scale"}}},
}

func rule(groups, resources []string) gatewayv1alpha1.DispatchPolicyRule {
	return gatewayv1alpha1.DispatchPolicyRule{Verbs: []string{"get"}, APIGroups: groups, Resources: resources}
}

func TestUnserved(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rules  []gatewayv1alpha1.DispatchPolicyRule
		failed map[schema.GroupVersion]error
		want   []string
	}{
		{name: "all served", rules: []gatewayv1alpha1.DispatchPolicyRule{rule([]string{""}, []string{"pods", "pods/log", "namespaces"}), rule([]string{"apps"}, []string{"deployments/scale"})}},
		{name: "singular", rules: []gatewayv1alpha1.DispatchPolicyRule{rule([]string{""}, []string{"namespace", "pods"})},
			want: []string{`dispatch policy "p" rule 0: resource "namespace" of API group ""`}},
		{name: "wrong group", rules: []gatewayv1alpha1.DispatchPolicyRule{rule([]string{""}, []string{"deployments"})},
			want: []string{`dispatch policy "p" rule 0: resource "deployments" of API group ""`}},
		{name: "served by one of two groups", rules: []gatewayv1alpha1.DispatchPolicyRule{rule([]string{"", "apps"}, []string{"deployments", "pods"})}},
		{name: "unknown group", rules: []gatewayv1alpha1.DispatchPolicyRule{rule([]string{"app"}, []string{"deployments"})},
			want: []string{`dispatch policy "p" rule 0: API group "app"`}},
		{name: "any group", rules: []gatewayv1alpha1.DispatchPolicyRule{rule([]string{"*"}, []string{"deployments", "deployment"}), rule(nil, []string{"-pod"})},
			want: []string{`dispatch policy "p" rule 0: resource "deployment"`, `dispatch policy "p" rule 1: resource "pod"`}},
		{name: "group exclusions", rules: []gatewayv1alpha1.DispatchPolicyRule{rule([]string{"-apps"}, []string{"pods", "deployment"})},
			want: []string{`dispatch policy "p" rule 0: resource "deployment"`}},
		{name: "wildcards and non-resource rules are skipped", rules: []gatewayv1alpha1.DispatchPolicyRule{
			rule([]string{"*"}, []string{"*", "*/status", "pods/*"}), {Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}}}},
		{name: "a group the member failed to describe passes", rules: []gatewayv1alpha1.DispatchPolicyRule{rule([]string{"metrics.k8s.io"}, []string{"pods"})},
			failed: map[schema.GroupVersion]error{{Group: "metrics.k8s.io", Version: "v1beta1"}: errors.New("503")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refs := Named([]gatewayv1alpha1.DispatchPolicy{{Name: "p", Rules: tc.rules}})
			var got []string
			for _, r := range Unserved(refs, member, tc.failed) {
				got = append(got, r.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("unserved %q, want %q", got, tc.want)
			}
		})
	}
}
