package upstreamcluster

import (
	"context"
	"slices"
	"testing"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

func TestDispatchWarnings(t *testing.T) {
	uc := sampleCluster()
	uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{Name: "p", Rules: []gatewayv1alpha1.DispatchPolicyRule{
		{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods", "namespace", "*/status"}},
		{Verbs: []string{"get"}, APIGroups: []string{"apps"}, Resources: []string{"-deployment/scale", "replicasets"}},
	}}}
	want := []string{
		`spec.dispatchPolicies[0].rules[0].resources[1]: "namespace" is a singular: requests name resources in the plural, so this never matches; did you mean "namespaces"?`,
		`spec.dispatchPolicies[0].rules[1].resources[0]: "-deployment/scale" is a singular: requests name resources in the plural, so this never matches; did you mean "deployments/scale"?`,
	}
	s := strategy{}
	if got := s.WarningsOnCreate(context.Background(), uc); !slices.Equal(got, want) {
		t.Errorf("WarningsOnCreate = %q, want %q", got, want)
	}
	if got := s.WarningsOnUpdate(context.Background(), uc, sampleCluster()); !slices.Equal(got, want) {
		t.Errorf("WarningsOnUpdate = %q, want %q", got, want)
	}
	if got := s.WarningsOnCreate(context.Background(), sampleCluster()); got != nil {
		t.Errorf("warnings %q for a cluster without rules", got)
	}
}
