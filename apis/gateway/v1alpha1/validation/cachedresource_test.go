package validation_test

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1/validation"
)

func validCachedResource() *gatewayv1alpha1.CachedResource {
	return &gatewayv1alpha1.CachedResource{
		ObjectMeta: metav1.ObjectMeta{Name: "deployments.apps", ResourceVersion: "1", Generation: 1},
		Spec: gatewayv1alpha1.CachedResourceSpec{
			Group: "apps", Version: "v1", Resource: "deployments",
			ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
		},
	}
}

func TestValidateCachedResource(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*gatewayv1alpha1.CachedResource)
		want    []fieldErr
		message string // in the first error's text, if set
	}{
		{name: "valid", mutate: func(*gatewayv1alpha1.CachedResource) {}},
		{
			name: "core group, no selector",
			mutate: func(cr *gatewayv1alpha1.CachedResource) {
				cr.Spec = gatewayv1alpha1.CachedResourceSpec{Version: "v1", Resource: "configmaps"}
			},
		},
		{
			name: "empty selector, beta version, a CRD's group",
			mutate: func(cr *gatewayv1alpha1.CachedResource) {
				cr.Spec = gatewayv1alpha1.CachedResourceSpec{Group: "example.com", Version: "v2beta3", Resource: "widgets",
					ClusterSelector: &metav1.LabelSelector{}}
			},
		},
		{
			name: "secrets of another group are no credentials",
			mutate: func(cr *gatewayv1alpha1.CachedResource) {
				cr.Spec.Group, cr.Spec.Resource = "example.com", "secrets"
			},
		},
		{
			name: "everything missing",
			mutate: func(cr *gatewayv1alpha1.CachedResource) {
				cr.Name = ""
				cr.Spec = gatewayv1alpha1.CachedResourceSpec{}
			},
			want: []fieldErr{
				{field.ErrorTypeRequired, "metadata.name"},
				{field.ErrorTypeRequired, "spec.version"},
				{field.ErrorTypeRequired, "spec.resource"},
			},
		},
		{
			name:    "secrets of the core group",
			mutate:  func(cr *gatewayv1alpha1.CachedResource) { cr.Spec.Group, cr.Spec.Resource = "", "secrets" },
			want:    []fieldErr{{field.ErrorTypeForbidden, "spec.resource"}},
			message: "credentials",
		},
		{
			name:    "a subresource",
			mutate:  func(cr *gatewayv1alpha1.CachedResource) { cr.Spec.Resource = "deployments/status" },
			want:    []fieldErr{{field.ErrorTypeForbidden, "spec.resource"}},
			message: "subresources are never cached",
		},
		{
			name: "a token subresource",
			mutate: func(cr *gatewayv1alpha1.CachedResource) {
				cr.Spec.Group, cr.Spec.Resource = "", "serviceaccounts/token"
			},
			want:    []fieldErr{{field.ErrorTypeForbidden, "spec.resource"}},
			message: "subresource",
		},
		{
			name:    "a kind, not a resource",
			mutate:  func(cr *gatewayv1alpha1.CachedResource) { cr.Spec.Resource = "Deployment" },
			want:    []fieldErr{{field.ErrorTypeInvalid, "spec.resource"}},
			message: "lower-case plural",
		},
		{
			name:   "a wildcard",
			mutate: func(cr *gatewayv1alpha1.CachedResource) { cr.Spec.Resource = "*" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.resource"}},
		},
		{
			name:   "a group with a version in it",
			mutate: func(cr *gatewayv1alpha1.CachedResource) { cr.Spec.Group = "apps/v1" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.group"}},
		},
		{
			name:   "an upper-case group",
			mutate: func(cr *gatewayv1alpha1.CachedResource) { cr.Spec.Group = "Apps" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.group"}},
		},
		{
			name:    "a group/version in version",
			mutate:  func(cr *gatewayv1alpha1.CachedResource) { cr.Spec.Version = "apps/v1" },
			want:    []fieldErr{{field.ErrorTypeInvalid, "spec.version"}},
			message: "v1beta1",
		},
		{
			name:   "a version without v",
			mutate: func(cr *gatewayv1alpha1.CachedResource) { cr.Spec.Version = "1" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.version"}},
		},
		{
			name:   "a version v0",
			mutate: func(cr *gatewayv1alpha1.CachedResource) { cr.Spec.Version = "v0" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.version"}},
		},
		{
			name:   "a version beta without number",
			mutate: func(cr *gatewayv1alpha1.CachedResource) { cr.Spec.Version = "v1beta" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.version"}},
		},
		{
			name: "an invalid selector",
			mutate: func(cr *gatewayv1alpha1.CachedResource) {
				cr.Spec.ClusterSelector = &metav1.LabelSelector{
					MatchLabels: map[string]string{"bad key!": "x"},
					MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: "env", Operator: metav1.LabelSelectorOpIn},
						{Key: "tier", Operator: "Near", Values: []string{"a"}},
					},
				}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "spec.clusterSelector.matchLabels"},
				{field.ErrorTypeRequired, "spec.clusterSelector.matchExpressions[0].values"},
				{field.ErrorTypeInvalid, "spec.clusterSelector.matchExpressions[1].operator"},
			},
		},
		{
			name:   "namespace on a cluster-scoped object",
			mutate: func(cr *gatewayv1alpha1.CachedResource) { cr.Namespace = "default" },
			want:   []fieldErr{{field.ErrorTypeForbidden, "metadata.namespace"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cr := validCachedResource()
			tt.mutate(cr)
			errs := validation.ValidateCachedResource(cr)
			assertErrors(t, errs, tt.want)
			if tt.message != "" && !strings.Contains(errs[0].Error(), tt.message) {
				t.Errorf("error %q does not say %q", errs[0].Error(), tt.message)
			}
			// An update validates the spec alike.
			old := validCachedResource()
			cr.Name, cr.Namespace = old.Name, old.Namespace
			var want []fieldErr
			for _, w := range tt.want {
				if !strings.HasPrefix(w.Field, "metadata.") {
					want = append(want, w)
				}
			}
			assertErrors(t, validation.ValidateCachedResourceUpdate(cr, old), want)
		})
	}
}

func TestValidateCachedResourceStatusUpdate(t *testing.T) {
	now := metav1.Now()
	notSynced := func(n int) []gatewayv1alpha1.NotSyncedCluster {
		out := make([]gatewayv1alpha1.NotSyncedCluster, n)
		for i := range out {
			out[i] = gatewayv1alpha1.NotSyncedCluster{Cluster: fmt.Sprintf("member-%04d", i), Reason: "NoCacheCredential"}
		}
		return out
	}
	tests := []struct {
		name   string
		mutate func(*gatewayv1alpha1.CachedResource)
		want   []fieldErr
	}{
		{
			name: "valid status, a full list",
			mutate: func(cr *gatewayv1alpha1.CachedResource) {
				cr.Status = gatewayv1alpha1.CachedResourceStatus{
					ObservedGeneration: 1,
					Conditions: []metav1.Condition{{Type: gatewayv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
						Reason: "ClustersNotSynced", Message: "9000 of 10000 clusters synced", LastTransitionTime: now}},
					SelectedClusters: 10000, SyncedClusters: 9000, Objects: 1 << 40, Bytes: 1 << 50,
					NotSynced:          notSynced(gatewayv1alpha1.MaxNotSyncedClusters),
					NotSyncedTruncated: true,
				}
				cr.Status.NotSynced[0].StaleSince = &now
				cr.Status.NotSynced[1].Message = strings.Repeat("x", 1024)
			},
		},
		{
			name: "the spec is not validated by a status update",
			mutate: func(cr *gatewayv1alpha1.CachedResource) {
				cr.Spec = gatewayv1alpha1.CachedResourceSpec{Resource: "secrets"}
			},
		},
		{
			name: "negative numbers, more synced than selected",
			mutate: func(cr *gatewayv1alpha1.CachedResource) {
				cr.Status = gatewayv1alpha1.CachedResourceStatus{ObservedGeneration: -1, SelectedClusters: -1, SyncedClusters: 2, Objects: -1, Bytes: -1}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "status.observedGeneration"},
				{field.ErrorTypeInvalid, "status.selectedClusters"},
				{field.ErrorTypeInvalid, "status.syncedClusters"},
				{field.ErrorTypeInvalid, "status.objects"},
				{field.ErrorTypeInvalid, "status.bytes"},
			},
		},
		{
			name: "an incomplete condition",
			mutate: func(cr *gatewayv1alpha1.CachedResource) {
				cr.Status.Conditions = []metav1.Condition{{Type: gatewayv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Synced"}}
			},
			want: []fieldErr{{field.ErrorTypeRequired, "status.conditions[0].lastTransitionTime"}},
		},
		{
			name: "more than 100 not synced",
			mutate: func(cr *gatewayv1alpha1.CachedResource) {
				cr.Status.SelectedClusters = 200
				cr.Status.NotSynced = notSynced(gatewayv1alpha1.MaxNotSyncedClusters + 1)
			},
			want: []fieldErr{{field.ErrorTypeTooMany, "status.notSynced"}},
		},
		{
			name: "not synced: unsorted, a duplicate, no name, a long message",
			mutate: func(cr *gatewayv1alpha1.CachedResource) {
				cr.Status.NotSynced = []gatewayv1alpha1.NotSyncedCluster{
					{Cluster: "b"}, {Cluster: "a"}, {Cluster: "a"}, {}, {Cluster: "c", Message: strings.Repeat("x", 1025)},
				}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "status.notSynced[1].cluster"},
				{field.ErrorTypeDuplicate, "status.notSynced[2].cluster"},
				{field.ErrorTypeRequired, "status.notSynced[3].cluster"},
				{field.ErrorTypeTooLong, "status.notSynced[4].message"},
			},
		},
		{
			name:   "name is immutable",
			mutate: func(cr *gatewayv1alpha1.CachedResource) { cr.Name = "other" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "metadata.name"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := validCachedResource()
			cr := old.DeepCopy()
			tt.mutate(cr)
			assertErrors(t, validation.ValidateCachedResourceStatusUpdate(cr, old), tt.want)
		})
	}
}
