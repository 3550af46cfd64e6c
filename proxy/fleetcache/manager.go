// Package fleetcache keeps, for every CachedResource and every UpstreamCluster
// it selects, a cache of that resource of that member: filled by list and
// watch (client-go's Reflector) with the member's cache identity
// (spec.clientConfig.cacheSecretRef), reached as requests reach it. Objects
// are kept as JSON; all caches together stay under --fleet-cache-memory.
// Manager starts, restarts and stops caches as CachedResources,
// UpstreamClusters and their Secrets change, and reports each cluster's
// caches for status.caches; Aggregator sums them into CachedResource status.
package fleetcache

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
)

// ReportPeriod is how often the counts of every cluster's caches (objects,
// bytes, resourceVersion) are reported; a change of state (synced, reason,
// staleness) is reported at once.
const ReportPeriod = 30 * time.Second

// Connect opens the Access toward the member of uc with its cache Secret
// (nil when absent) and konnectivity Secret (nil when absent or unused).
// Errors are *cluster.ConfigError.
type Connect func(uc *gatewayv1alpha1.UpstreamCluster, cacheSecret, tunnelSecret *corev1.Secret) (Access, error)

// ConnectMember is the Connect of the gateway: package cluster's transports
// with the cache identity.
func ConnectMember(uc *gatewayv1alpha1.UpstreamCluster, cacheSecret, tunnelSecret *corev1.Secret) (Access, error) {
	a, err := cluster.CompileCacheAccess(uc, cacheSecret, tunnelSecret)
	if err != nil {
		return nil, err
	}
	acc, err := NewAccess(a)
	if err != nil {
		a.Close()
		return nil, err
	}
	return acc, nil
}

// Config is what a Manager needs.
type Config struct {
	// Clusters, Secrets and Resources are informers of UpstreamClusters,
	// of the Secrets of the gateway's Secret namespace and of
	// CachedResources; the Manager adds handlers and an index to the first
	// two before they start, and runs Resources itself.
	Clusters, Secrets, Resources cache.SharedIndexInformer
	// Connect opens a member; nil: ConnectMember.
	Connect Connect
	// Memory bounds what the caches hold.
	Memory *Memory
	// Report is told the status.caches of a cluster: after each change of
	// the cluster's caches, and every ReportPeriod. nil entries: none.
	Report func(cluster string, caches []gatewayv1alpha1.UpstreamClusterCacheStatus)
	Clock  clock.PassiveClock
}

// member is the caches of one cluster.
type member struct {
	// version is what access was opened from; a change restarts every cache.
	version string
	access  Access
	// problem is why the member cannot be cached, if so.
	problem *problem
	caches  map[string]*entryCache // by CachedResource name
	// selected names the CachedResources that select the member, as of the
	// last sync: when neither it nor version changes, a sync has nothing new
	// to report (the cluster's own status writes come back as updates).
	selected string
}

// problem is why a member cannot be cached: a CamelCase reason and a message.
type problem struct {
	reason, message string
}

// entryCache is one CachedResource's cache on a member.
type entryCache struct {
	resource gatewayv1alpha1.CachedResource // the spec it was started from
	cache    *resourceCache
}

// Manager keeps the caches.
type Manager struct {
	cfg   Config
	queue workqueue.TypedRateLimitingInterface[string]
	ctx   context.Context // of Run, for the caches

	// mu guards members: written by syncs, read by every member read of a
	// fan-out (lookup), which must not wait for each other.
	mu      sync.RWMutex
	members map[string]*member

	// reporting orders reports: each is computed and handed on under it, so
	// that one computed before a change never lands after one computed
	// since (reports come from syncs, caches and the periodic count).
	reporting sync.Mutex
}

const cacheSecretIndex = "cacheSecret"

// NewManager returns a Manager; call Run.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Connect == nil {
		cfg.Connect = ConnectMember
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Memory == nil {
		cfg.Memory = NewMemory(0)
	}
	m := &Manager{cfg: cfg, members: map[string]*member{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "fleetcache"})}
	if err := cfg.Clusters.AddIndexers(cache.Indexers{cacheSecretIndex: func(obj any) ([]string, error) {
		cc := obj.(*gatewayv1alpha1.UpstreamCluster).Spec.ClientConfig
		var keys []string
		if r := cc.CacheSecretRef; r != nil {
			keys = append(keys, r.Namespace+"/"+r.Name)
		}
		if k := cc.Konnectivity; k != nil {
			keys = append(keys, k.SecretRef.Namespace+"/"+k.SecretRef.Name)
		}
		return keys, nil
	}}); err != nil {
		return nil, err
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			m.queue.Add(key)
		}
	}
	if _, err := cfg.Clusters.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return nil, err
	}
	users := func(obj any) {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			return
		}
		found, _ := cfg.Clusters.GetIndexer().ByIndex(cacheSecretIndex, key)
		for _, uc := range found {
			enqueue(uc)
		}
	}
	if _, err := cfg.Secrets.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    users,
		UpdateFunc: func(_, obj any) { users(obj) },
		DeleteFunc: users,
	}); err != nil {
		return nil, err
	}
	all := func(any) {
		for _, k := range cfg.Clusters.GetIndexer().ListKeys() {
			m.queue.Add(k)
		}
	}
	if _, err := cfg.Resources.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    all,
		UpdateFunc: func(_, obj any) { all(obj) },
		DeleteFunc: all,
	}); err != nil {
		return nil, err
	}
	return m, nil
}

// Run keeps the caches until ctx ends; then it stops them all.
func (m *Manager) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	defer m.queue.ShutDown()
	m.ctx = ctx
	go m.cfg.Resources.RunWithContext(ctx)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, m.cfg.Clusters.HasSynced, m.cfg.Secrets.HasSynced, m.cfg.Resources.HasSynced) {
		return
	}
	go wait.UntilWithContext(ctx, m.work, time.Second)
	// Every sync reports its cluster, so the periodic reports start one
	// period in rather than repeat them all at start.
	go func() {
		tick := time.NewTicker(ReportPeriod)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				m.retryOverLimit()
				m.reportAll()
			}
		}
	}()
	<-ctx.Done()
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, mb := range m.members {
		mb.stop()
		delete(m.members, name)
	}
}

func (m *Manager) work(ctx context.Context) {
	for {
		name, shutdown := m.queue.Get()
		if shutdown {
			return
		}
		m.sync(ctx, name)
		m.queue.Done(name)
	}
}

func (mb *member) stop() {
	var stopped []<-chan struct{}
	for _, e := range mb.caches {
		e.cache.Stop()
		stopped = append(stopped, e.cache.done)
	}
	mb.caches = map[string]*entryCache{}
	if access := mb.access; access != nil {
		// Closed once the caches' watches ended: an open watch keeps its
		// connection busy, which closing idle connections would leave up
		// until the transport's idle timeout.
		go func() {
			for _, done := range stopped {
				<-done
			}
			access.Close()
		}()
		mb.access = nil
	}
}

// GVR of a CachedResource.
func GVR(cr *gatewayv1alpha1.CachedResource) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: cr.Spec.Group, Version: cr.Spec.Version, Resource: cr.Spec.Resource}
}

// Selects reports whether cr caches the resource on uc.
func Selects(cr *gatewayv1alpha1.CachedResource, uc *gatewayv1alpha1.UpstreamCluster) bool {
	if cr.Spec.ClusterSelector == nil {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(cr.Spec.ClusterSelector)
	if err != nil { // validation refuses it; select nothing
		return false
	}
	return sel.Matches(labels.Set(uc.Labels))
}

func (m *Manager) secret(ref gatewayv1alpha1.SecretReference) (*corev1.Secret, string) {
	obj, ok, _ := m.cfg.Secrets.GetIndexer().GetByKey(ref.Namespace + "/" + ref.Name)
	if !ok {
		return nil, "absent"
	}
	s := obj.(*corev1.Secret)
	return s, string(s.UID) + "/" + s.ResourceVersion
}

// sync brings the caches of cluster name in line with its UpstreamCluster,
// Secrets and the CachedResources that select it.
func (m *Manager) sync(ctx context.Context, name string) {
	logger := klog.FromContext(ctx).WithValues("upstreamcluster", name)
	obj, exists, _ := m.cfg.Clusters.GetIndexer().GetByKey(name)
	var selected []*gatewayv1alpha1.CachedResource
	var uc *gatewayv1alpha1.UpstreamCluster
	if exists {
		uc = obj.(*gatewayv1alpha1.UpstreamCluster)
		for _, o := range m.cfg.Resources.GetIndexer().List() {
			if cr := o.(*gatewayv1alpha1.CachedResource); Selects(cr, uc) {
				selected = append(selected, cr)
			}
		}
	}
	m.mu.Lock()
	mb := m.members[name]
	if len(selected) == 0 {
		if mb != nil {
			mb.stop()
			delete(m.members, name)
			logger.V(2).Info("Stopped the caches of the member")
		}
		m.mu.Unlock()
		if exists {
			m.report(name)
		}
		return
	}
	slices.SortFunc(selected, func(a, b *gatewayv1alpha1.CachedResource) int { return strings.Compare(a.Name, b.Name) })
	fresh := mb == nil
	if fresh {
		mb = &member{caches: map[string]*entryCache{}}
		m.members[name] = mb
	}
	var shape strings.Builder
	for _, cr := range selected {
		fmt.Fprintf(&shape, "%s/%s/%s;", cr.Name, cr.UID, GVR(cr))
	}

	// What the connection is made of: a change restarts every cache.
	var cacheSecret, tunnelSecret *corev1.Secret
	version := "none"
	if ref := uc.Spec.ClientConfig.CacheSecretRef; ref != nil {
		var sv, tv string
		cacheSecret, sv = m.secret(*ref)
		if k := uc.Spec.ClientConfig.Konnectivity; k != nil {
			tunnelSecret, tv = m.secret(k.SecretRef)
		}
		spec, _ := json.Marshal([]any{uc.Spec.Servers, uc.Spec.ClientConfig})
		version = fmt.Sprintf("%s/%s/%s/%s", uc.UID, spec, sv, tv)
	}
	changed := fresh || version != mb.version || shape.String() != mb.selected
	mb.selected = shape.String()
	if version != mb.version {
		mb.stop()
		mb.version, mb.problem = version, nil
		switch {
		case uc.Spec.ClientConfig.CacheSecretRef == nil:
			mb.problem = &problem{ReasonNoCacheIdentity, "spec.clientConfig.cacheSecretRef is not set: " +
				"name a hub Secret with an identity that may list and watch the cached resources on the member"}
		default:
			access, err := m.cfg.Connect(uc, cacheSecret, tunnelSecret)
			if err != nil {
				mb.problem = &problem{cluster.ConfigErrorReason(err), err.Error()}
				logger.Info("Member cannot be cached", "reason", err.Error())
			} else {
				mb.access = access
			}
		}
	}
	want := map[string]*gatewayv1alpha1.CachedResource{}
	for _, cr := range selected {
		want[cr.Name] = cr
	}
	for crName, e := range mb.caches {
		if cr := want[crName]; cr == nil || cr.UID != e.resource.UID || GVR(cr) != GVR(&e.resource) {
			e.cache.Stop()
			delete(mb.caches, crName)
		}
	}
	if mb.access != nil {
		for crName, cr := range want {
			if mb.caches[crName] != nil {
				continue
			}
			gvr := GVR(cr)
			c := startCache(m.ctx, gvr, mb.access.Source(gvr), m.cfg.Memory, m.cfg.Clock, func() { m.report(name) })
			mb.caches[crName] = &entryCache{resource: *cr.DeepCopy(), cache: c}
			logger.V(2).Info("Started a cache", "cachedResource", crName, "resource", gvr.String())
		}
	}
	m.mu.Unlock()
	if changed {
		m.report(name)
	}
}

// Caches returns the status.caches of cluster name, sorted by CachedResource;
// ok false when the gateway caches nothing of it.
func (m *Manager) Caches(name string) (_ []gatewayv1alpha1.UpstreamClusterCacheStatus, ok bool) {
	obj, exists, _ := m.cfg.Clusters.GetIndexer().GetByKey(name)
	if !exists {
		return nil, false
	}
	uc := obj.(*gatewayv1alpha1.UpstreamCluster)
	m.mu.RLock()
	mb := m.members[name]
	var p *problem
	var caches map[string]*entryCache
	if mb != nil {
		p, caches = mb.problem, maps.Clone(mb.caches)
	}
	m.mu.RUnlock()
	var out []gatewayv1alpha1.UpstreamClusterCacheStatus
	for _, o := range m.cfg.Resources.GetIndexer().List() {
		cr := o.(*gatewayv1alpha1.CachedResource)
		if !Selects(cr, uc) {
			continue
		}
		var st gatewayv1alpha1.UpstreamClusterCacheStatus
		switch e := caches[cr.Name]; {
		case p != nil:
			st.Reason, st.Message = p.reason, truncate(p.message)
		case e != nil:
			st = e.cache.status()
		default:
			st.Reason, st.Message = ReasonListing, "the cache is starting"
		}
		st.CachedResource, st.Group, st.Version, st.Resource = cr.Name, cr.Spec.Group, cr.Spec.Version, cr.Spec.Resource
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b gatewayv1alpha1.UpstreamClusterCacheStatus) int {
		switch {
		case a.CachedResource < b.CachedResource:
			return -1
		case a.CachedResource > b.CachedResource:
			return 1
		}
		return 0
	})
	return out, true
}

func (m *Manager) report(name string) {
	if m.cfg.Report == nil {
		return
	}
	m.reporting.Lock()
	defer m.reporting.Unlock()
	if caches, ok := m.Caches(name); ok {
		m.cfg.Report(name, caches)
	}
}

func (m *Manager) reportAll() {
	for _, name := range m.cfg.Clusters.GetIndexer().ListKeys() {
		m.report(name)
	}
}

// retryOverLimit starts again the caches that stopped at the Memory bound
// and now fit in what is free (other caches went away): as many as fit,
// each counted at what it needed when it stopped, so that they do not all
// start at once into the same room.
func (m *Manager) retryOverLimit() {
	limit := m.cfg.Memory.Limit()
	if limit <= 0 {
		return
	}
	free := limit - m.cfg.Memory.Used()
	m.mu.Lock()
	var retry []string
	for name, mb := range m.members {
		for crName, e := range mb.caches {
			if e.cache.current().reason != ReasonMemoryLimit {
				continue
			}
			if needed := e.cache.store.Needed(); needed <= free {
				free -= needed
				delete(mb.caches, crName) // stopped already; sync starts it anew
				retry = append(retry, name)
			}
		}
	}
	m.mu.Unlock()
	for _, name := range retry {
		m.queue.Add(name)
	}
}

// lookup returns the cache of gvr on cluster name and the member's Access,
// nil when the gateway keeps none.
func (m *Manager) lookup(name string, gvr schema.GroupVersionResource) (*resourceCache, Access) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	mb := m.members[name]
	if mb == nil {
		return nil, nil
	}
	for _, e := range mb.caches {
		if GVR(&e.resource) == gvr {
			return e.cache, mb.access
		}
	}
	return nil, nil
}
