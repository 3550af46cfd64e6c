// Package listwatch lists and watches the gateway's own objects straight from
// their registry store, so that its controllers see exactly what the API
// serves without a loopback client.
package listwatch

import (
	"context"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/tools/cache"
)

// Store is what a registry store offers to list and watch.
type Store interface {
	rest.Lister
	rest.Watcher
}

// For returns a ListerWatcher over store.
func For(store Store) cache.ListerWatcher {
	toInternal := func(opts metav1.ListOptions) (*metainternalversion.ListOptions, error) {
		var internal metainternalversion.ListOptions
		if err := metainternalversion.Convert_v1_ListOptions_To_internalversion_ListOptions(&opts, &internal, nil); err != nil {
			return nil, err
		}
		return &internal, nil
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			internal, err := toInternal(opts)
			if err != nil {
				return nil, err
			}
			return store.List(ctx, internal)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			internal, err := toInternal(opts)
			if err != nil {
				return nil, err
			}
			w, err := store.Watch(ctx, internal)
			if err != nil {
				return nil, err
			}
			// The watch cache wraps objects to share their serializations;
			// informers want the objects themselves.
			return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
				if co, ok := ev.Object.(runtime.CacheableObject); ok {
					ev.Object = co.GetObject()
				}
				return ev, true
			}), nil
		},
	}
}
