package cachedresource

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// tableConvertor gives `kubectl get cachedresources` its columns.
type tableConvertor struct{}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the CachedResource."},
	{Name: "Group", Type: "string", Description: `API group of the cached resource; "" is the core group.`},
	{Name: "Version", Type: "string", Description: "API version of the cached resource."},
	{Name: "Resource", Type: "string", Description: "The cached resource."},
	{Name: "Selected", Type: "integer", Description: "UpstreamClusters the clusterSelector selects."},
	{Name: "Synced", Type: "integer", Description: "Selected clusters whose cache is synced."},
	{Name: "Objects", Type: "integer", Description: "Objects held, over all selected clusters."},
	{Name: "Ready", Type: "string", Description: "Status of the Ready condition: every selected cluster's cache is synced."},
	{Name: "Age", Type: "string", Description: "Time since creation."},
	{Name: "Bytes", Type: "integer", Priority: 1, Description: "About how much memory the objects take in the gateway."},
}

func (tableConvertor) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{ColumnDefinitions: columns}
	var items []gatewayv1alpha1.CachedResource
	switch o := obj.(type) {
	case *gatewayv1alpha1.CachedResource:
		items = []gatewayv1alpha1.CachedResource{*o}
		table.ResourceVersion = o.ResourceVersion
	case *gatewayv1alpha1.CachedResourceList:
		items = o.Items
		table.ResourceVersion, table.Continue, table.RemainingItemCount = o.ResourceVersion, o.Continue, o.RemainingItemCount
	default:
		return nil, fmt.Errorf("cannot convert %T to a table", obj)
	}
	for i := range items {
		cr := &items[i]
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells:  row(cr),
			Object: runtime.RawExtension{Object: cr},
		})
	}
	return table, nil
}

func row(cr *gatewayv1alpha1.CachedResource) []interface{} {
	// Spelled as in a manifest: an empty cell would shift the columns of
	// `kubectl get --no-headers` for scripts.
	group := cr.Spec.Group
	if group == "" {
		group = `""`
	}
	ready := "Unknown"
	if c := meta.FindStatusCondition(cr.Status.Conditions, gatewayv1alpha1.ConditionReady); c != nil {
		ready = string(c.Status)
	}
	age := "<unknown>"
	if !cr.CreationTimestamp.IsZero() {
		age = duration.HumanDuration(metav1.Now().Sub(cr.CreationTimestamp.Time))
	}
	st := &cr.Status
	return []interface{}{cr.Name, group, cr.Spec.Version, cr.Spec.Resource,
		int64(st.SelectedClusters), int64(st.SyncedClusters), st.Objects, ready, age, st.Bytes}
}
