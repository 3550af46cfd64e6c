// Package status keeps the status of UpstreamClusters in line with what the data
// plane observes: status.servers[] (each endpoint's health, reason and last
// transition), status.observedGeneration, the Ready condition (False also when
// the configuration cannot be used), the InsecureTransport condition and
// status.caches (as package fleetcache reports it).
//
// Every gateway replica observes (Writer.Observe and ObserveInvalid are cheap and
// never block the data plane); only the replica that holds the hub Lease writes
// (Lead runs Writer.Run while leading), or, when replicas share health checks,
// the replica that owns a cluster (Writer.Owns). Writes happen on changes only: the desired
// status is compared with the stored one and nothing is written when they agree.
//
// The same leader records Events on the hub for what a write changed (see
// events.go): an endpoint became unhealthy or healthy, the cluster became ready
// or not, a configuration problem appeared or changed, certificate verification
// was turned off or on. Transitions are found by comparing the stored status with
// the written one, so N replicas and leader changes do not repeat them.
package status

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/health"
)

// Reasons of the Ready condition.
const (
	// ReasonNotChecked: no server is known to be healthy, and some were not
	// checked yet (Ready is Unknown).
	ReasonNotChecked = health.ReasonNotChecked
	// ReasonServersHealthy: every observed server is healthy.
	ReasonServersHealthy = "ServersHealthy"
	// ReasonSomeServersHealthy: at least one, but not every, server is healthy.
	ReasonSomeServersHealthy = "SomeServersHealthy"
	// ReasonNoHealthyServer: no server can serve requests.
	ReasonNoHealthyServer = "NoHealthyServer"
	// A configuration problem makes Ready False with the problem's reason (see
	// ObserveInvalid), e.g. SecretNotFound.
)

// Reasons of the DispatchResourcesServed condition.
const (
	// ReasonUnservedResources: a dispatch rule names an API group or resource
	// the member does not serve.
	ReasonUnservedResources = "UnservedResources"
	// ReasonResourcesServed: the member serves everything the rules name.
	ReasonResourcesServed = "ResourcesServed"

	// ReasonDoorServing: the member door serves (MemberDoorReady True).
	ReasonDoorServing = "Serving"
)

// Reasons of the InsecureTransport condition.
const (
	// ReasonInsecureSkipVerify: spec.clientConfig.insecure is set.
	ReasonInsecureSkipVerify = "InsecureSkipVerify"
	// ReasonCertificatesVerified: the servers' certificates are verified.
	ReasonCertificatesVerified = "CertificatesVerified"
)

const (
	// writeTimeout bounds one Get or Update on the storage.
	writeTimeout = 30 * time.Second
	// maxMessageLen caps a server's message (probe errors can be long); the
	// API does not limit it, etcd objects should stay small.
	maxMessageLen = 1024
	// Retries of a cluster whose write failed (other than on conflicts, which
	// are retried at once): per cluster exponential backoff.
	retryBaseDelay = 100 * time.Millisecond
	retryMaxDelay  = 30 * time.Second
	// Writes over all clusters: a new leader correcting every status sends
	// the gateway's own etcd a small part of the small writes one etcd
	// member takes, and a fleet registered at once shows Ready soon after
	// it is compiled (docs/benchmark.md, "10,000 clusters").
	writeQPS   = 500
	writeBurst = 500
	// writeWorkers write different clusters at once: each write waits for
	// a read and an update of etcd, and one at a time fell behind a burst
	// of new clusters on a busy machine (docs/benchmark.md).
	writeWorkers = 4
)

// Storage is the status subresource storage;
// registry/statusrest.REST satisfies it.
type Storage = interface {
	rest.Getter
	rest.Updater
}

// observation is the latest view of one cluster.
type observation struct {
	generation int64
	servers    []health.ServerHealth
	// problem, if set, says why the generation could not be used; servers is
	// then empty and status.servers keeps its last content.
	problem *problem
	// served, if set, is what the member's discovery said about the dispatch
	// rules of this generation: see ObserveServed.
	served *servedCheck
	// door, if set, is whether the member door of this generation serves:
	// see ObserveDoor.
	door *doorCheck
	// caches, if set, is status.caches (see ObserveCaches).
	caches *[]gatewayv1alpha1.UpstreamClusterCacheStatus
}

// doorCheck is the state of a cluster's member door.
type doorCheck struct {
	configured bool
	problem    *problem // nil: it serves
}

// servedCheck is the outcome of checking the dispatch rules' groups and
// resources against the member's discovery.
type servedCheck struct {
	named    bool     // the rules name a concrete group or resource
	unserved []string // what the member does not serve
}

// problem is a configuration problem: a CamelCase reason and a message.
type problem struct {
	reason, message string
}

// Writer keeps UpstreamCluster status in line with the observed health, writing
// only on changes.
type Writer struct {
	storage Storage
	clock   clock.PassiveClock
	limiter flowcontrol.RateLimiter

	mu       sync.Mutex
	observed map[string]observation
	// caches is status.caches of each cluster, as the fleet cache reports
	// it (ObserveCaches); a cluster absent here keeps what it has.
	caches map[string][]gatewayv1alpha1.UpstreamClusterCacheStatus
	// queue is the queue of the running Run, nil while not leading.
	queue workqueue.TypedRateLimitingInterface[string]

	// newRecorder, if set, starts recording Events for one leadership term and
	// returns the recorder and a function that stops it (see RecordEvents).
	newRecorder func(ctx context.Context) (record.EventRecorder, func())

	// onSync, if set (tests), is called after each processed cluster.
	onSync func(cluster string, wrote bool, err error)

	// Owns, when set before Run, tells which clusters this replica writes
	// the status of (replicas share health checks: each writes those it
	// probes); nil: all of them. owned is what it said at the last Reshard.
	Owns  func(cluster string) bool
	owned map[string]bool
}

// NewWriter returns a Writer over the status subresource storage. Run must be
// called (by the leader, see Lead) for anything to be written.
func NewWriter(statusStorage Storage, clk clock.PassiveClock) *Writer {
	return &Writer{
		storage:  statusStorage,
		clock:    clk,
		limiter:  flowcontrol.NewTokenBucketRateLimiter(writeQPS, writeBurst),
		observed: map[string]observation{},
		caches:   map[string][]gatewayv1alpha1.UpstreamClusterCacheStatus{},
	}
}

// ObserveCaches records status.caches of cluster (package fleetcache
// reports it on changes of state, and its counts periodically). Like
// Observe, it is cheap and non-blocking; the write happens in Run, only when
// the status differs.
func (w *Writer) ObserveCaches(cluster string, caches []gatewayv1alpha1.UpstreamClusterCacheStatus) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(caches) == 0 {
		caches = nil
	}
	prev, had := w.caches[cluster]
	if had && apiequality.Semantic.DeepEqual(prev, caches) {
		return // the periodic report of unchanged caches: nothing to write
	}
	w.caches[cluster] = slices.Clone(caches)
	if _, ok := w.observed[cluster]; ok && w.queue != nil {
		w.queue.Add(cluster)
	}
}

// Observe records the current health of every endpoint of cluster (as compiled
// from generation): servers is the list of its endpoints with their health, in the
// order status.servers[] should show them. It is cheap and non-blocking; the
// writes happen in Run.
//
// An observation of an older generation than the last one recorded for the
// cluster is ignored (a health checker of a replaced compilation may still
// report); a deleted cluster must be forgotten (Forget) before a new cluster of
// the same name is observed.
func (w *Writer) Observe(cluster string, generation int64, servers []health.ServerHealth) {
	w.observe(cluster, observation{generation: generation, servers: slices.Clone(servers)})
}

// ObserveInvalid records that generation of cluster cannot be used: reason (a
// CamelCase word such as SecretNotFound) and message say why. The message must
// hold no credential. Like Observe, it is cheap and non-blocking; an observation
// of the same generation replaces it once the problem is fixed.
func (w *Writer) ObserveInvalid(cluster string, generation int64, reason, message string) {
	w.observe(cluster, observation{generation: generation, problem: &problem{reason: reason, message: message}})
}

// ObserveServed records what the dispatch rules of generation of cluster name
// that the member does not serve (see package served), one entry per rule and
// name; empty when the member serves everything. named false says that the
// rules name no concrete group or resource (the condition is dropped). It is
// ignored unless the cluster's latest observation is of generation and usable.
func (w *Writer) ObserveServed(cluster string, generation int64, named bool, unserved []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	o, ok := w.observed[cluster]
	if !ok || o.generation != generation || o.problem != nil {
		return
	}
	if p := o.served; p != nil && p.named == named && slices.Equal(p.unserved, unserved) {
		return // the same outcome again: nothing to write
	}
	o.served = &servedCheck{named: named, unserved: slices.Clone(unserved)}
	w.observed[cluster] = o
	if w.queue != nil {
		w.queue.Add(cluster)
	}
}

// ObserveDoor records whether the member door of generation of cluster name
// serves: configured false without spec.secureServing (the condition is
// dropped), else err (a *cluster.ConfigError) says why it cannot, nil that it
// serves. It is ignored unless the cluster's latest observation is of
// generation and usable.
func (w *Writer) ObserveDoor(name string, generation int64, configured bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	o, ok := w.observed[name]
	if !ok || o.generation != generation || o.problem != nil {
		return
	}
	d := &doorCheck{configured: configured}
	if err != nil {
		d.problem = &problem{reason: cluster.ConfigErrorReason(err), message: err.Error()}
	}
	if reflect.DeepEqual(o.door, d) {
		return // the same outcome again: nothing to write
	}
	o.door = d
	w.observed[name] = o
	if w.queue != nil {
		w.queue.Add(name)
	}
}

func (w *Writer) observe(cluster string, o observation) {
	generation := o.generation
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, ok := w.observed[cluster]
	if ok && prev.generation > generation {
		return
	}
	if ok && prev.generation == generation && o.problem == nil {
		o.served, o.door = prev.served, prev.door // new health, same rules and door
	}
	w.observed[cluster] = o
	if w.queue != nil {
		w.queue.Add(cluster)
	}
}

// Reshard checks the clusters that Owns says this replica writes now and
// did not at the last Reshard: their owner changed (replicas joined or left),
// and the status is this replica's to correct. It never blocks.
func (w *Writer) Reshard() {
	if w.Owns == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	owned := make(map[string]bool, len(w.observed))
	for cluster := range w.observed {
		if w.Owns(cluster) {
			owned[cluster] = true
			if !w.owned[cluster] && w.queue != nil {
				w.queue.Add(cluster)
			}
		}
	}
	w.owned = owned
}

// Forget drops a deleted cluster: nothing more is written for it.
func (w *Writer) Forget(cluster string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.observed, cluster)
	delete(w.caches, cluster)
	if w.queue != nil {
		w.queue.Forget(cluster)
	}
}

func (w *Writer) observation(cluster string) (observation, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	o, ok := w.observed[cluster]
	if caches, reported := w.caches[cluster]; reported {
		o.caches = &caches
	}
	return o, ok
}

// Run writes pending changes until ctx ends. It is meant to run only while this
// replica leads (Lead(..., w.Run)); it starts by checking every observed cluster,
// so that a new leader writes its current view at once. Run must not run twice at
// the same time.
func (w *Writer) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("status-writer")
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryBaseDelay, retryMaxDelay),
		workqueue.TypedRateLimitingQueueConfig[string]{},
	)
	w.mu.Lock()
	w.queue = q
	for cluster := range w.observed {
		q.Add(cluster)
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		if w.queue == q {
			w.queue = nil
		}
		w.mu.Unlock()
		q.ShutDown()
	}()
	stop := context.AfterFunc(ctx, q.ShutDown)
	defer stop()

	var recorder record.EventRecorder
	if w.newRecorder != nil {
		var stopRecording func()
		recorder, stopRecording = w.newRecorder(ctx)
		defer stopRecording()
	}

	logger.V(2).Info("Writing UpstreamCluster status")
	// The queue hands a cluster to one worker at a time.
	var wg sync.WaitGroup
	for range writeWorkers {
		wg.Go(func() {
			for w.processNext(ctx, q, recorder) {
			}
		})
	}
	wg.Wait()
	logger.V(2).Info("Stopped writing UpstreamCluster status")
}

func (w *Writer) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], recorder record.EventRecorder) bool {
	cluster, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(cluster)
	if ctx.Err() != nil {
		return false
	}
	if w.Owns != nil && !w.Owns(cluster) {
		q.Forget(cluster) // another replica writes it
		if w.onSync != nil {
			w.onSync(cluster, false, nil)
		}
		return true
	}
	wrote, err := w.sync(ctx, cluster, recorder)
	switch {
	case err == nil:
		q.Forget(cluster)
	case ctx.Err() != nil:
		// Stopping: the next leader writes the latest view.
	default:
		klog.FromContext(ctx).Error(err, "Writing UpstreamCluster status failed, will retry", "upstreamCluster", cluster)
		q.AddRateLimited(cluster)
	}
	if w.onSync != nil {
		w.onSync(cluster, wrote, err)
	}
	return true
}

// sync writes the status of cluster if it differs from the stored one, and
// records an Event for every transition the write made (recorder may be nil).
func (w *Writer) sync(ctx context.Context, cluster string, recorder record.EventRecorder) (wrote bool, err error) {
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		o, ok := w.observation(cluster) // the latest view on every attempt
		if !ok {
			return nil // forgotten
		}
		// The storage is called directly, not through the API handlers: there
		// is no authentication, authorization or admission on this path, and
		// the store needs no request values (cluster-scoped: no namespace).
		// The generic store wants to know the request is cluster-scoped.
		rctx, cancel := context.WithTimeout(genericapirequest.WithNamespace(ctx, metav1.NamespaceNone), writeTimeout)
		defer cancel()
		obj, err := w.storage.Get(rctx, cluster, &metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil // deleted; Forget follows
		}
		if err != nil {
			return err
		}
		uc, ok := obj.(*gatewayv1alpha1.UpstreamCluster)
		if !ok {
			return fmt.Errorf("status storage returned %T, not an UpstreamCluster", obj)
		}
		// The spec tells whether certificates are verified; it describes the
		// observation only at the generation the observation was made from (a
		// newer generation is observed soon and written then).
		var spec *gatewayv1alpha1.UpstreamClusterSpec
		if uc.Generation == o.generation {
			spec = &uc.Spec
		}
		status := desiredStatus(&uc.Status, o, spec, metav1.NewTime(w.clock.Now()).Rfc3339Copy())
		if apiequality.Semantic.DeepEqual(&uc.Status, status) {
			return nil
		}
		if err := w.limiter.Wait(rctx); err != nil {
			return err
		}
		updated := uc.DeepCopy() // keeps resourceVersion: a concurrent write conflicts
		updated.Status = *status
		_, _, err = w.storage.Update(rctx, cluster, rest.DefaultUpdatedObjectInfo(updated),
			rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
		if err == nil {
			wrote = true
			klog.FromContext(ctx).V(2).Info("Wrote UpstreamCluster status", "upstreamCluster", cluster,
				"observedGeneration", status.ObservedGeneration, "ready", readyMessage(status))
			if recorder != nil {
				recordTransitions(recorder, uc, &uc.Status, status)
			}
		}
		return err
	})
	return wrote, err
}
