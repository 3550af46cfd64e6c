package upstreamcluster

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/registry/validate"
)

// Create refuses an UpstreamCluster whose member-door names another cluster
// already serves, then creates it.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	return r.Store.Create(ctx, obj, validate.Check(r.checkServerNames).OnCreate(createValidation), options)
}

// Update refuses an UpstreamCluster whose member-door names another cluster
// already serves, then updates it.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	check := validate.Check(r.checkServerNames)
	return r.Store.Update(ctx, name, objInfo, check.OnCreate(createValidation), check.OnUpdate(updateValidation), forceAllowCreate, options)
}

// checkServerNames answers 422 naming both clusters when another stored
// UpstreamCluster serves one of obj's member-door names: a client's server
// name must pick one cluster. Two writes at the same moment can still both
// pass; the door then serves neither for that name (proxy/door).
func (r *REST) checkServerNames(ctx context.Context, obj runtime.Object) error {
	uc, ok := obj.(*gatewayv1alpha1.UpstreamCluster)
	if !ok || uc.Spec.SecureServing == nil || len(uc.Spec.SecureServing.ServerNames) == 0 {
		return nil
	}
	list, err := r.Store.List(ctx, &metainternalversion.ListOptions{})
	if err != nil {
		return err
	}
	servedBy := map[string]string{}
	for i := range list.(*gatewayv1alpha1.UpstreamClusterList).Items {
		other := &list.(*gatewayv1alpha1.UpstreamClusterList).Items[i]
		if other.Name == uc.Name || other.Spec.SecureServing == nil {
			continue
		}
		for _, n := range other.Spec.SecureServing.ServerNames {
			servedBy[n] = other.Name
		}
	}
	var errs field.ErrorList
	namesPath := field.NewPath("spec", "secureServing", "serverNames")
	for i, n := range uc.Spec.SecureServing.ServerNames {
		if other, ok := servedBy[n]; ok {
			errs = append(errs, field.Invalid(namesPath.Index(i), n, fmt.Sprintf("already served by UpstreamCluster %q: a server name picks one cluster", other)))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(gatewayv1alpha1.SchemeGroupVersion.WithKind("UpstreamCluster").GroupKind(), uc.Name, errs)
}
