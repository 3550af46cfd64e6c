package cachedresource

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/registry/validate"
)

// Create refuses a CachedResource whose group, version and resource another
// CachedResource already names, then creates it.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	return r.Store.Create(ctx, obj, validate.Check(r.checkUniqueResource).OnCreate(createValidation), options)
}

// Update refuses a CachedResource whose group, version and resource another
// CachedResource already names, then updates it.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	check := validate.Check(r.checkUniqueResource)
	return r.Store.Update(ctx, name, objInfo, check.OnCreate(createValidation), check.OnUpdate(updateValidation), forceAllowCreate, options)
}

// checkUniqueResource answers 422 naming the other CachedResource when it
// names obj's group, version and resource: one resource has one cache, and
// one place that says on which clusters. Two writes at the same moment can
// still both pass.
func (r *REST) checkUniqueResource(ctx context.Context, obj runtime.Object) error {
	cr, ok := obj.(*gatewayv1alpha1.CachedResource)
	if !ok {
		return nil
	}
	list, err := r.Store.List(ctx, &metainternalversion.ListOptions{})
	if err != nil {
		return err
	}
	want := gvr(cr)
	for i := range list.(*gatewayv1alpha1.CachedResourceList).Items {
		other := &list.(*gatewayv1alpha1.CachedResourceList).Items[i]
		if other.Name == cr.Name || gvr(other) != want {
			continue
		}
		errs := field.ErrorList{field.Invalid(field.NewPath("spec", "resource"), cr.Spec.Resource,
			fmt.Sprintf("%s is already cached by CachedResource %q: one CachedResource per group, version and resource; change that one instead",
				describe(want), other.Name))}
		return apierrors.NewInvalid(gatewayv1alpha1.SchemeGroupVersion.WithKind("CachedResource").GroupKind(), cr.Name, errs)
	}
	return nil
}

func gvr(cr *gatewayv1alpha1.CachedResource) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: cr.Spec.Group, Version: cr.Spec.Version, Resource: cr.Spec.Resource}
}

// describe names a resource as a person reads it: configmaps (v1, core group),
// deployments (apps/v1).
func describe(r schema.GroupVersionResource) string {
	if r.Group == "" {
		return fmt.Sprintf("%s (%s, core group)", r.Resource, r.Version)
	}
	return fmt.Sprintf("%s (%s)", r.Resource, r.GroupVersion())
}
