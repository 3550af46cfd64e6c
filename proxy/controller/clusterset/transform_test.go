package clusterset

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

func TestDropManagedFields(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	stored := gatewayv1alpha1.UpstreamCluster{ObjectMeta: metav1.ObjectMeta{Name: "member-a", ManagedFields: managed}}
	// The informer's copy of a listed object shares the slice with the
	// storage's object: only the copy's field changes.
	listed := stored
	out, err := DropManagedFields(&listed)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*gatewayv1alpha1.UpstreamCluster); got.ManagedFields != nil || got.Name != "member-a" {
		t.Errorf("transformed: name %q, managed fields %v; want member-a and none", got.Name, got.ManagedFields)
	}
	if len(stored.ManagedFields) != 1 || stored.ManagedFields[0].Manager != "kubectl" {
		t.Errorf("the stored object's managed fields changed: %v", stored.ManagedFields)
	}
	// What has no object metadata passes unchanged.
	tombstone := cache.DeletedFinalStateUnknown{Key: "member-a"}
	if out, err := DropManagedFields(tombstone); err != nil || out != tombstone {
		t.Errorf("tombstone: %v, %v; want it unchanged", out, err)
	}
}
