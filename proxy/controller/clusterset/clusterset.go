// Package clusterset keeps the compiled form of every UpstreamCluster. A controller
// watches UpstreamClusters and the credential Secrets they reference, compiles a
// cluster when its generation or its Secret changes, and swaps it in atomically.
// Requests only read: a lookup is one atomic load and a map read.
package clusterset

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/controller/served"
	"github.com/kubewharf/kube-gateway/proxy/door"
	"github.com/kubewharf/kube-gateway/proxy/health"
	"github.com/kubewharf/kube-gateway/proxy/transport"
)

// entry is the state of one UpstreamCluster: compiled, or why it could not be.
type entry struct {
	cluster *cluster.Cluster
	err     error
	// door is the cluster's member door, or doorErr why it cannot serve;
	// both nil when spec.secureServing is not set.
	door    *door.Door
	doorErr error
	// doorNames are the server names of spec.secureServing, whether or not
	// its door can serve (a client then learns why not).
	doorNames []string
	version   string // what it was compiled from; equal versions need no recompile
	// stopHealth ends the health checking of cluster.
	stopHealth context.CancelFunc
}

// Hooks tell the rest of the gateway what happens to clusters. Any may be nil.
type Hooks struct {
	// Removed is told the name of every removed cluster.
	Removed func(name string)
	// Observed is told the health of a compiled cluster's servers, after it was
	// compiled and after every change; generation is the spec it was compiled from.
	Observed func(name string, generation int64, servers []health.ServerHealth)
	// Invalid is told when a cluster cannot be compiled (its Secret is missing or
	// unusable, or anything else cluster.Compile rejects): err is a
	// *cluster.ConfigError. The cluster serves no request until a later change
	// compiles, which Observed reports.
	Invalid func(name string, generation int64, err error)
	// Served is told, after a cluster compiled, whether the API groups and
	// resources its dispatch rules name are served by the member (see
	// package served): named false when the rules name none (then nothing
	// was asked), else what the member does not serve. It comes from a
	// goroutine of the cluster's own once the member's discovery answers.
	Served func(name string, generation int64, named bool, unserved []string)
	// Door is told, after a cluster compiled, whether its member door can
	// serve: configured false without spec.secureServing, else err says why
	// it cannot (a *cluster.ConfigError), nil when it serves.
	Door func(name string, generation int64, configured bool, err error)
}

// Controller compiles UpstreamClusters and serves lookups.
type Controller struct {
	clusters cache.SharedIndexInformer
	secrets  cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	// state holds the *entry of every cluster by name: written by the one
	// worker (swap), read by every request. A map copied on write would copy
	// every cluster for each change, quadratic in a burst of applies.
	state sync.Map
	// doors maps each member-door server name to what serves it, rebuilt
	// from doorEntries when an entry with door names comes or goes.
	doors atomic.Pointer[map[string]doorSlot]
	// doorEntries are the entries with door names, by cluster: the worker's.
	doorEntries map[string]*entry
	hooks       Hooks
	// probes paces the health probes of every compiled cluster.
	probes *health.Scheduler
	// ClusterOptions apply to every cluster compiled, DoorOptions to every
	// member door. Set them before Run.
	ClusterOptions cluster.Options
	DoorOptions    door.Options
	// ProbeOwner, when set before Run, shares health checks among the
	// gateway's replicas: it tells whether this one probes a cluster (by
	// name); the others follow its verdicts from status.servers.
	ProbeOwner func(name string) bool
}

const secretIndex = "secret"

// NewController watches UpstreamClusters through clusterSource and credential
// Secrets through secrets (an informer restricted to the credential namespace).
func NewController(clusterSource cache.ListerWatcher, secrets cache.SharedIndexInformer, hooks Hooks) (*Controller, error) {
	c := &Controller{
		hooks:  hooks,
		probes: health.NewScheduler(clock.RealClock{}),
		clusters: cache.NewSharedIndexInformer(clusterSource, &gatewayv1alpha1.UpstreamCluster{}, 0, cache.Indexers{
			secretIndex: func(obj interface{}) ([]string, error) {
				spec := obj.(*gatewayv1alpha1.UpstreamCluster).Spec
				cc := spec.ClientConfig
				keys := []string{cc.SecretRef.Namespace + "/" + cc.SecretRef.Name}
				if k := cc.Konnectivity; k != nil {
					keys = append(keys, k.SecretRef.Namespace+"/"+k.SecretRef.Name)
				}
				if ss := spec.SecureServing; ss != nil {
					keys = append(keys, ss.SecretRef.Namespace+"/"+ss.SecretRef.Name)
				}
				return keys, nil
			},
		}),
		secrets: secrets,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "upstreamclusters"}),
	}
	c.doors.Store(&map[string]doorSlot{})
	c.doorEntries = map[string]*entry{}
	if err := c.clusters.SetTransform(DropManagedFields); err != nil {
		return nil, err
	}

	enqueueCluster := func(obj interface{}) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := c.clusters.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueueCluster,
		UpdateFunc: func(_, obj interface{}) { enqueueCluster(obj) },
		DeleteFunc: enqueueCluster,
	}); err != nil {
		return nil, err
	}
	enqueueUsers := func(obj interface{}) {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			return
		}
		users, _ := c.clusters.GetIndexer().ByIndex(secretIndex, key)
		for _, u := range users {
			enqueueCluster(u)
		}
	}
	if _, err := secrets.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueueUsers,
		UpdateFunc: func(_, obj interface{}) { enqueueUsers(obj) },
		DeleteFunc: enqueueUsers,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// DropManagedFields is an informer transform that drops the managed fields
// of an object before the informer keeps it: nothing the gateway caches
// (UpstreamClusters, credential Secrets) needs them, and they are a large
// part of each object, so of the gateway's memory per cluster. The objects
// are the informer's own copies; the slice they held is left as it is.
func DropManagedFields(obj any) (any, error) {
	if o, err := meta.Accessor(obj); err == nil {
		o.SetManagedFields(nil)
	}
	return obj, nil
}

// Run watches and compiles until ctx ends. The Secret informer is started by its
// factory; Run starts the UpstreamCluster informer itself.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	go c.clusters.RunWithContext(ctx)
	if c.ProbeOwner != nil {
		c.probes.Share(c.ProbeOwner)
	}
	go c.probes.Run(ctx)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.clusters.HasSynced, c.secrets.HasSynced) {
		return
	}
	// One worker: compiling is cheap, and a single writer keeps swaps ordered.
	go wait.UntilWithContext(ctx, c.work, time.Second)
	<-ctx.Done()
}

// Clusters is the controller's UpstreamCluster informer, for others to
// follow the same objects (add handlers and indexers before Run).
func (c *Controller) Clusters() cache.SharedIndexInformer { return c.clusters }

// HasSynced reports whether both informers have synced and every UpstreamCluster
// they hold has been compiled (or found unusable) at least once.
func (c *Controller) HasSynced() bool {
	if !c.clusters.HasSynced() || !c.secrets.HasSynced() {
		return false
	}
	for _, key := range c.clusters.GetIndexer().ListKeys() {
		if c.entry(key) == nil {
			return false
		}
	}
	return true
}

// ErrUnknown is returned by Lookup for a cluster the gateway has not seen.
var ErrUnknown = fmt.Errorf("unknown cluster")

// Lookup returns the compiled cluster called name. err is ErrUnknown when the
// gateway has no such cluster, or says why the cluster cannot be used.
func (c *Controller) Lookup(name string) (*cluster.Cluster, error) {
	e := c.entry(name)
	switch {
	case e == nil:
		return nil, ErrUnknown
	case e.err != nil:
		return nil, e.err
	}
	return e.cluster, nil
}

// ProbesSkipped returns how many health probes fell due and were not sent,
// by reason (health.Scheduler.Skipped).
func (c *Controller) ProbesSkipped() map[string]uint64 { return c.probes.Skipped() }

// OwnersChanged tells the health checks that ProbeOwner's answers may have
// changed (the replicas did): the probes this replica left to the owners are
// found needed or not anew.
func (c *Controller) OwnersChanged() { c.probes.Reshard() }

// EachServer calls fn for every enabled server of every compiled cluster with
// its current health (for metrics, at scrape time).
func (c *Controller) EachServer(fn func(cluster, endpoint string, healthy bool)) {
	c.state.Range(func(name, v any) bool {
		if e := v.(*entry); e.cluster != nil {
			for _, s := range e.cluster.Servers() {
				if s.Reason != gatewayv1alpha1.ServerReasonDisabled {
					fn(name.(string), s.Endpoint, s.Healthy)
				}
			}
		}
		return true
	})
}

// entry returns the entry of the cluster called name, nil if there is none.
func (c *Controller) entry(name string) *entry {
	if v, ok := c.state.Load(name); ok {
		return v.(*entry)
	}
	return nil
}

func (c *Controller) work(ctx context.Context) {
	for {
		key, shutdown := c.queue.Get()
		if shutdown {
			return
		}
		c.sync(ctx, key)
		c.queue.Done(key)
	}
}

func (c *Controller) sync(ctx context.Context, name string) {
	logger := klog.FromContext(ctx).WithValues("upstreamcluster", name)
	old := c.entry(name)
	obj, exists, err := c.clusters.GetIndexer().GetByKey(name)
	if err != nil || !exists {
		if old != nil {
			c.swap(name, nil)
			if c.hooks.Removed != nil {
				c.hooks.Removed(name)
			}
			logger.V(2).Info("Removed upstream cluster")
		}
		return
	}
	uc := obj.(*gatewayv1alpha1.UpstreamCluster)
	ref := uc.Spec.ClientConfig.SecretRef
	var secret *corev1.Secret
	secretVersion := "absent"
	if sobj, ok, _ := c.secrets.GetIndexer().GetByKey(ref.Namespace + "/" + ref.Name); ok {
		secret = sobj.(*corev1.Secret)
		secretVersion = string(secret.UID) + "/" + secret.ResourceVersion
	}
	var tunnelSecret *corev1.Secret
	if k := uc.Spec.ClientConfig.Konnectivity; k != nil {
		tunnelVersion := "absent"
		if sobj, ok, _ := c.secrets.GetIndexer().GetByKey(k.SecretRef.Namespace + "/" + k.SecretRef.Name); ok {
			tunnelSecret = sobj.(*corev1.Secret)
			tunnelVersion = string(tunnelSecret.UID) + "/" + tunnelSecret.ResourceVersion
		}
		secretVersion += "/konnectivity/" + tunnelVersion
	}
	var doorSecret *corev1.Secret
	if ss := uc.Spec.SecureServing; ss != nil {
		doorVersion := "absent"
		if sobj, ok, _ := c.secrets.GetIndexer().GetByKey(ss.SecretRef.Namespace + "/" + ss.SecretRef.Name); ok {
			doorSecret = sobj.(*corev1.Secret)
			doorVersion = string(doorSecret.UID) + "/" + doorSecret.ResourceVersion
		}
		secretVersion += "/door/" + doorVersion
	}
	version := fmt.Sprintf("%s/%d/%s", uc.UID, uc.Generation, secretVersion)
	if old != nil && old.version == version {
		c.follow(old.cluster, uc) // a status change
		return
	}
	next := &entry{version: version}
	var prev *cluster.Cluster
	if old != nil {
		prev = old.cluster
	}
	generation := uc.Generation
	observe := func(cl *cluster.Cluster, _ health.ServerHealth) {
		// A replaced cluster's checker may still report for a moment.
		if cur := c.entry(name); cur != nil && cur.cluster == cl && c.hooks.Observed != nil {
			c.hooks.Observed(name, generation, cl.Servers())
		}
	}
	if next.cluster, err = cluster.CompileTunneled(uc, secret, tunnelSecret, prev, observe, c.ClusterOptions); err != nil {
		next.err = err
	}
	if ss := uc.Spec.SecureServing; ss != nil {
		next.doorNames = ss.ServerNames
	}
	// Without a compiled cluster, Door reports the cluster's own error.
	if next.cluster != nil {
		if next.door, next.doorErr = door.Compile(uc, doorSecret, next.cluster, c.DoorOptions); next.doorErr != nil {
			logger.Info("Member door of the upstream cluster cannot serve", "reason", next.doorErr.Error())
		}
	}
	healthCtx := ctx
	if next.cluster != nil {
		var stop context.CancelFunc
		healthCtx, stop = context.WithCancel(ctx)
		next.stopHealth = stop
		next.cluster.Health.Start(healthCtx, c.probes)
		c.follow(next.cluster, uc)
		if next.door != nil {
			go next.door.Run(healthCtx) // the member's client CA, when the door takes it
		}
	}
	c.swap(name, next)
	if next.cluster != nil && c.hooks.Observed != nil {
		c.hooks.Observed(name, generation, next.cluster.Servers())
	}
	if next.cluster != nil && c.hooks.Served != nil {
		if refs := served.Named(uc.Spec.DispatchPolicies); len(refs) == 0 {
			c.hooks.Served(name, generation, false, nil)
		} else {
			go c.checkServed(healthCtx, name, generation, next.cluster, refs)
		}
	}
	if next.cluster != nil && c.hooks.Door != nil {
		c.hooks.Door(name, generation, uc.Spec.SecureServing != nil, next.doorErr)
	}
	if next.err != nil && c.hooks.Invalid != nil {
		c.hooks.Invalid(name, generation, next.err)
	}
	if next.err != nil {
		logger.Info("Upstream cluster cannot be used", "reason", next.err.Error())
	} else {
		logger.V(2).Info("Compiled upstream cluster", "generation", uc.Generation, "servers", len(next.cluster.Endpoints))
	}
}

// follow hands the verdicts of uc's status.servers to cl's health checking,
// when replicas share health checks (it ignores them where this replica owns
// the cluster).
func (c *Controller) follow(cl *cluster.Cluster, uc *gatewayv1alpha1.UpstreamCluster) {
	if c.ProbeOwner == nil || cl == nil {
		return
	}
	for _, s := range uc.Status.Servers {
		if s.Healthy != nil && s.Reason != gatewayv1alpha1.ServerReasonDisabled {
			cl.Health.Follow(s.Endpoint, *s.Healthy, s.Reason, s.Message, s.LastTransitionTime.Time)
		}
	}
}

// swap installs next for name (nil removes it), then releases the
// connections of the replaced cluster that the new one does not reuse. Only
// the worker calls it.
func (c *Controller) swap(name string, next *entry) {
	old := c.entry(name)
	if next == nil {
		c.state.Delete(name)
	} else {
		c.state.Store(name, next)
	}
	_, hadDoor := c.doorEntries[name]
	hasDoor := next != nil && len(next.doorNames) > 0
	if hasDoor {
		c.doorEntries[name] = next
	} else {
		delete(c.doorEntries, name)
	}
	if hadDoor || hasDoor {
		c.doors.Store(doorIndex(c.doorEntries))
	}
	if old != nil && old.stopHealth != nil {
		old.stopHealth()
	}
	if old != nil && old.cluster != nil {
		var successor *cluster.Cluster
		if next != nil {
			successor = next.cluster
		}
		old.cluster.Release(successor)
	}
}

// How often the member's discovery is read for the dispatch rules' resources:
// retries while it cannot be read, and again later while some are not served
// (the CRD may be installed after the rule was written).
const (
	servedRetryBase = time.Second
	servedRetryMax  = time.Minute
	servedRecheck   = 10 * time.Minute
)

// checkServed reads the member's discovery through one of cl's servers and
// reports which of refs it does not serve, until ctx ends (the cluster is
// replaced or removed) or everything is served. It holds a goroutine only for
// clusters whose rules name concrete resources and are not all served yet.
func (c *Controller) checkServed(ctx context.Context, name string, generation int64, cl *cluster.Cluster, refs []served.Ref) {
	logger := klog.FromContext(ctx).WithValues("upstreamcluster", name)
	retry := servedRetryBase
	for {
		unserved, err := discover(ctx, cl, refs)
		wait := servedRecheck
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			logger.V(2).Info("Cannot read the member's discovery to check the dispatch rules' resources, will retry", "err", err)
			wait, retry = retry, min(2*retry, servedRetryMax)
		default:
			retry = servedRetryBase
			names := make([]string, 0, len(unserved))
			for _, r := range unserved {
				names = append(names, r.String())
			}
			c.hooks.Served(name, generation, true, names)
			if len(unserved) == 0 {
				return
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// discoveryTimeout bounds one reading of a member's discovery.
const discoveryTimeout = 30 * time.Second

// discover reads the member's discovery through a healthy server of cl (any, if
// none is) with the gateway's own credential, and returns the refs it does not
// serve.
func discover(ctx context.Context, cl *cluster.Cluster, refs []served.Ref) ([]served.Ref, error) {
	if len(cl.Endpoints) == 0 {
		return nil, fmt.Errorf("no enabled server")
	}
	e := cl.Endpoints[0]
	for _, candidate := range cl.Endpoints {
		if candidate.Healthy() {
			e = candidate
			break
		}
	}
	ctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	defer cancel()
	// The probe transport: the gateway's credential, no impersonation.
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(&rest.Config{Host: e.URL.String()},
		&http.Client{Transport: cl.Transports(e).Probe, Timeout: discoveryTimeout})
	if err != nil {
		return nil, err
	}
	_, lists, err := dc.ServerGroupsAndResourcesWithContext(ctx)
	var partial *discovery.ErrGroupDiscoveryFailed
	switch {
	case errors.As(err, &partial):
		return served.Unserved(refs, lists, partial.Groups), nil
	case err != nil:
		return nil, transport.StripURL(err)
	}
	return served.Unserved(refs, lists, nil), nil
}

// doorSlot is what serves one member-door server name.
type doorSlot struct {
	entry *entry
	// others names the other clusters that claim the name: then none serves it.
	others []string
	name   string // the cluster of entry
}

func doorIndex(m map[string]*entry) *map[string]doorSlot {
	idx := map[string]doorSlot{}
	for name, e := range m {
		for _, n := range e.doorNames {
			slot, taken := idx[n]
			if taken {
				slot.others = append(slot.others, name)
			} else {
				slot = doorSlot{entry: e, name: name}
			}
			idx[n] = slot
		}
	}
	return &idx
}

// Door returns the member door that serves server name, or says why none
// does (proxy/door.Doors).
func (c *Controller) Door(serverName string) (*door.Door, error) {
	slot, ok := (*c.doors.Load())[serverName]
	switch {
	case !ok:
		return nil, fmt.Errorf("no UpstreamCluster serves it (spec.secureServing.serverNames)")
	case len(slot.others) > 0:
		all := append([]string{slot.name}, slot.others...)
		slices.Sort(all)
		return nil, fmt.Errorf("UpstreamClusters %s all name it in spec.secureServing.serverNames: it is served by none until one does", strings.Join(all, ", "))
	case slot.entry.err != nil:
		return nil, fmt.Errorf("upstream cluster %q cannot be used: %w", slot.name, slot.entry.err)
	case slot.entry.doorErr != nil:
		return nil, fmt.Errorf("upstream cluster %q: %w", slot.name, slot.entry.doorErr)
	}
	return slot.entry.door, nil
}
