package upstreamcluster

import (
	"context"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1/validation"
)

// strategy is the behaviour of the main resource: the spec is written here, the
// status only through the status subresource.
type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
	validation validation.Options
}

var (
	_ rest.RESTCreateStrategy  = strategy{}
	_ rest.RESTUpdateStrategy  = strategy{}
	_ rest.RESTDeleteStrategy  = strategy{}
	_ rest.ResetFieldsStrategy = strategy{}
)

func newStrategy(typer runtime.ObjectTyper, opts validation.Options) strategy {
	return strategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator, validation: opts}
}

func (strategy) NamespaceScoped() bool { return false }

// PrepareForCreate drops any status and starts the generation at 1.
func (strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	uc := obj.(*gatewayv1alpha1.UpstreamCluster)
	uc.Status = gatewayv1alpha1.UpstreamClusterStatus{}
	uc.Generation = 1
}

// PrepareForUpdate keeps the stored status and bumps the generation when the spec
// changes.
func (strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newUC, oldUC := obj.(*gatewayv1alpha1.UpstreamCluster), old.(*gatewayv1alpha1.UpstreamCluster)
	newUC.Status = oldUC.Status
	if !apiequality.Semantic.DeepEqual(newUC.Spec, oldUC.Spec) {
		newUC.Generation = oldUC.Generation + 1
	}
}

func (s strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateUpstreamCluster(obj.(*gatewayv1alpha1.UpstreamCluster), s.validation)
}

func (s strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateUpstreamClusterUpdate(obj.(*gatewayv1alpha1.UpstreamCluster), old.(*gatewayv1alpha1.UpstreamCluster), s.validation)
}

func (strategy) AllowCreateOnUpdate(context.Context) bool      { return false }
func (strategy) AllowUnconditionalUpdate(context.Context) bool { return true }
func (strategy) Canonicalize(runtime.Object)                   {}

func (strategy) WarningsOnCreate(_ context.Context, obj runtime.Object) []string {
	return dispatchWarnings(obj.(*gatewayv1alpha1.UpstreamCluster))
}

func (strategy) WarningsOnUpdate(_ context.Context, obj, _ runtime.Object) []string {
	return dispatchWarnings(obj.(*gatewayv1alpha1.UpstreamCluster))
}

// GetResetFields tells server-side apply that the status is not owned through
// the main resource.
func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(gatewayv1alpha1.SchemeGroupVersion.String()): fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

// statusStrategy is the behaviour of the status subresource: only the status
// changes, the generation never does.
type statusStrategy struct {
	strategy
}

func (statusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newUC, oldUC := obj.(*gatewayv1alpha1.UpstreamCluster), old.(*gatewayv1alpha1.UpstreamCluster)
	newUC.Spec = oldUC.Spec
	newUC.Generation = oldUC.Generation
	newUC.Labels, newUC.Annotations = oldUC.Labels, oldUC.Annotations
	newUC.Finalizers, newUC.OwnerReferences = oldUC.Finalizers, oldUC.OwnerReferences
}

func (statusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateUpstreamClusterStatusUpdate(obj.(*gatewayv1alpha1.UpstreamCluster), old.(*gatewayv1alpha1.UpstreamCluster))
}

func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(gatewayv1alpha1.SchemeGroupVersion.String()): fieldpath.NewSet(
			fieldpath.MakePathOrDie("spec"),
			fieldpath.MakePathOrDie("metadata", "labels"),
			fieldpath.MakePathOrDie("metadata", "annotations"),
			fieldpath.MakePathOrDie("metadata", "finalizers"),
			fieldpath.MakePathOrDie("metadata", "ownerReferences"),
		),
	}
}
