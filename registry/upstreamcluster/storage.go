// Package upstreamcluster is the registry of the UpstreamCluster resource: its etcd
// storage, strategies, table columns, and the proxy subresource.
package upstreamcluster

import (
	"context"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// watches, when set, passes every watch served through the JSON cache,
	// with its initial events (jsoncache.Cache.Watch).
	watches func(initial []watch.Event, w watch.Interface) watch.Interface
}

// Watch implements rest.Watcher: the store's watch, its events written from
// the JSON cache. A watch that starts with the current state gets it from a
// LIST of the watch cache and watches from the LIST's resourceVersion: the
// watch cache would deep-copy each initial event for its watcher, one
// goroutine per watch, while a LIST's items share what the cache holds, which
// encoding only reads (docs/benchmark.md, "Per registered UpstreamCluster").
func (r *REST) Watch(ctx context.Context, opts *metainternalversion.ListOptions) (watch.Interface, error) {
	if r.watches == nil {
		return r.Store.Watch(ctx, opts)
	}
	if !startsWithState(opts) {
		w, err := r.Store.Watch(ctx, opts)
		if err != nil {
			return nil, err
		}
		return r.watches(nil, w), nil
	}
	// The state as the watch cache would send it: consistent from no
	// resourceVersion, any from "0".
	obj, err := r.Store.List(ctx, &metainternalversion.ListOptions{
		LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector, ResourceVersion: opts.ResourceVersion})
	if err != nil {
		return nil, err
	}
	list := obj.(*gatewayv1alpha1.UpstreamClusterList)
	initial := make([]watch.Event, len(list.Items), len(list.Items)+1)
	for i := range list.Items {
		initial[i] = watch.Event{Type: watch.Added, Object: &list.Items[i]}
	}
	if opts.AllowWatchBookmarks {
		// The end of the initial events, as the watch cache marks it for a
		// watch-list request (sendInitialEvents, which the API server also
		// sets on the watches from no resourceVersion or "0").
		end := &gatewayv1alpha1.UpstreamCluster{ObjectMeta: metav1.ObjectMeta{ResourceVersion: list.ResourceVersion,
			Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
		initial = append(initial, watch.Event{Type: watch.Bookmark, Object: end})
	}
	from := opts.DeepCopy()
	from.ResourceVersion, from.ResourceVersionMatch, from.SendInitialEvents = list.ResourceVersion, "", nil
	w, err := r.Store.Watch(ctx, from)
	if err != nil {
		return nil, err
	}
	return r.watches(initial, w), nil
}

// startsWithState tells the watches that start with an ADDED event of every
// object, from no resourceVersion or "0": without sendInitialEvents (the
// legacy watch) or with it true (a watch-list request, which the API server
// makes of the legacy watch when the WatchList feature is on).
func startsWithState(opts *metainternalversion.ListOptions) bool {
	if opts == nil || opts.ResourceVersion != "" && opts.ResourceVersion != "0" {
		return false
	}
	return opts.SendInitialEvents == nil || *opts.SendInitialEvents
}

var _ rest.ShortNamesProvider = &REST{}

// ShortNames implements rest.ShortNamesProvider: `kubectl get uc`.
func (r *REST) ShortNames() []string { return []string{"uc"} }

// NewStorage builds the etcd-backed storage of UpstreamClusters: the generic
// registry store with this package's strategies. scheme is a server scheme
// (AddToScheme). watches, if not nil, wraps each watch the API serves
// (jsoncache.Cache.Watch).
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts validation.Options, watches func([]watch.Event, watch.Interface) watch.Interface) (*Storage, error) {
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
