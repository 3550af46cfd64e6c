// Package upstreamcluster is the registry of the UpstreamCluster resource: its etcd
// storage, strategies, table columns, and the proxy subresource.
package upstreamcluster

import (
	"context"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/tools/cache"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1/validation"
	"github.com/kubewharf/kube-gateway/registry/listwatch"
	"github.com/kubewharf/kube-gateway/registry/statusrest"
)

// Storage is everything served under upstreamclusters.
type Storage struct {
	UpstreamCluster *REST
	Status          *statusrest.REST
}

// REST is the main resource: the generic store plus discovery metadata.
type REST struct {
	*genericregistry.Store
	// watches, when set, passes every watch served through the JSON cache.
	watches func(watch.Interface) watch.Interface
}

// Watch implements rest.Watcher: the store's watch, its events written from
// the JSON cache.
func (r *REST) Watch(ctx context.Context, opts *metainternalversion.ListOptions) (watch.Interface, error) {
	w, err := r.Store.Watch(ctx, opts)
	if err != nil || r.watches == nil {
		return w, err
	}
	return r.watches(w), nil
}

var _ rest.ShortNamesProvider = &REST{}

// ShortNames implements rest.ShortNamesProvider: `kubectl get uc`.
func (r *REST) ShortNames() []string { return []string{"uc"} }

// NewStorage builds the etcd-backed storage of UpstreamClusters: the generic
// registry store with this package's strategies. scheme is a server scheme
// (AddToScheme). watches, if not nil, wraps each watch the API serves
// (jsoncache.Cache.Watch).
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts validation.Options, watches func(watch.Interface) watch.Interface) (*Storage, error) {
	s := newStrategy(scheme, opts)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &gatewayv1alpha1.UpstreamCluster{} },
		NewListFunc:               func() runtime.Object { return &gatewayv1alpha1.UpstreamClusterList{} },
		DefaultQualifiedResource:  gatewayv1alpha1.Resource("upstreamclusters"),
		SingularQualifiedResource: gatewayv1alpha1.Resource("upstreamcluster"),
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		ResetFieldsStrategy:       s,
		TableConvertor:            tableConvertor{},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter}); err != nil {
		return nil, err
	}

	return &Storage{UpstreamCluster: &REST{Store: store, watches: watches}, Status: statusrest.New(store, statusStrategy{s})}, nil
}

// ListWatch lists and watches UpstreamClusters straight from the store, past
// the JSON cache: the gateway's controllers never encode them.
func (r *REST) ListWatch() cache.ListerWatcher { return listwatch.For(r.Store) }
