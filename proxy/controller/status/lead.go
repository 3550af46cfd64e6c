package status

import (
	"context"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// timing is the leader election timing; tests shorten it.
type timing struct {
	leaseDuration, renewDeadline, retryPeriod time.Duration
}

var defaultTiming = timing{leaseDuration: 15 * time.Second, renewDeadline: 10 * time.Second, retryPeriod: 2 * time.Second}

// Identity returns a leader election identity unique to this process: the host
// name and a random suffix.
func Identity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "kube-gateway"
	}
	return host + "_" + string(uuid.NewUUID())
}

// Lead runs fn while this replica holds the hub Lease namespace/name, and returns
// when ctx ends. identity must be unique per replica (see Identity).
//
// fn's context ends when the lease is lost or ctx ends. When ctx ends, Lead waits
// for fn to return before it releases the lease, so that the next leader does not
// start while fn still runs. A lost lease (renewal failed for the renew deadline)
// cancels fn and Lead campaigns again; another replica can take over only after
// the lease expired, which leaves fn the difference between lease duration and
// renew deadline to stop.
func Lead(ctx context.Context, hub kubernetes.Interface, namespace, name, identity string, fn func(ctx context.Context)) {
	lead(ctx, hub, namespace, name, identity, fn, defaultTiming)
}

func lead(ctx context.Context, hub kubernetes.Interface, namespace, name, identity string, fn func(ctx context.Context), t timing) {
	logger := klog.FromContext(ctx).WithValues("lease", namespace+"/"+name, "identity", identity)
	for ctx.Err() == nil {
		if !campaign(ctx, hub, namespace, name, identity, fn, t) {
			return
		}
		if ctx.Err() == nil {
			logger.Info("Lost the status-writer lease, campaigning again")
		}
	}
}

// campaign runs one leader elector until it stops leading or ctx ends; false
// when it could not run at all.
func campaign(ctx context.Context, hub kubernetes.Interface, namespace, name, identity string, fn func(ctx context.Context), t timing) bool {
	// The elector runs on a context of its own, cancelled once fn has returned
	// after ctx ended: with ReleaseOnCancel it then gives up the lease.
	electCtx, stopElector := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElector()

	var (
		mu       sync.Mutex
		stopping bool          // no (more) fn from this campaign
		fnDone   chan struct{} // closed when fn returned; nil if fn never started
	)
	// stop prevents fn from starting and waits for it if it started.
	stop := func() {
		mu.Lock()
		stopping = true
		done := fnDone
		mu.Unlock()
		if done != nil {
			<-done
		}
	}

	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name},
			Client:     hub.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		},
		LeaseDuration:   t.leaseDuration,
		RenewDeadline:   t.renewDeadline,
		RetryPeriod:     t.retryPeriod,
		ReleaseOnCancel: true,
		Name:            name,
		Callbacks: leaderelection.LeaderCallbacks{
			// Called in a goroutine of its own once the lease is held; leadCtx
			// ends when the lease is lost.
			OnStartedLeading: func(leadCtx context.Context) {
				mu.Lock()
				if stopping {
					mu.Unlock()
					return
				}
				done := make(chan struct{})
				fnDone = done
				mu.Unlock()
				defer close(done)

				runCtx, cancel := context.WithCancel(leadCtx)
				defer cancel()
				stopRun := context.AfterFunc(ctx, cancel)
				defer stopRun()
				fn(runCtx)
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot elect a status writer", "lease", namespace+"/"+name)
		return false
	}

	// ctx ended: let fn return, then stop the elector (which releases the lease).
	stopOnCancel := context.AfterFunc(ctx, func() {
		stop()
		stopElector()
	})
	defer stopOnCancel()

	le.Run(electCtx) // returns when the lease is lost or the elector is stopped
	stop()           // a lost lease cancelled fn's context; do not overlap with the next campaign
	return true
}
