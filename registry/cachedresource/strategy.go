package cachedresource

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
}

var (
	_ rest.RESTCreateStrategy  = strategy{}
	_ rest.RESTUpdateStrategy  = strategy{}
	_ rest.RESTDeleteStrategy  = strategy{}
	_ rest.ResetFieldsStrategy = strategy{}
)

func newStrategy(typer runtime.ObjectTyper) strategy {
	return strategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator}
}

func (strategy) NamespaceScoped() bool { return false }

// PrepareForCreate drops any status and starts the generation at 1.
func (strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	cr := obj.(*gatewayv1alpha1.CachedResource)
	cr.Status = gatewayv1alpha1.CachedResourceStatus{}
	cr.Generation = 1
}

// PrepareForUpdate keeps the stored status and bumps the generation when the spec
// changes.
func (strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newCR, oldCR := obj.(*gatewayv1alpha1.CachedResource), old.(*gatewayv1alpha1.CachedResource)
	newCR.Status = oldCR.Status
	if !apiequality.Semantic.DeepEqual(newCR.Spec, oldCR.Spec) {
		newCR.Generation = oldCR.Generation + 1
	}
}

func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateCachedResource(obj.(*gatewayv1alpha1.CachedResource))
}

func (strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateCachedResourceUpdate(obj.(*gatewayv1alpha1.CachedResource), old.(*gatewayv1alpha1.CachedResource))
}

func (strategy) AllowCreateOnUpdate(context.Context) bool      { return false }
func (strategy) AllowUnconditionalUpdate(context.Context) bool { return true }
func (strategy) Canonicalize(runtime.Object)                   {}

func (strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }

func (strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
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
	newCR, oldCR := obj.(*gatewayv1alpha1.CachedResource), old.(*gatewayv1alpha1.CachedResource)
	newCR.Spec = oldCR.Spec
	newCR.Generation = oldCR.Generation
	newCR.Labels, newCR.Annotations = oldCR.Labels, oldCR.Annotations
	newCR.Finalizers, newCR.OwnerReferences = oldCR.Finalizers, oldCR.OwnerReferences
}

func (statusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateCachedResourceStatusUpdate(obj.(*gatewayv1alpha1.CachedResource), old.(*gatewayv1alpha1.CachedResource))
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
