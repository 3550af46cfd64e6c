package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewharf/kube-gateway/proxy/controller/replicas"
	"github.com/kubewharf/kube-gateway/proxy/metrics"
	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// statusLeaseGroup is the gateway's default --status-lease-name, which
// labels its replicas' Leases.
const statusLeaseGroup = "kube-gateway-status"

// replica is one more gateway process on the same etcd and hub, with the
// same flags (no member door), not behind the hub: it compiles every
// cluster and shares the health checks with the others.
type replica struct {
	Name string
	pid  int
	root *measure.Target // its /metrics and /debug/pprof
}

// replicaState is what one gateway replica held at a moment, and did in an
// idle window.
type replicaState struct {
	Name                    string
	RSSKB                   int64
	HeapInuse, Goroutines   float64
	OpenFiles               int
	ToFleet                 []int
	CPU                     float64 // seconds per second in the idle window
	ProbesPooled, ProbesNew float64 // per second in the idle window
	Err                     string
}

// startReplicas starts n more gateway replicas and waits until the Leases of
// all n+1 have been renewed twice since the last one appeared: every replica
// has then seen every other one live.
func startReplicas(ctx context.Context, s *scene, n int, args []string) ([]*replica, error) {
	var out []*replica
	for i := range n {
		name := fmt.Sprintf("kube-gateway-replica-%d", i+2)
		p, url, err := s.env.StartExtraGateway(ctx, name, args...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		root := *s.gatewayRoot
		root.Base = url
		out = append(out, &replica{Name: name, pid: p.PID(), root: &root})
	}
	cs, err := kubernetes.NewForConfig(s.env.HubConfig(harness.UserAdmin))
	if err != nil {
		return nil, err
	}
	sel := metav1.ListOptions{LabelSelector: replicas.LabelReplicaOf + "=" + statusLeaseGroup}
	renewals := map[string]int{}
	last := map[string]time.Time{}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		leases, err := cs.CoordinationV1().Leases(harness.GatewayNamespace).List(ctx, sel)
		if err != nil {
			return false, nil
		}
		if len(leases.Items) < n+1 {
			return false, nil
		}
		done := true
		for _, l := range leases.Items {
			if l.Spec.RenewTime == nil {
				done = false
				continue
			}
			if t := l.Spec.RenewTime.Time; !t.Equal(last[l.Name]) {
				last[l.Name] = t
				renewals[l.Name]++
			}
			done = done && renewals[l.Name] >= 3 // seen once, renewed twice since
		}
		return done, nil
	})
	if err != nil {
		return out, fmt.Errorf("waiting for %d replica Leases to be renewed: %w", n+1, err)
	}
	return out, nil
}

// take reads r's state after a forced collection.
func (r *replica) take(ctx context.Context, f *fleet) replicaState {
	st := replicaState{Name: r.Name}
	if err := measure.ForceGC(ctx, r.root.Client, r.root.Header, r.root.Base); err != nil {
		st.Err = err.Error()
	}
	st.RSSKB, _ = measure.RSSKB(r.pid)
	st.OpenFiles, _, _ = measure.OpenFiles(r.pid)
	if conns, err := measure.TCPConns(r.pid); err == nil {
		st.ToFleet = f.conns(conns)
	}
	if m, err := r.root.Scrape(ctx, r.root.Base+"/metrics"); err == nil {
		st.HeapInuse, _ = m.Sum("go_memstats_heap_inuse_bytes", nil)
		st.Goroutines, _ = m.Sum("go_goroutines", nil)
	} else if st.Err == "" {
		st.Err = err.Error()
	}
	return st
}

// replicaWindow measures every replica's CPU and probes over d (the idle
// window runs meanwhile for the first replica).
type replicaWindow struct {
	rs      []*replica
	ticks   []int64
	pooled  []float64
	own     []float64
	started time.Time
}

func startReplicaWindow(ctx context.Context, rs []*replica) *replicaWindow {
	w := &replicaWindow{rs: rs, started: time.Now()}
	for _, r := range rs {
		t, _ := measure.CPUTicks(r.pid)
		p, o := replicaProbes(ctx, r)
		w.ticks, w.pooled, w.own = append(w.ticks, t), append(w.pooled, p), append(w.own, o)
	}
	return w
}

// end fills CPU and probes of states (one per replica, in order).
func (w *replicaWindow) end(ctx context.Context, states []replicaState) {
	hz, _ := measure.ClockTicks()
	d := time.Since(w.started).Seconds()
	for i, r := range w.rs {
		t, _ := measure.CPUTicks(r.pid)
		p, o := replicaProbes(ctx, r)
		states[i].CPU = float64(t-w.ticks[i]) / hz / d
		states[i].ProbesPooled, states[i].ProbesNew = (p-w.pooled[i])/d, (o-w.own[i])/d
	}
}

func replicaProbes(ctx context.Context, r *replica) (pooled, own float64) {
	m, err := r.root.Scrape(ctx, r.root.Base+"/metrics")
	if err != nil {
		return 0, 0
	}
	pooled, _ = m.Sum(metrics.HealthProbesName, map[string]string{"connection": metrics.ConnectionPooled})
	own, _ = m.Sum(metrics.HealthProbesName, map[string]string{"connection": metrics.ConnectionNew})
	return pooled, own
}
