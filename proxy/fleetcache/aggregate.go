package fleetcache

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// Reasons of a CachedResource's Ready condition.
const (
	// ReasonAllSynced: the cache of every selected cluster is synced.
	ReasonAllSynced = "AllSynced"
	// ReasonNotAllSynced: some selected clusters' caches are not synced.
	ReasonNotAllSynced = "NotAllSynced"
)

// StatusStorage is the CachedResource status subresource storage.
type StatusStorage interface {
	rest.Getter
	rest.Updater
}

// Aggregator writes each CachedResource's status: the totals of the
// UpstreamClusters' status.caches entries for it. Run it on one replica (the
// holder of the status Lease).
type Aggregator struct {
	clusters, resources cache.SharedIndexInformer
	storage             StatusStorage
	clock               clock.PassiveClock

	mu sync.Mutex
	// wrote is when each CachedResource's status was last written, so that
	// changes of counts alone wait for ReportPeriod.
	wrote map[string]time.Time
	queue workqueue.TypedDelayingInterface[string]
}

// NewAggregator returns an Aggregator over the informers of Manager's Config
// (add it before they start).
func NewAggregator(clusters, resources cache.SharedIndexInformer, storage StatusStorage, clk clock.PassiveClock) (*Aggregator, error) {
	a := &Aggregator{clusters: clusters, resources: resources, storage: storage, clock: clk, wrote: map[string]time.Time{}}
	all := func(any) {
		a.mu.Lock()
		q := a.queue
		a.mu.Unlock()
		if q == nil {
			return
		}
		for _, k := range resources.GetIndexer().ListKeys() {
			q.Add(k)
		}
	}
	for _, inf := range []cache.SharedIndexInformer{clusters, resources} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: all, UpdateFunc: func(_, obj any) { all(obj) }, DeleteFunc: all,
		}); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Run writes until ctx ends (the Lease is lost).
func (a *Aggregator) Run(ctx context.Context) {
	q := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "cachedresource-status"})
	a.mu.Lock()
	a.queue = q
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.queue = nil
		a.mu.Unlock()
		q.ShutDown()
	}()
	stop := context.AfterFunc(ctx, q.ShutDown)
	defer stop()
	if !cache.WaitForNamedCacheSyncWithContext(ctx, a.clusters.HasSynced, a.resources.HasSynced) {
		return
	}
	for _, k := range a.resources.GetIndexer().ListKeys() {
		q.Add(k)
	}
	for {
		name, shutdown := q.Get()
		if shutdown {
			return
		}
		if err := a.sync(ctx, name); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Writing CachedResource status failed, will retry", "cachedResource", name)
			q.AddAfter(name, time.Second)
		}
		q.Done(name)
	}
}

// Desired is the status of cr over clusters, old's conditions kept where
// they did not change.
func Desired(cr *gatewayv1alpha1.CachedResource, clusters []*gatewayv1alpha1.UpstreamCluster, now metav1.Time) *gatewayv1alpha1.CachedResourceStatus {
	st := &gatewayv1alpha1.CachedResourceStatus{ObservedGeneration: cr.Generation, Conditions: slices.Clone(cr.Status.Conditions)}
	var notSynced []gatewayv1alpha1.NotSyncedCluster
	for _, uc := range clusters {
		if !Selects(cr, uc) {
			continue
		}
		st.SelectedClusters++
		var entry *gatewayv1alpha1.UpstreamClusterCacheStatus
		for i := range uc.Status.Caches {
			if uc.Status.Caches[i].CachedResource == cr.Name {
				entry = &uc.Status.Caches[i]
			}
		}
		switch {
		case entry == nil:
			notSynced = append(notSynced, gatewayv1alpha1.NotSyncedCluster{Cluster: uc.Name, Reason: ReasonListing,
				Message: "the cluster's status.caches has no entry yet"})
		case entry.Synced:
			st.SyncedClusters++
		default:
			notSynced = append(notSynced, gatewayv1alpha1.NotSyncedCluster{Cluster: uc.Name, Reason: entry.Reason,
				Message: entry.Message, StaleSince: entry.StaleSince})
		}
		if entry != nil {
			st.Objects += entry.Objects
			st.Bytes += entry.Bytes
		}
	}
	slices.SortFunc(notSynced, func(x, y gatewayv1alpha1.NotSyncedCluster) int { return strings.Compare(x.Cluster, y.Cluster) })
	if len(notSynced) > gatewayv1alpha1.MaxNotSyncedClusters {
		notSynced, st.NotSyncedTruncated = notSynced[:gatewayv1alpha1.MaxNotSyncedClusters], true
	}
	st.NotSynced = notSynced
	ready := metav1.Condition{Type: gatewayv1alpha1.ConditionReady, ObservedGeneration: cr.Generation, LastTransitionTime: now,
		Status: metav1.ConditionTrue, Reason: ReasonAllSynced,
		Message: fmt.Sprintf("%d of %d selected clusters synced", st.SyncedClusters, st.SelectedClusters)}
	if st.SyncedClusters < st.SelectedClusters {
		ready.Status, ready.Reason = metav1.ConditionFalse, ReasonNotAllSynced
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	return st
}

// countsOnly reports whether a and b differ only in objects and bytes.
func countsOnly(a, b *gatewayv1alpha1.CachedResourceStatus) bool {
	x, y := *a, *b
	x.Objects, x.Bytes, y.Objects, y.Bytes = 0, 0, 0, 0
	return apiequality.Semantic.DeepEqual(&x, &y)
}

func (a *Aggregator) sync(ctx context.Context, name string) error {
	obj, exists, _ := a.resources.GetIndexer().GetByKey(name)
	if !exists {
		a.mu.Lock()
		delete(a.wrote, name)
		a.mu.Unlock()
		return nil
	}
	var clusters []*gatewayv1alpha1.UpstreamCluster
	for _, o := range a.clusters.GetIndexer().List() {
		clusters = append(clusters, o.(*gatewayv1alpha1.UpstreamCluster))
	}
	rctx, cancel := context.WithTimeout(genericapirequest.WithNamespace(ctx, metav1.NamespaceNone), 30*time.Second)
	defer cancel()
	cur, err := a.storage.Get(rctx, name, &metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	cr, ok := cur.(*gatewayv1alpha1.CachedResource)
	if !ok || cr.UID != obj.(*gatewayv1alpha1.CachedResource).UID {
		return nil // replaced meanwhile: its events follow
	}
	now := a.clock.Now()
	desired := Desired(cr, clusters, metav1.NewTime(now).Rfc3339Copy())
	if apiequality.Semantic.DeepEqual(&cr.Status, desired) {
		return nil
	}
	a.mu.Lock()
	last := a.wrote[name]
	a.mu.Unlock()
	if wait := ReportPeriod - now.Sub(last); countsOnly(&cr.Status, desired) && wait > 0 {
		a.mu.Lock()
		if a.queue != nil {
			a.queue.AddAfter(name, wait)
		}
		a.mu.Unlock()
		return nil
	}
	updated := cr.DeepCopy()
	updated.Status = *desired
	if _, _, err := a.storage.Update(rctx, name, rest.DefaultUpdatedObjectInfo(updated),
		rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{}); err != nil {
		return err
	}
	a.mu.Lock()
	a.wrote[name] = now
	a.mu.Unlock()
	return nil
}
