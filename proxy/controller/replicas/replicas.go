// Package replicas counts the live replicas of a gateway, so that each can
// enforce its share of flow-control limits that hold across all of them, and
// tells which of them owns a cluster (Owner: health checks are shared).
//
// Every replica announces itself with a hub Lease of its own, labeled
// LabelReplicaOf=<group>, renewed every RenewPeriod and valid for Duration,
// and deleted when the replica stops gracefully. It watches the Leases of its
// group (an informer restricted to the namespace and the label) and counts as
// live those whose renewTime it has seen change within the last Duration, as
// client-go's leader election does: the replicas' clocks need not agree.
//
// A replica that cannot write its Lease, or cannot read the others (its own
// Lease is then not among the live ones it sees), counts 1: it enforces whole
// limits, as a gateway without this package does, and logs why.
package replicas

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// LabelReplicaOf labels the Lease of every replica with the name of its group.
const LabelReplicaOf = "gateway.kubewharf.io/replica-of"

// Defaults of Config.
const (
	DefaultRenewPeriod = 5 * time.Second
	DefaultDuration    = 15 * time.Second
)

// Config says where and how a replica announces itself.
type Config struct {
	Client kubernetes.Interface
	// Namespace holds the Leases.
	Namespace string
	// Group is the value of LabelReplicaOf and the prefix of the Lease names:
	// replicas of one gateway share it, installations that share Namespace do not.
	Group string
	// Identity is the holder identity written in the Lease.
	Identity string
	// RenewPeriod and Duration: zero means the defaults.
	RenewPeriod, Duration time.Duration
	// OnChange is told the number of live replicas (at least 1) when it changes,
	// in order; it must not block nor call the Membership.
	OnChange func(n int)
	// OnMembers is told when the set of live replicas changes (which
	// changes what Owns says), in order; it must not block nor call the
	// Membership's other methods than Owns.
	OnMembers func()
	// Clock: nil means the real clock.
	Clock clock.WithTicker
}

// Membership announces this replica and counts the live ones.
type Membership struct {
	cfg  Config
	lock *resourcelock.LeaseLock

	mu sync.Mutex
	// seen is when the renewTime of each Lease of the group was last seen to change.
	seen map[string]observed
	live int
	// view is what Owns reads: the live Leases, sorted, when this
	// replica's own is among them; nil otherwise.
	view atomic.Pointer[[]string]
	// renewed is when this replica's Lease was last written successfully.
	renewed time.Time
	// stop and done: see Start; stopped: Stop was called.
	stop    context.CancelFunc
	done    chan struct{}
	stopped bool
}

type observed struct {
	renewTime time.Time
	at        time.Time
	duration  time.Duration
}

// New returns the membership of one replica; Run starts it. Its Lease is named
// Group-<random>, unique to this process.
func New(cfg Config) *Membership {
	if cfg.RenewPeriod <= 0 {
		cfg.RenewPeriod = DefaultRenewPeriod
	}
	if cfg.Duration <= 0 {
		cfg.Duration = DefaultDuration
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Membership{
		cfg: cfg,
		lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Group + "-" + string(uuid.NewUUID())},
			Client:     cfg.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
			Labels:     map[string]string{LabelReplicaOf: cfg.Group},
		},
		seen: map[string]observed{},
		live: 1,
	}
}

// LeaseName is the name of this replica's Lease.
func (m *Membership) LeaseName() string { return m.lock.LeaseMeta.Name }

// Live is the number of live replicas, this one included: at least 1.
func (m *Membership) Live() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live
}

// Owns tells whether this replica owns key among the live replicas (see
// Owner, over the Lease names), and sees whether it knows them: false while
// its own Lease is not among the live ones it sees (not started yet, or it
// cannot read or write Leases); owns is then true. Lock-free.
func (m *Membership) Owns(key string) (owns, sees bool) {
	live := m.view.Load()
	if live == nil {
		return true, false
	}
	return Owner(key, *live) == m.LeaseName(), true
}

// Start runs Run in a goroutine of its own until ctx ends or Stop is called;
// after Stop it does nothing.
func (m *Membership) Start(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		cancel()
		return
	}
	m.stop, m.done = cancel, done
	m.mu.Unlock()
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
}

// Stop ends what Start started and waits until this replica's Lease is
// deleted (or could not be); if Start was not called, it never will be.
func (m *Membership) Stop() {
	m.mu.Lock()
	stop, done := m.stop, m.done
	m.stopped = true
	m.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// Run announces this replica and follows the others until ctx ends, then
// deletes its Lease (waiting at most a few seconds for the hub).
func (m *Membership) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("lease", m.cfg.Namespace+"/"+m.LeaseName())
	factory := informers.NewSharedInformerFactoryWithOptions(m.cfg.Client, 0, informers.WithNamespace(m.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelReplicaOf + "=" + m.cfg.Group }))
	leases := factory.Coordination().V1().Leases().Informer()
	if _, err := leases.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { m.observe(ctx, obj) },
		UpdateFunc: func(_, obj interface{}) { m.observe(ctx, obj) },
		DeleteFunc: func(obj interface{}) { m.forget(ctx, obj) },
	}); err != nil {
		logger.Error(err, "Cannot follow the gateway replicas' Leases; enforcing whole flow-control limits")
		return
	}
	// A missing right is logged once, not at every retry of the informer.
	var refused atomic.Bool
	if err := leases.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		if !apierrors.IsForbidden(err) {
			cache.DefaultWatchErrorHandler(ctx, r, err)
			return
		}
		if refused.CompareAndSwap(false, true) {
			logger.Error(err, "Cannot list or watch the gateway replicas' Leases: it needs list and watch on leases in its namespace; enforcing whole flow-control limits, not divided among the replicas, until it can")
		}
	}); err != nil {
		logger.Error(err, "Cannot follow the gateway replicas' Leases; enforcing whole flow-control limits")
		return
	}
	factory.StartWithContext(ctx) // the informer's errors go to this replica's logger
	defer factory.Shutdown()

	ticker := m.cfg.Clock.NewTicker(time.Second)
	defer ticker.Stop()
	nextRenew := time.Time{}
	failing := false
	// blindSince is when this replica last stopped seeing its own Lease live
	// although it writes it: it cannot list or watch Leases.
	blindSince, blind := m.cfg.Clock.Now(), false
	for {
		if now := m.cfg.Clock.Now(); !now.Before(nextRenew) {
			nextRenew = now.Add(m.cfg.RenewPeriod)
			// Bounded, so that a hub that hangs does not stop the recounts.
			renewCtx, cancel := context.WithTimeout(ctx, m.cfg.RenewPeriod)
			err := m.renew(renewCtx, now)
			cancel()
			switch {
			case err != nil && !failing && ctx.Err() == nil:
				logger.Error(err, "Cannot renew this gateway replica's Lease: the other replicas do not count it; once it expired it enforces whole flow-control limits")
				failing = true
			case err == nil && failing:
				logger.Info("Renewed this gateway replica's Lease again")
				failing = false
			}
		}
		if self := m.recount(ctx); self || failing {
			if blind && self {
				logger.Info("Sees the gateway replicas' Leases again")
				refused.Store(false)
			}
			blindSince, blind = m.cfg.Clock.Now(), false
		} else if !blind && m.cfg.Clock.Since(blindSince) > m.cfg.Duration {
			if !refused.Load() { // else already said
				logger.Error(nil, "Cannot see this gateway replica's own Lease: it needs list and watch on leases in its namespace; enforcing whole flow-control limits until it can",
					"synced", leases.HasSynced())
			}
			blind = true
		}
		m.collectGarbage(ctx)
		select {
		case <-ctx.Done():
			m.release(ctx)
			return
		case <-ticker.C():
		}
	}
}

// renew writes this replica's Lease: creates it the first time, or when an
// update fails (it may have been deleted), then updates it.
func (m *Membership) renew(ctx context.Context, now time.Time) error {
	rec := resourcelock.LeaderElectionRecord{
		HolderIdentity:       m.cfg.Identity,
		LeaseDurationSeconds: int(m.cfg.Duration / time.Second),
		AcquireTime:          metav1.NewTime(now),
		RenewTime:            metav1.NewTime(now),
	}
	m.mu.Lock()
	created := !m.renewed.IsZero()
	m.mu.Unlock()
	var err error
	if created {
		err = m.lock.Update(ctx, rec)
	}
	if !created || err != nil {
		if old, _, getErr := m.lock.Get(ctx); getErr == nil {
			rec.AcquireTime = old.AcquireTime
			err = m.lock.Update(ctx, rec)
		} else {
			err = m.lock.Create(ctx, rec)
		}
	}
	if err == nil {
		m.mu.Lock()
		m.renewed = now
		m.mu.Unlock()
	}
	return err
}

// release deletes this replica's Lease, so that the others count one less at
// once rather than when it expires.
func (m *Membership) release(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace).Delete(ctx, m.LeaseName(), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		klog.FromContext(ctx).Info("Cannot delete this gateway replica's Lease; the others count it until it expires", "lease", m.cfg.Namespace+"/"+m.LeaseName(), "err", err)
	}
}

func (m *Membership) observe(ctx context.Context, obj interface{}) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok || lease.Labels[LabelReplicaOf] != m.cfg.Group || lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return
	}
	m.mu.Lock()
	prev, known := m.seen[lease.Name]
	if !known || !prev.renewTime.Equal(lease.Spec.RenewTime.Time) {
		m.seen[lease.Name] = observed{
			renewTime: lease.Spec.RenewTime.Time,
			at:        m.cfg.Clock.Now(),
			duration:  time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second,
		}
	}
	m.mu.Unlock()
	m.recount(ctx)
}

func (m *Membership) forget(ctx context.Context, obj interface{}) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if lease, ok := obj.(*coordinationv1.Lease); ok {
		m.mu.Lock()
		delete(m.seen, lease.Name)
		m.mu.Unlock()
	}
	m.recount(ctx)
}

// recount counts the live Leases; 1 when this replica's own is not among them.
// It returns whether its own is.
func (m *Membership) recount(ctx context.Context) bool {
	now := m.cfg.Clock.Now()
	m.mu.Lock()
	n, self := 0, false
	for name, o := range m.seen {
		if now.Sub(o.at) < o.duration {
			n++
			self = self || name == m.LeaseName()
		}
	}
	if !self {
		n = 1
	}
	changed := n != m.live
	m.live = n
	var live []string
	if self {
		for name, o := range m.seen {
			if now.Sub(o.at) < o.duration {
				live = append(live, name)
			}
		}
		slices.Sort(live)
	}
	membersChanged := false
	if old := m.view.Load(); (old == nil) != (live == nil) || old != nil && !slices.Equal(*old, live) {
		membersChanged = true
		if live == nil {
			m.view.Store(nil)
		} else {
			m.view.Store(&live)
		}
	}
	// Under the mutex, so that concurrent recounts tell their counts in order.
	if changed && m.cfg.OnChange != nil {
		m.cfg.OnChange(n)
	}
	if membersChanged && m.cfg.OnMembers != nil {
		m.cfg.OnMembers()
	}
	m.mu.Unlock()
	if changed {
		klog.FromContext(ctx).Info("Gateway replicas changed: flow-control limits are divided among them", "replicas", n, "group", m.cfg.Group)
	}
	return self
}

// collectGarbage deletes the Leases of the group that nobody renewed for
// garbageAfter durations: replicas that died without deleting theirs. A live
// replica whose Lease was deleted by mistake creates it again at its next renewal.
func (m *Membership) collectGarbage(ctx context.Context) {
	now := m.cfg.Clock.Now()
	var dead []string
	m.mu.Lock()
	for name, o := range m.seen {
		if now.Sub(o.at) > garbageAfter*o.duration {
			dead = append(dead, name)
			delete(m.seen, name)
		}
	}
	m.mu.Unlock()
	for _, name := range dead {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		cancel()
		klog.FromContext(ctx).V(2).Info("Deleted the Lease of a gateway replica that stopped renewing it", "lease", m.cfg.Namespace+"/"+name, "err", err)
	}
}

// garbageAfter is how many Lease durations a dead replica's Lease stays.
const garbageAfter = 4
