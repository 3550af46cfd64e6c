package upstreamcluster

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
	"github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1/validation"
)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func sampleCluster() *gatewayv1alpha1.UpstreamCluster {
	uc := &gatewayv1alpha1.UpstreamCluster{
		ObjectMeta: metav1.ObjectMeta{
			Name:            "member-a",
			ResourceVersion: "10",
			Generation:      4,
			Labels:          map[string]string{"env": "prod"},
			Annotations:     map[string]string{"note": "a"},
			Finalizers:      []string{"example.com/keep"},
		},
		Spec: gatewayv1alpha1.UpstreamClusterSpec{
			Servers: []gatewayv1alpha1.UpstreamServer{
				{Endpoint: "https://192.0.2.10:6443"},
				{Endpoint: "https://192.0.2.11:6443", Disabled: true},
			},
			ClientConfig: gatewayv1alpha1.ClientConfig{
				SecretRef: gatewayv1alpha1.SecretReference{Namespace: "kube-gateway", Name: "member-a"},
			},
		},
		Status: gatewayv1alpha1.UpstreamClusterStatus{
			ObservedGeneration: 4,
			Conditions:         []metav1.Condition{{Type: gatewayv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Healthy"}},
			Servers:            []gatewayv1alpha1.ServerStatus{{Endpoint: "https://192.0.2.10:6443", Healthy: ptr(true)}},
		},
	}
	gatewayv1alpha1.SetObjectDefaults_UpstreamCluster(uc)
	return uc
}

func TestStrategyBasics(t *testing.T) {
	s := newStrategy(testScheme(t), validation.Options{SecretNamespace: "kube-gateway"})
	if s.NamespaceScoped() {
		t.Error("strategy must be cluster-scoped")
	}
	if s.AllowCreateOnUpdate(context.Background()) {
		t.Error("AllowCreateOnUpdate must be false")
	}
	if !s.AllowUnconditionalUpdate(context.Background()) {
		t.Error("AllowUnconditionalUpdate must be true")
	}
	if len(s.Validate(context.Background(), sampleCluster())) != 0 {
		t.Errorf("Validate(valid) = %v", s.Validate(context.Background(), sampleCluster()))
	}
	bad := sampleCluster()
	bad.Spec.ClientConfig.SecretRef.Namespace = "default"
	errs := s.Validate(context.Background(), bad)
	if len(errs) != 1 || errs[0].Type != field.ErrorTypeNotSupported || errs[0].Field != "spec.clientConfig.secretRef.namespace" {
		t.Errorf("Validate uses the configured secret namespace: got %v", errs)
	}
	errs = s.ValidateUpdate(context.Background(), bad, sampleCluster())
	if len(errs) != 1 || errs[0].Field != "spec.clientConfig.secretRef.namespace" {
		t.Errorf("ValidateUpdate: got %v", errs)
	}
	gvks, _, err := s.ObjectKinds(sampleCluster())
	if err != nil || len(gvks) == 0 || gvks[0].Group != gatewayv1alpha1.GroupName {
		t.Errorf("ObjectKinds = %v, %v", gvks, err)
	}
}

func TestPrepareForCreate(t *testing.T) {
	s := newStrategy(testScheme(t), validation.Options{})
	uc := sampleCluster()
	uc.Generation = 7
	want := uc.Spec.DeepCopy()
	s.PrepareForCreate(context.Background(), uc)
	if !apiequality.Semantic.DeepEqual(uc.Status, gatewayv1alpha1.UpstreamClusterStatus{}) {
		t.Errorf("status = %+v, want empty", uc.Status)
	}
	if uc.Generation != 1 {
		t.Errorf("generation = %d, want 1", uc.Generation)
	}
	if !apiequality.Semantic.DeepEqual(&uc.Spec, want) {
		t.Errorf("spec changed: %+v", uc.Spec)
	}
	if uc.Labels["env"] != "prod" {
		t.Errorf("labels changed: %v", uc.Labels)
	}
}

func TestPrepareForUpdate(t *testing.T) {
	tests := []struct {
		name           string
		mutate         func(*gatewayv1alpha1.UpstreamCluster)
		wantGeneration int64
	}{
		{name: "no change", mutate: func(*gatewayv1alpha1.UpstreamCluster) {}, wantGeneration: 4},
		{
			name:           "metadata only",
			mutate:         func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Labels = map[string]string{"env": "dev"} },
			wantGeneration: 4,
		},
		{
			name: "status only (ignored on the main resource)",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Status = gatewayv1alpha1.UpstreamClusterStatus{ObservedGeneration: 99}
			},
			wantGeneration: 4,
		},
		{
			name:           "spec change",
			mutate:         func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.Servers[1].Disabled = false },
			wantGeneration: 5,
		},
		{
			name: "spec change and status change",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.ServerName = "member.example.com"
				uc.Status.Servers = nil
			},
			wantGeneration: 5,
		},
		{
			name: "semantically equal spec (nil vs empty slice)",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{}
			},
			wantGeneration: 4,
		},
	}
	s := newStrategy(testScheme(t), validation.Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := sampleCluster()
			uc := old.DeepCopy()
			tt.mutate(uc)
			wantLabels := uc.Labels
			wantSpec := uc.Spec.DeepCopy()
			s.PrepareForUpdate(context.Background(), uc, old)
			if uc.Generation != tt.wantGeneration {
				t.Errorf("generation = %d, want %d", uc.Generation, tt.wantGeneration)
			}
			if !apiequality.Semantic.DeepEqual(uc.Status, sampleCluster().Status) {
				t.Errorf("status = %+v, want the old status", uc.Status)
			}
			if !apiequality.Semantic.DeepEqual(&uc.Spec, wantSpec) {
				t.Errorf("spec = %+v, want the new spec", uc.Spec)
			}
			if !reflect.DeepEqual(uc.Labels, wantLabels) {
				t.Errorf("labels = %v, want the new labels %v", uc.Labels, wantLabels)
			}
			if old.Generation != 4 {
				t.Errorf("old object modified: generation %d", old.Generation)
			}
		})
	}
}

func TestStatusStrategyPrepareForUpdate(t *testing.T) {
	s := statusStrategy{newStrategy(testScheme(t), validation.Options{})}
	old := sampleCluster()
	uc := old.DeepCopy()
	uc.Spec.Servers = []gatewayv1alpha1.UpstreamServer{{Endpoint: "https://203.0.113.1"}}
	uc.Generation = 42
	uc.Labels = map[string]string{"env": "hijacked"}
	uc.Annotations = map[string]string{"x": "y"}
	uc.Finalizers = nil
	uc.OwnerReferences = []metav1.OwnerReference{{Name: "x"}}
	newStatus := gatewayv1alpha1.UpstreamClusterStatus{
		ObservedGeneration: 4,
		Conditions: []metav1.Condition{{Type: gatewayv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "NoHealthyServer",
			LastTransitionTime: metav1.Now()}},
		Servers: []gatewayv1alpha1.ServerStatus{{Endpoint: "https://192.0.2.10:6443", Healthy: ptr(false), Reason: "ProbeFailed"}},
	}
	uc.Status = *newStatus.DeepCopy()

	s.PrepareForUpdate(context.Background(), uc, old)

	if !apiequality.Semantic.DeepEqual(uc.Spec, old.Spec) {
		t.Errorf("spec = %+v, want the old spec", uc.Spec)
	}
	if uc.Generation != old.Generation {
		t.Errorf("generation = %d, want %d", uc.Generation, old.Generation)
	}
	if !reflect.DeepEqual(uc.Labels, old.Labels) || !reflect.DeepEqual(uc.Annotations, old.Annotations) {
		t.Errorf("labels/annotations = %v/%v, want the old ones", uc.Labels, uc.Annotations)
	}
	if !reflect.DeepEqual(uc.Finalizers, old.Finalizers) || len(uc.OwnerReferences) != 0 {
		t.Errorf("finalizers/ownerReferences = %v/%v, want the old ones", uc.Finalizers, uc.OwnerReferences)
	}
	if !apiequality.Semantic.DeepEqual(uc.Status, newStatus) {
		t.Errorf("status = %+v, want the new status", uc.Status)
	}

	// The status strategy validates the status, not the spec.
	if errs := s.ValidateUpdate(context.Background(), uc, old); len(errs) != 0 {
		t.Errorf("ValidateUpdate = %v", errs)
	}
	// A condition must be complete.
	uc.Status.Conditions[0].LastTransitionTime = metav1.Time{}
	if errs := s.ValidateUpdate(context.Background(), uc, old); len(errs) != 1 || errs[0].Field != "status.conditions[0].lastTransitionTime" {
		t.Errorf("ValidateUpdate = %v, want status.conditions[0].lastTransitionTime", errs)
	}
	uc.Status.Conditions[0].LastTransitionTime = metav1.Now()
	uc.Status.ObservedGeneration = -1
	if errs := s.ValidateUpdate(context.Background(), uc, old); len(errs) != 1 || errs[0].Field != "status.observedGeneration" {
		t.Errorf("ValidateUpdate = %v, want status.observedGeneration", errs)
	}
}

func resetPaths(t *testing.T, m map[fieldpath.APIVersion]*fieldpath.Set) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for v, set := range m {
		var paths []string
		set.Iterate(func(p fieldpath.Path) { paths = append(paths, p.String()) })
		sort.Strings(paths)
		out[string(v)] = paths
	}
	return out
}

func TestGetResetFields(t *testing.T) {
	s := newStrategy(testScheme(t), validation.Options{})
	tests := []struct {
		name string
		got  map[fieldpath.APIVersion]*fieldpath.Set
		want map[string][]string
	}{
		{
			name: "main resource resets the status",
			got:  s.GetResetFields(),
			want: map[string][]string{"gateway.kubewharf.io/v1alpha1": {".status"}},
		},
		{
			name: "status subresource resets spec, labels, annotations, finalizers and owners",
			got:  statusStrategy{s}.GetResetFields(),
			want: map[string][]string{"gateway.kubewharf.io/v1alpha1": {".metadata.annotations", ".metadata.finalizers", ".metadata.labels", ".metadata.ownerReferences", ".spec"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := resetPaths(t, tt.got); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("GetResetFields = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestTableConvertor(t *testing.T) {
	wantColumns := []string{"Name", "Servers", "Healthy", "Ready", "Age", "Endpoints"}

	full := sampleCluster()
	full.CreationTimestamp = metav1.NewTime(time.Now().Add(-72 * time.Hour))
	full.Spec.Servers = append(full.Spec.Servers, gatewayv1alpha1.UpstreamServer{Endpoint: "https://[2001:db8::1]:6443"})
	full.Status.Servers = []gatewayv1alpha1.ServerStatus{
		{Endpoint: "https://192.0.2.10:6443", Healthy: ptr(true)},
		{Endpoint: "https://[2001:db8::1]:6443", Healthy: ptr(false)},
	}
	full.Status.Conditions = []metav1.Condition{
		{Type: "Other", Status: metav1.ConditionTrue},
		{Type: gatewayv1alpha1.ConditionReady, Status: metav1.ConditionFalse},
	}

	bare := &gatewayv1alpha1.UpstreamCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "bare"},
		Spec: gatewayv1alpha1.UpstreamClusterSpec{
			Servers: []gatewayv1alpha1.UpstreamServer{{Endpoint: "https://192.0.2.20", Disabled: true}},
		},
	}

	tests := []struct {
		name      string
		obj       runtime.Object
		wantCells [][]interface{}
		wantRV    string
		wantCont  string
		wantRem   *int64
	}{
		{
			name: "one cluster with a disabled server and status",
			obj:  full,
			wantCells: [][]interface{}{{
				"member-a", int64(2), "1/2", "False", "3d",
				"https://192.0.2.10:6443,https://192.0.2.11:6443,https://[2001:db8::1]:6443",
			}},
			wantRV: "10",
		},
		{
			name:      "no status, no creation time",
			obj:       bare,
			wantCells: [][]interface{}{{"bare", int64(0), "<unknown>", "Unknown", "<unknown>", "https://192.0.2.20"}},
		},
		{
			name: "list",
			obj: &gatewayv1alpha1.UpstreamClusterList{
				ListMeta: metav1.ListMeta{ResourceVersion: "77", Continue: "token", RemainingItemCount: ptr(int64(3))},
				Items:    []gatewayv1alpha1.UpstreamCluster{*bare, *full},
			},
			wantCells: [][]interface{}{
				{"bare", int64(0), "<unknown>", "Unknown", "<unknown>", "https://192.0.2.20"},
				{"member-a", int64(2), "1/2", "False", "3d", "https://192.0.2.10:6443,https://192.0.2.11:6443,https://[2001:db8::1]:6443"},
			},
			wantRV:   "77",
			wantCont: "token",
			wantRem:  ptr(int64(3)),
		},
		{
			name:   "empty list",
			obj:    &gatewayv1alpha1.UpstreamClusterList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}},
			wantRV: "5",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := tableConvertor{}.ConvertToTable(context.Background(), tt.obj, nil)
			if err != nil {
				t.Fatalf("ConvertToTable: %v", err)
			}
			var cols []string
			for _, c := range table.ColumnDefinitions {
				cols = append(cols, c.Name)
			}
			if !reflect.DeepEqual(cols, wantColumns) {
				t.Errorf("columns = %v, want %v", cols, wantColumns)
			}
			if p := table.ColumnDefinitions[len(wantColumns)-1].Priority; p != 1 {
				t.Errorf("Endpoints priority = %d, want 1 (wide output only)", p)
			}
			if len(table.Rows) != len(tt.wantCells) {
				t.Fatalf("got %d rows, want %d", len(table.Rows), len(tt.wantCells))
			}
			for i, row := range table.Rows {
				if len(row.Cells) != len(wantColumns) {
					t.Errorf("row %d has %d cells for %d columns", i, len(row.Cells), len(wantColumns))
				}
				if !reflect.DeepEqual(row.Cells, tt.wantCells[i]) {
					t.Errorf("row %d cells = %#v, want %#v", i, row.Cells, tt.wantCells[i])
				}
				uc, ok := row.Object.Object.(*gatewayv1alpha1.UpstreamCluster)
				if !ok || uc.Name != tt.wantCells[i][0] {
					t.Errorf("row %d object = %#v", i, row.Object.Object)
				}
			}
			if table.ResourceVersion != tt.wantRV || table.Continue != tt.wantCont || !reflect.DeepEqual(table.RemainingItemCount, tt.wantRem) {
				t.Errorf("list meta = %q %q %v, want %q %q %v", table.ResourceVersion, table.Continue, table.RemainingItemCount, tt.wantRV, tt.wantCont, tt.wantRem)
			}
		})
	}

	if _, err := (tableConvertor{}).ConvertToTable(context.Background(), &metav1.Status{}, nil); err == nil {
		t.Error("ConvertToTable(Status) succeeded, want an error")
	}
}

func ptr[T any](v T) *T { return &v }
