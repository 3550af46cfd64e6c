// Package upstreamcluster is the registry of the UpstreamCluster resource: its etcd
// storage, strategies, table columns, and the proxy subresource.
package upstreamcluster

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
	"github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1/validation"
	"github.com/kubewharf/kube-gateway/registry/listwatch"
)

// Storage is everything served under upstreamclusters.
type Storage struct {
	UpstreamCluster *REST
	Status          *StatusREST
}

// REST is the main resource: the generic store plus discovery metadata.
type REST struct {
	*genericregistry.Store
}

var _ rest.ShortNamesProvider = &REST{}

// ShortNames implements rest.ShortNamesProvider: `kubectl get uc`.
func (r *REST) ShortNames() []string { return []string{"uc"} }

// NewStorage builds the etcd-backed storage of UpstreamClusters: the generic
// registry store with this package's strategies. scheme is a server scheme
// (AddToScheme).
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts validation.Options) (*Storage, error) {
	s := newStrategy(scheme, opts)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &gatewayv1alpha1.UpstreamCluster{} },
		NewListFunc:               func() runtime.Object { return &gatewayv1alpha1.UpstreamClusterList{} },
		PredicateFunc:             matcher,
		DefaultQualifiedResource:  gatewayv1alpha1.Resource("upstreamclusters"),
		SingularQualifiedResource: gatewayv1alpha1.Resource("upstreamcluster"),
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
	return &Storage{UpstreamCluster: &REST{store}, Status: &StatusREST{store: &statusStore}}, nil
}

// StatusREST serves the status subresource.
type StatusREST struct {
	store *genericregistry.Store
}

var (
	_ rest.Patcher             = &StatusREST{}
	_ rest.ResetFieldsStrategy = &StatusREST{}
)

func (r *StatusREST) New() runtime.Object { return &gatewayv1alpha1.UpstreamCluster{} }

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
	uc, ok := obj.(*gatewayv1alpha1.UpstreamCluster)
	if !ok {
		return nil, nil, fmt.Errorf("not an UpstreamCluster: %T", obj)
	}
	return uc.Labels, generic.ObjectMetaFieldsSet(&uc.ObjectMeta, false), nil
}

// ListWatch lists and watches UpstreamClusters straight from the store.
func (r *REST) ListWatch() cache.ListerWatcher { return listwatch.For(r) }
