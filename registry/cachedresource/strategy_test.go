package cachedresource

import (
	"context"
	"reflect"
	"sort"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

func testStrategy(t *testing.T) strategy {
	t.Helper()
	s := runtime.NewScheme()
	if err := gatewayv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return newStrategy(s)
}

func sample() *gatewayv1alpha1.CachedResource {
	return &gatewayv1alpha1.CachedResource{
		ObjectMeta: metav1.ObjectMeta{
			Name:            "configmaps",
			ResourceVersion: "10",
			Generation:      4,
			Labels:          map[string]string{"team": "fleet"},
			Annotations:     map[string]string{"note": "a"},
			Finalizers:      []string{"example.com/keep"},
		},
		Spec: gatewayv1alpha1.CachedResourceSpec{Version: "v1", Resource: "configmaps"},
		Status: gatewayv1alpha1.CachedResourceStatus{
			ObservedGeneration: 4,
			Conditions: []metav1.Condition{{Type: gatewayv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Synced",
				LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}},
			SelectedClusters: 3, SyncedClusters: 3, Objects: 30, Bytes: 3000,
		},
	}
}

func TestStrategyBasics(t *testing.T) {
	s := testStrategy(t)
	ctx := context.Background()
	if s.NamespaceScoped() || s.AllowCreateOnUpdate(ctx) || !s.AllowUnconditionalUpdate(ctx) {
		t.Error("want cluster-scoped, no create on update, unconditional updates allowed")
	}
	if errs := s.Validate(ctx, sample()); len(errs) != 0 {
		t.Errorf("Validate(valid) = %v", errs)
	}
	bad := sample()
	bad.Spec.Resource = "secrets"
	if errs := s.Validate(ctx, bad); len(errs) != 1 || errs[0].Type != field.ErrorTypeForbidden || errs[0].Field != "spec.resource" {
		t.Errorf("Validate(secrets) = %v", errs)
	}
	if errs := s.ValidateUpdate(ctx, bad, sample()); len(errs) != 1 || errs[0].Field != "spec.resource" {
		t.Errorf("ValidateUpdate(secrets) = %v", errs)
	}
	gvks, _, err := s.ObjectKinds(sample())
	if err != nil || len(gvks) == 0 || gvks[0].Kind != "CachedResource" {
		t.Errorf("ObjectKinds = %v, %v", gvks, err)
	}
}

func TestPrepareForCreate(t *testing.T) {
	cr := sample()
	cr.Generation = 7
	want := cr.Spec.DeepCopy()
	testStrategy(t).PrepareForCreate(context.Background(), cr)
	if !apiequality.Semantic.DeepEqual(cr.Status, gatewayv1alpha1.CachedResourceStatus{}) {
		t.Errorf("status = %+v, want empty", cr.Status)
	}
	if cr.Generation != 1 || !apiequality.Semantic.DeepEqual(&cr.Spec, want) || cr.Labels["team"] != "fleet" {
		t.Errorf("generation %d spec %+v labels %v: want 1, the spec and labels as sent", cr.Generation, cr.Spec, cr.Labels)
	}
}

func TestPrepareForUpdate(t *testing.T) {
	tests := []struct {
		name           string
		mutate         func(*gatewayv1alpha1.CachedResource)
		wantGeneration int64
	}{
		{name: "no change", mutate: func(*gatewayv1alpha1.CachedResource) {}, wantGeneration: 4},
		{name: "labels only", mutate: func(cr *gatewayv1alpha1.CachedResource) { cr.Labels = nil }, wantGeneration: 4},
		{
			name:           "status only (ignored on the main resource)",
			mutate:         func(cr *gatewayv1alpha1.CachedResource) { cr.Status = gatewayv1alpha1.CachedResourceStatus{Objects: 1} },
			wantGeneration: 4,
		},
		{name: "version", mutate: func(cr *gatewayv1alpha1.CachedResource) { cr.Spec.Version = "v2" }, wantGeneration: 5},
		{
			name: "selector and status",
			mutate: func(cr *gatewayv1alpha1.CachedResource) {
				cr.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
				cr.Status.NotSynced = []gatewayv1alpha1.NotSyncedCluster{{Cluster: "a"}}
			},
			wantGeneration: 5,
		},
	}
	s := testStrategy(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := sample()
			cr := old.DeepCopy()
			tt.mutate(cr)
			wantSpec := cr.Spec.DeepCopy()
			s.PrepareForUpdate(context.Background(), cr, old)
			if cr.Generation != tt.wantGeneration {
				t.Errorf("generation = %d, want %d", cr.Generation, tt.wantGeneration)
			}
			if !apiequality.Semantic.DeepEqual(cr.Status, sample().Status) {
				t.Errorf("status = %+v, want the stored status", cr.Status)
			}
			if !apiequality.Semantic.DeepEqual(&cr.Spec, wantSpec) {
				t.Errorf("spec = %+v, want the new spec", cr.Spec)
			}
		})
	}
}

func TestStatusStrategy(t *testing.T) {
	s := statusStrategy{testStrategy(t)}
	old := sample()
	cr := old.DeepCopy()
	cr.Spec = gatewayv1alpha1.CachedResourceSpec{Group: "apps", Version: "v1", Resource: "deployments"}
	cr.Generation = 42
	cr.Labels = map[string]string{"team": "other"}
	cr.Annotations = nil
	cr.Finalizers = nil
	cr.OwnerReferences = []metav1.OwnerReference{{Name: "x"}}
	cr.Status = gatewayv1alpha1.CachedResourceStatus{ObservedGeneration: 4, SelectedClusters: 3, SyncedClusters: 2,
		NotSynced: []gatewayv1alpha1.NotSyncedCluster{{Cluster: "member-c", Reason: "NoCacheCredential"}}}
	wantStatus := *cr.Status.DeepCopy()

	s.PrepareForUpdate(context.Background(), cr, old)

	if !apiequality.Semantic.DeepEqual(cr.Spec, old.Spec) || cr.Generation != old.Generation {
		t.Errorf("spec %+v generation %d, want the stored ones", cr.Spec, cr.Generation)
	}
	if !reflect.DeepEqual(cr.ObjectMeta.Labels, old.Labels) || !reflect.DeepEqual(cr.Annotations, old.Annotations) ||
		!reflect.DeepEqual(cr.Finalizers, old.Finalizers) || len(cr.OwnerReferences) != 0 {
		t.Errorf("metadata changed through status: %+v", cr.ObjectMeta)
	}
	if !apiequality.Semantic.DeepEqual(cr.Status, wantStatus) {
		t.Errorf("status = %+v, want the new status", cr.Status)
	}
	if errs := s.ValidateUpdate(context.Background(), cr, old); len(errs) != 0 {
		t.Errorf("ValidateUpdate = %v", errs)
	}
	cr.Status.SyncedClusters = 4
	if errs := s.ValidateUpdate(context.Background(), cr, old); len(errs) != 1 || errs[0].Field != "status.syncedClusters" {
		t.Errorf("ValidateUpdate = %v, want status.syncedClusters", errs)
	}
}

func TestGetResetFields(t *testing.T) {
	paths := func(m map[fieldpath.APIVersion]*fieldpath.Set) map[string][]string {
		out := map[string][]string{}
		for v, set := range m {
			var ps []string
			set.Iterate(func(p fieldpath.Path) { ps = append(ps, p.String()) })
			sort.Strings(ps)
			out[string(v)] = ps
		}
		return out
	}
	s := testStrategy(t)
	if got, want := paths(s.GetResetFields()), map[string][]string{"gateway.kubewharf.io/v1alpha1": {".status"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("main resource resets %v, want %v", got, want)
	}
	want := map[string][]string{"gateway.kubewharf.io/v1alpha1": {".metadata.annotations", ".metadata.finalizers", ".metadata.labels", ".metadata.ownerReferences", ".spec"}}
	if got := paths(statusStrategy{s}.GetResetFields()); !reflect.DeepEqual(got, want) {
		t.Errorf("status resets %v, want %v", got, want)
	}
}
