package fleetcache

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/request"
	"github.com/kubewharf/kube-gateway/proxy/transport"
)

// Reasons in status.caches[].reason.
const (
	// ReasonSynced: the cache holds the member's objects and follows them.
	ReasonSynced = "Synced"
	// ReasonListing: the first list has not answered yet.
	ReasonListing = "Listing"
	// ReasonListFailed: the member refused or failed the list.
	ReasonListFailed = "ListFailed"
	// ReasonWatchFailed: the member refused or failed the watch.
	ReasonWatchFailed = "WatchFailed"
	// ReasonMemoryLimit: the caches would pass --fleet-cache-memory; this
	// cache dropped its objects and stopped.
	ReasonMemoryLimit = "MemoryLimit"
	// ReasonNoCacheIdentity: the cluster has no spec.clientConfig.cacheSecretRef.
	ReasonNoCacheIdentity = "NoCacheIdentity"
	// Configuration problems carry the reasons of package cluster, such as
	// SecretNotFound or InvalidSecret.
)

// Source lists and watches one resource of one member.
type Source = cache.ListerWatcher

// Access opens Sources toward one member; Close releases its connections.
type Access interface {
	Source(gvr schema.GroupVersionResource) Source
	Close()
}

// restAccess reaches a member's servers, one REST client per server; a
// Source moves to the next server when one fails.
type restAccess struct {
	access  *cluster.CacheAccess
	clients []rest.Interface
	next    atomic.Uint32 // the server to use
}

// NewAccess is the Access over a compiled cluster.CacheAccess. Its Sources
// ask for Tables with the objects in them (see tables.go), as a dynamic
// client would for the objects alone.
func NewAccess(a *cluster.CacheAccess) (Access, error) {
	d := &restAccess{access: a}
	for i, u := range a.Servers {
		cfg := dynamic.ConfigFor(&rest.Config{Host: u.String()})
		cfg.AcceptContentTypes = request.TableAccept
		cfg.GroupVersion, cfg.APIPath = nil, ""
		c, err := rest.UnversionedRESTClientForConfigAndClient(cfg, &http.Client{Transport: a.Transports[i]})
		if err != nil {
			return nil, err
		}
		d.clients = append(d.clients, c)
	}
	if len(d.clients) == 0 {
		return nil, &cluster.ConfigError{Reason: cluster.ReasonInvalidConfiguration, Err: errors.New("no enabled server in spec.servers")}
	}
	return d, nil
}

func (d *restAccess) Close() { d.access.Close() }

func (d *restAccess) Source(gvr schema.GroupVersionResource) Source {
	pick := func() (rest.Interface, uint32) {
		i := d.next.Load()
		return d.clients[int(i)%len(d.clients)], i
	}
	// A server that fails a list or a watch is left for the next one; a
	// failure from the member's answer itself (403, 404, 410) is not the
	// server's.
	failed := func(i uint32, err error) error {
		var status apierrors.APIStatus
		if err != nil && !errors.As(err, &status) {
			d.next.CompareAndSwap(i, i+1)
		}
		return transport.StripURL(err)
	}
	get := func(c rest.Interface, opts metav1.ListOptions) *rest.Request {
		return c.Get().AbsPath(resourcePath(gvr)).SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.Unversioned).
			Param("includeObject", string(metav1.IncludeObject))
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			c, i := pick()
			res := get(c, opts).Do(ctx)
			if err := res.Error(); err != nil { // the member's Status, as Raw would not say
				return nil, failed(i, err)
			}
			raw, err := res.Raw()
			if err != nil {
				return nil, failed(i, err)
			}
			return listFromTable(raw)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			c, i := pick()
			opts.Watch = true
			w, err := get(c, opts).Watch(ctx)
			if err != nil {
				return nil, failed(i, err)
			}
			return watch.Filter(w, eventFromTable), nil
		},
	}
}

// resourcePath is where gvr's objects of every namespace are listed.
func resourcePath(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return "/api/" + gvr.Version + "/" + gvr.Resource
	}
	return "/apis/" + gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}

// state is what status says of one cache.
type state struct {
	synced       bool
	reason       string
	message      string
	lastSyncTime time.Time
	staleSince   time.Time
}

// resourceCache keeps one resource of one member: a Reflector into a Store.
type resourceCache struct {
	gvr   schema.GroupVersionResource
	store *Store
	clock clock.PassiveClock
	// changed is told when the state changed (not the counts).
	changed func()
	stop    context.CancelFunc
	// done is closed once the reflector stopped (its watch ended).
	done chan struct{}

	mu    sync.Mutex
	state state
	// memberRV is the member's resourceVersion a consistent read last
	// found (see Reads.caughtUp).
	memberRV atomic.Pointer[string]
}

// startCache starts filling a cache of gvr from src until Stop.
func startCache(ctx context.Context, gvr schema.GroupVersionResource, src Source, memory *Memory, clk clock.PassiveClock, changed func()) *resourceCache {
	ctx, stop := context.WithCancel(ctx)
	c := &resourceCache{gvr: gvr, clock: clk, changed: changed, stop: stop, done: make(chan struct{}),
		state: state{reason: ReasonListing, message: "the first list has not answered yet"}}
	c.store = NewStore(memory, func() {
		stop()
		c.store.Drop()
		c.set(func(s *state) {
			c.unsync(s, ReasonMemoryLimit, "the gateway's caches would pass --fleet-cache-memory: this cache dropped its objects and stopped; "+
				"raise the flag, or select fewer clusters or resources")
		})
	})
	r := cache.NewReflectorWithOptions(c.observe(src), &unstructured.Unstructured{}, syncingStore{c.store, c}, cache.ReflectorOptions{
		Name:            gvr.String(),
		TypeDescription: gvr.String(),
	})
	go func() {
		defer close(c.done)
		r.RunWithContext(ctx)
	}()
	return c
}

// observe wraps src to learn what the reflector does not tell a Store: list
// and watch failures. The Reflector
// gives its error handler only through cache.Controller, which would bring a
// queue this cache does not need.
func (c *resourceCache) observe(src Source) Source {
	lw := cache.ToListerWatcherWithContext(src)
	// What src says of watch lists holds for the wrapper.
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			l, err := lw.ListWithContext(ctx, opts)
			if err != nil && ctx.Err() == nil {
				c.set(func(s *state) { c.unsync(s, ReasonListFailed, err.Error()) })
			}
			if err == nil {
				// A Table's columns ride on the list (listFromTable).
				if u, ok := l.(*unstructured.UnstructuredList); ok {
					_, columns, err := takeTableFields(u.Object)
					if err != nil {
						return nil, err
					}
					c.store.SetColumns(columns)
				}
				c.store.SetListKind(l.GetObjectKind().GroupVersionKind().Kind)
			}
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := lw.WatchWithContext(ctx, opts)
			if err != nil && ctx.Err() == nil && !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
				// An expired resourceVersion only makes the reflector list again.
				c.set(func(s *state) { c.unsync(s, ReasonWatchFailed, err.Error()) })
			}
			return w, err
		},
	}, src)
}

// syncingStore marks the cache synced once a complete list (or the initial
// events of a watch list) replaced the store's content.
type syncingStore struct {
	*Store
	c *resourceCache
}

func (s syncingStore) Replace(list []any, resourceVersion string) error {
	if err := s.Store.Replace(list, resourceVersion); err != nil {
		return err
	}
	s.c.set(func(st *state) {
		if !st.synced {
			st.lastSyncTime = s.c.clock.Now()
		}
		st.synced, st.reason, st.message, st.staleSince = true, ReasonSynced, "", time.Time{}
	})
	return nil
}

// unsync marks s not synced for reason; staleSince is kept from the first
// time it stopped being synced.
func (c *resourceCache) unsync(s *state, reason, message string) {
	if s.synced || (s.staleSince.IsZero() && !s.lastSyncTime.IsZero()) {
		s.staleSince = c.clock.Now()
	}
	s.synced, s.reason, s.message = false, reason, message
}

func (c *resourceCache) set(fn func(*state)) {
	c.mu.Lock()
	if c.state.reason == ReasonMemoryLimit { // final until the cache is replaced
		c.mu.Unlock()
		return
	}
	before := c.state
	fn(&c.state)
	after := c.state
	c.mu.Unlock()
	if before != after && c.changed != nil {
		c.changed()
	}
}

// current is the cache's state now.
func (c *resourceCache) current() state {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// Stop stops filling the cache and frees its objects.
func (c *resourceCache) Stop() {
	c.stop()
	c.store.Drop()
}

// status is the cache's entry in status.caches (without the CachedResource's
// name and resource).
func (c *resourceCache) status() gatewayv1alpha1.UpstreamClusterCacheStatus {
	s := c.current()
	objects, bytes, rv := c.store.Counts()
	st := gatewayv1alpha1.UpstreamClusterCacheStatus{Synced: s.synced, Reason: s.reason, Message: truncate(s.message),
		Objects: objects, Bytes: bytes, ResourceVersion: rv}
	if !s.lastSyncTime.IsZero() {
		st.LastSyncTime = ptrTime(s.lastSyncTime)
	}
	if !s.staleSince.IsZero() {
		st.StaleSince = ptrTime(s.staleSince)
	}
	return st
}

// ptrTime is t as the API keeps it (seconds), so that a status read back
// compares equal.
func ptrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t).Rfc3339Copy()
	return &mt
}

// maxMessageLen caps a message in status: errors from members can be long.
const maxMessageLen = 1024

func truncate(s string) string {
	if len(s) <= maxMessageLen {
		return s
	}
	s = s[:maxMessageLen]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
