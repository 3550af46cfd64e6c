// Package cachedresource is the registry of the CachedResource resource: its
// etcd storage, strategies and table columns, and the rule that one
// CachedResource names a group, version and resource.
package cachedresource

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/client-go/tools/cache"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/registry/listwatch"
	"github.com/kubewharf/kube-gateway/registry/statusrest"
)

// Storage is everything served under cachedresources.
type Storage struct {
	CachedResource *REST
	Status         *statusrest.REST
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
		DefaultQualifiedResource:  gatewayv1alpha1.Resource("cachedresources"),
		SingularQualifiedResource: gatewayv1alpha1.Resource("cachedresource"),
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		ResetFieldsStrategy:       s,
		TableConvertor:            tableConvertor{},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter}); err != nil {
		return nil, err
	}

	return &Storage{CachedResource: &REST{store}, Status: statusrest.New(store, statusStrategy{s})}, nil
}

// ListWatch lists and watches CachedResources straight from the store.
func (r *REST) ListWatch() cache.ListerWatcher { return listwatch.For(r) }
