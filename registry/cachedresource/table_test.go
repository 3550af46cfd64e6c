package cachedresource

import (
	"context"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

func TestTableConvertor(t *testing.T) {
	wantColumns := []string{"Name", "Group", "Version", "Resource", "Selected", "Synced", "Objects", "Ready", "Age", "Bytes"}

	core := sample()
	core.CreationTimestamp = metav1.NewTime(time.Now().Add(-72 * time.Hour))
	core.Status.Conditions = []metav1.Condition{
		{Type: "Other", Status: metav1.ConditionFalse},
		{Type: gatewayv1alpha1.ConditionReady, Status: metav1.ConditionTrue},
	}
	fresh := &gatewayv1alpha1.CachedResource{
		ObjectMeta: metav1.ObjectMeta{Name: "deployments"},
		Spec:       gatewayv1alpha1.CachedResourceSpec{Group: "apps", Version: "v1", Resource: "deployments"},
	}
	coreRow := []interface{}{"configmaps", `""`, "v1", "configmaps", int64(3), int64(3), int64(30), "True", "3d", int64(3000)}
	freshRow := []interface{}{"deployments", "apps", "v1", "deployments", int64(0), int64(0), int64(0), "Unknown", "<unknown>", int64(0)}

	tests := []struct {
		name      string
		obj       runtime.Object
		wantCells [][]interface{}
		wantRV    string
		wantCont  string
		wantRem   *int64
	}{
		{name: "core group, with status", obj: core, wantCells: [][]interface{}{coreRow}, wantRV: "10"},
		{name: "no status, no creation time", obj: fresh, wantCells: [][]interface{}{freshRow}},
		{
			name: "list",
			obj: &gatewayv1alpha1.CachedResourceList{
				ListMeta: metav1.ListMeta{ResourceVersion: "77", Continue: "token", RemainingItemCount: ptr(int64(3))},
				Items:    []gatewayv1alpha1.CachedResource{*core, *fresh},
			},
			wantCells: [][]interface{}{coreRow, freshRow},
			wantRV:    "77", wantCont: "token", wantRem: ptr(int64(3)),
		},
		{name: "empty list", obj: &gatewayv1alpha1.CachedResourceList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}}, wantRV: "5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := tableConvertor{}.ConvertToTable(context.Background(), tt.obj, nil)
			if err != nil {
				t.Fatal(err)
			}
			var cols []string
			for _, c := range table.ColumnDefinitions {
				cols = append(cols, c.Name)
				if want := int32(0); c.Name == "Bytes" {
					want = 1
					if c.Priority != want {
						t.Errorf("column Bytes has priority %d, want 1 (wide only)", c.Priority)
					}
				} else if c.Priority != want {
					t.Errorf("column %s has priority %d, want 0", c.Name, c.Priority)
				}
			}
			if !reflect.DeepEqual(cols, wantColumns) {
				t.Errorf("columns = %v, want %v", cols, wantColumns)
			}
			if len(table.Rows) != len(tt.wantCells) {
				t.Fatalf("got %d rows, want %d", len(table.Rows), len(tt.wantCells))
			}
			for i, row := range table.Rows {
				if !reflect.DeepEqual(row.Cells, tt.wantCells[i]) {
					t.Errorf("row %d = %#v, want %#v", i, row.Cells, tt.wantCells[i])
				}
				if cr, ok := row.Object.Object.(*gatewayv1alpha1.CachedResource); !ok || cr.Name != tt.wantCells[i][0] {
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

func TestDescribe(t *testing.T) {
	for cr, want := range map[*gatewayv1alpha1.CachedResource]string{
		sample(): "configmaps (v1, core group)",
		{Spec: gatewayv1alpha1.CachedResourceSpec{Group: "apps", Version: "v1", Resource: "deployments"}}: "deployments (apps/v1)",
	} {
		if got := describe(gvr(cr)); got != want {
			t.Errorf("describe = %q, want %q", got, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
