// Package upstreamcluster is the registry of the UpstreamCluster resource: its etcd
// storage, strategies, table columns, and the proxy subresource.
package upstreamcluster

import (
	"k8s.io/apimachinery/pkg/runtime"
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

	return &Storage{UpstreamCluster: &REST{store}, Status: statusrest.New(store, statusStrategy{s})}, nil
}

// ListWatch lists and watches UpstreamClusters straight from the store.
func (r *REST) ListWatch() cache.ListerWatcher { return listwatch.For(r) }
