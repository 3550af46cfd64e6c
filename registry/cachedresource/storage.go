// Package cachedresource is the registry of the CachedResource resource: its
// etcd storage, strategies and table columns, and the rule that one
// CachedResource names a group, version and resource.
package cachedresource

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/registry/listwatch"
)

// Storage is everything served under cachedresources.
type Storage struct {
	CachedResource *REST
	Status         *StatusREST
}

// REST is the main resource: the generic store, with the check that no two
// CachedResources name the same resource (gvr.go).
type REST struct {
	*genericregistry.Store
}

// NewStorage builds the etcd-backed storage of CachedResources: the generic
// registry store with this package's strategies. scheme is a server scheme.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*Storage, error) {
	s := newStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &gatewayv1alpha1.CachedResource{} },
		NewListFunc:               func() runtime.Object { return &gatewayv1alpha1.CachedResourceList{} },
		PredicateFunc:             matcher,
		DefaultQualifiedResource:  gatewayv1alpha1.Resource("cachedresources"),
		SingularQualifiedResource: gatewayv1alpha1.Resource("cachedresource"),
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		ResetFieldsStrategy:       s,
		TableConvertor:            tableConvertor{},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: attrs}); err != nil {
		return nil, err
	}

	statusStore := *store
	status := statusStrategy{s}
	statusStore.CreateStrategy, statusStore.DeleteStrategy = nil, nil
	statusStore.UpdateStrategy, statusStore.ResetFieldsStrategy = status, status
	return &Storage{CachedResource: &REST{store}, Status: &StatusREST{store: &statusStore}}, nil
}

// ListWatch lists and watches CachedResources straight from the store.
func (r *REST) ListWatch() cache.ListerWatcher { return listwatch.For(r) }

// StatusREST serves the status subresource.
type StatusREST struct {
	store *genericregistry.Store
}

var (
	_ rest.Patcher             = &StatusREST{}
	_ rest.ResetFieldsStrategy = &StatusREST{}
)

func (r *StatusREST) New() runtime.Object { return &gatewayv1alpha1.CachedResource{} }

// Destroy does nothing: the main store owns the shared storage.
func (r *StatusREST) Destroy() {}

func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update writes only the status; the create path is refused.
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, _ bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

func (r *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

// matcher supports label selectors and the metadata field selectors.
func matcher(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: attrs}
}

func attrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	cr, ok := obj.(*gatewayv1alpha1.CachedResource)
	if !ok {
		return nil, nil, fmt.Errorf("not a CachedResource: %T", obj)
	}
	return cr.Labels, generic.ObjectMetaFieldsSet(&cr.ObjectMeta, false), nil
}
