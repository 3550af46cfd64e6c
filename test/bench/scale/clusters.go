package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/metrics"
	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/harness"
)

const (
	scaleLabel = "kube-gateway-bench/scale"
	scaleNS    = "bench-scale" // the hub namespace of the comparison ConfigMaps
	fieldMgr   = "kube-gateway-bench-scale"
	ucPath     = "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters"
)

var getTarget = "/api/v1/namespaces/" + watchNS + "/configmaps/" + eventName(0)

// clusterResult is everything the cluster phase measured.
type clusterResult struct {
	K int
	// With the harness's two clusters only.
	Baseline     snapshot
	BaselineIdle idle
	BaselineGets gets
	// Servers describes the servers of the burst's clusters, ServerKind is
	// their -cluster-servers.
	Servers, ServerKind string
	// ReplicasBefore and ReplicasAfter are the other gateway replicas
	// (-replicas) with the harness's clusters and with the K more.
	ReplicasBefore, ReplicasAfter []replicaState
	// The burst.
	ApplyTook     time.Duration
	ApplyErrors   int
	FirstApplyErr string
	ConnectedTook time.Duration // burst start to a gateway connection to each member-a server per cluster
	CompiledTook  time.Duration // burst start to every observedGeneration = generation
	ReadyTook     time.Duration // burst start to every Ready=True
	Compiled      int
	Ready         int
	// With the K clusters.
	After snapshot
	// HeapFile is the gateway's heap profile with the K clusters
	// registered, HeapBaseFile the one before them, HeapTop the top sites
	// by bytes in use of the difference.
	HeapFile, HeapBaseFile string
	HeapTop                string
	AfterIdle              idle
	Gets                   gets
	// LIST and WATCH through the hub; the UpstreamClusters' LIST also
	// straight from the gateway (GatewayList), and the gateway's CPU
	// profile over LISTs of them through the hub (ListCPUFile, its top);
	// the same for WATCH (GatewayWatch, WatchCPUFile).
	UpstreamClusters, ConfigMaps listStat
	GatewayList                  []time.Duration
	ListCPUFile, ListCPUTop      string
	GatewayWatch                 []time.Duration
	WatchCPUFile, WatchCPUTop    string
	Series                       []point
	// FanOut lists and watches over every registered cluster.
	FanOut *fanOutResult
	// Remote lists over clusters far from the gateway.
	Remote *remoteResult
}

// idle is a steady-state window.
type idle struct {
	For        time.Duration
	GatewayCPU float64 // seconds of CPU per second
	ServersCPU float64 // the servers of the clusters (fleet) together, seconds of CPU per second
	// CPUFile is the gateway's CPU profile of the window, CPUTop pprof's top
	// functions in it (only when asked for).
	CPUFile, CPUTop string
	Probes          float64 // /readyz requests per second the servers of the clusters (fleet) served
	// ProbesPooled and ProbesNew are the gateway's probes per second over
	// pooled connections and over new ones (a TLS handshake each), from its
	// kube_gateway_health_probes_total.
	ProbesPooled, ProbesNew float64
	StatusWrites            int // MODIFIED events of the K UpstreamClusters (0 in the baseline)
	Err                     string
}

// listStat is the LIST and WATCH of one kind through the hub.
type listStat struct {
	Objects int
	Bytes   int64
	List    []time.Duration
	Watch   []time.Duration // until the initial ADDED event of every object
	Err     string
}

func clusterPhase(ctx context.Context, s *scene, o options) (*clusterResult, error) {
	res := &clusterResult{K: o.Clusters, ServerKind: o.ClusterServers}
	mcs, err := kubernetes.NewForConfig(s.env.Members[harness.MemberB].Config(harness.UserAdmin, 0))
	if err != nil {
		return nil, err
	}
	if err := setupWatchObjects(ctx, mcs); err != nil { // the GET's object
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(s.env.HubConfig(harness.UserAdmin))
	if err != nil {
		return nil, err
	}
	ucs := dyn.Resource(harness.UpstreamClusterGVR)

	if o.ClusterServers == serversStandIns {
		logf("clusters: starting %d stand-in servers with %d ports each", o.StandIns, o.StandInPorts)
		if s.fleet, err = startStandIns(ctx, s.env, o.StandIns, o.StandInPorts); err != nil {
			return nil, fmt.Errorf("stand-ins: %w", err)
		}
	} else {
		s.fleet = memberAFleet(s)
	}
	f := s.fleet
	res.Servers = f.describe()
	var reps []*replica
	if o.Replicas > 1 {
		logf("clusters: starting %d more gateway replicas", o.Replicas-1)
		if reps, err = startReplicas(ctx, s, o.Replicas-1, o.GatewayArgs); err != nil {
			return nil, err
		}
	}
	takeReplicas := func() []replicaState {
		var out []replicaState
		for _, r := range reps {
			out = append(out, r.take(ctx, f))
		}
		return out
	}
	pids := []int{s.gatewayPID}
	for _, r := range reps {
		pids = append(pids, r.pid)
	}

	// Baseline: the harness's two clusters.
	for name, t := range map[string]*measure.Target{"through the gateway": s.gateway, "directly": s.direct} {
		if r := t.Load(ctx, getTarget, 1, 50, 0); r.Errors > 0 {
			return nil, fmt.Errorf("warm-up GET %s %s: %v", getTarget, name, r.FirstErr)
		}
	}
	res.Baseline = s.take(ctx, "2 clusters", true)
	res.ReplicasBefore = takeReplicas()
	res.HeapBaseFile = filepath.Join(o.OutDir, "kube-gateway-heap-clusters-before.pprof")
	if _, err := s.heapProfile(ctx, res.HeapBaseFile, ""); err != nil {
		logf("clusters: heap profile: %v", err)
		res.HeapBaseFile = ""
	}
	baseIdle := max(o.ClusterIdle/3, 5*time.Second)
	logf("clusters: baseline: %s idle with the harness's 2 clusters", baseIdle)
	res.BaselineIdle = s.idle(ctx, baseIdle, nil, "")
	res.BaselineGets = pairedGets(ctx, s, o.Gets)
	logf("clusters: baseline: RSS %s, %.0f goroutines, CPU %.1f ms/s, %.1f probes/s, c=1 GET p50 %s, ÷ direct %s",
		measure.MB(float64(res.Baseline.RSSKB)), res.Baseline.Goroutines, 1e3*res.BaselineIdle.GatewayCPU, res.BaselineIdle.Probes,
		measure.Dur(res.BaselineGets.Gateway.Pct(50)), res.BaselineGets.ratioSpread())

	// The burst.
	var ready atomic.Int64
	sr := startSeries(ctx, s, o.SampleInterval, func() int { return int(ready.Load()) })
	defer func() {
		if sr != nil {
			sr.Stop()
		}
	}()
	sr.setPhase("before")
	if err := sleep(ctx, 2*o.SampleInterval); err != nil {
		return nil, err
	}
	sr.setPhase("burst")
	logf("clusters: applying %d UpstreamClusters (%d servers each, %s), %d at a time", o.Clusters, len(f.Slots), f.Kind, o.Burst)
	start := time.Now()
	res.ApplyErrors, res.FirstApplyErr = applyClusters(ctx, ucs, f, o.Clusters, o.Burst)
	res.ApplyTook = time.Since(start)
	logf("clusters: applied in %s (%d errors%s)", res.ApplyTook.Round(10*time.Millisecond), res.ApplyErrors, firstErr(res.FirstApplyErr))

	sr.setPhase("compiling")
	sel := metav1.ListOptions{LabelSelector: scaleLabel + "=true"}
	deadline := start.Add(o.ReadyTimeout)
	// The gateway compiles a cluster and its transports dial as the first
	// health probes go out, long before the status writer (rate-limited)
	// reports it: connections show when the data plane is ready.
	wantConns := sum(res.Baseline.ToFleet) + o.Clusters*len(f.Slots)
	lastList := time.Time{}
	for {
		if res.ConnectedTook == 0 {
			// With replicas sharing the health checks, the owner of each
			// cluster connects to its servers.
			n := 0
			for _, pid := range pids {
				if conns, err := measure.TCPConns(pid); err == nil {
					n += sum(f.conns(conns))
				}
			}
			if n >= wantConns {
				res.ConnectedTook = time.Since(start)
			}
		}
		if time.Since(lastList) < time.Second {
			if err := sleep(ctx, 250*time.Millisecond); err != nil {
				return nil, err
			}
			continue
		}
		lastList = time.Now()
		list, err := ucs.List(ctx, sel)
		if err == nil {
			compiled, rdy := countReady(list.Items)
			ready.Store(int64(rdy))
			res.Compiled, res.Ready = compiled, rdy
			if compiled >= o.Clusters && res.CompiledTook == 0 {
				res.CompiledTook = time.Since(start)
			}
			if rdy >= o.Clusters {
				res.ReadyTook = time.Since(start)
				break
			}
		}
		if time.Now().After(deadline) {
			logf("clusters: only %d of %d Ready after %s (err %v)", res.Ready, o.Clusters, o.ReadyTimeout, err)
			break
		}
	}
	logf("clusters: connected in %s, %d compiled in %s, %d Ready in %s", res.ConnectedTook.Round(100*time.Millisecond),
		res.Compiled, res.CompiledTook.Round(100*time.Millisecond), res.Ready, res.ReadyTook.Round(100*time.Millisecond))

	sr.setPhase("ready")
	// The series scrapes the gateway's /metrics every second, far more often
	// than a monitoring system does, and that scrape (a series per cluster
	// and server) would count as idle CPU: it ends before the idle window.
	res.Series = sr.Stop()
	sr = nil
	logf("clusters: steady state: %s idle", o.ClusterIdle)
	rw := startReplicaWindow(ctx, reps)
	res.AfterIdle = s.idle(ctx, o.ClusterIdle, ucs, filepath.Join(o.OutDir, "kube-gateway-cpu-clusters.pprof"))
	// Memory after the idle window: what a connection keeps of the probes'
	// responses grows over its first probes.
	res.ReplicasAfter = takeReplicas()
	rw.end(ctx, res.ReplicasAfter)
	res.After = s.take(ctx, fmt.Sprintf("%d clusters", o.Clusters+2), true)
	res.HeapFile = filepath.Join(o.OutDir, "kube-gateway-heap-clusters.pprof")
	if res.HeapTop, err = s.heapProfile(ctx, res.HeapFile, res.HeapBaseFile); err != nil {
		logf("clusters: heap profile: %v", err)
		res.HeapFile = ""
	}
	for _, t := range []*measure.Target{s.gateway, s.direct} {
		if err := t.Load(ctx, getTarget, 1, 50, 0).FirstErr; err != nil {
			logf("clusters: warm-up GET: %v", err)
		}
	}
	res.Gets = pairedGets(ctx, s, o.Gets)
	logf("clusters: RSS %s, %.0f goroutines, connections to the servers %v, CPU %.1f ms/s, %.1f probes/s, %d status writes in %s, c=1 GET p50 %s, ÷ direct %s",
		measure.MB(float64(res.After.RSSKB)), res.After.Goroutines, res.After.ToFleet, 1e3*res.AfterIdle.GatewayCPU, res.AfterIdle.Probes,
		res.AfterIdle.StatusWrites, res.AfterIdle.For.Round(time.Second), measure.Dur(res.Gets.Gateway.Pct(50)), res.Gets.ratioSpread())

	// LIST and WATCH through the hub: the K UpstreamClusters against K
	// ConfigMaps of the same content on the hub.
	hcs, err := kubernetes.NewForConfig(s.env.HubConfig(harness.UserAdmin))
	if err != nil {
		return nil, err
	}
	logf("clusters: creating %d ConfigMaps on the hub to compare LIST and WATCH with", o.Clusters)
	if err := hubConfigMaps(ctx, hcs, ucs, f, o.Clusters, o.Burst); err != nil {
		return nil, err
	}
	q := "?" + url.Values{"labelSelector": {scaleLabel + "=true"}}.Encode()
	res.UpstreamClusters = s.listAndWatch(ctx, ucPath+q, o.Clusters, o.ListRepeats)
	res.ConfigMaps = s.listAndWatch(ctx, "/api/v1/namespaces/"+scaleNS+"/configmaps"+q, o.Clusters, o.ListRepeats)
	res.GatewayList = s.lists(ctx, s.gatewayRoot, ucPath+q, o.ListRepeats, 0)
	res.ListCPUFile, res.ListCPUTop = s.profileWhile(ctx, filepath.Join(o.OutDir, "kube-gateway-cpu-uclist.pprof"), func(d time.Duration) {
		s.lists(ctx, s.hubRoot, ucPath+q, 0, d)
	})
	res.GatewayWatch = s.watches(ctx, s.gatewayRoot, ucPath+q, o.Clusters, o.ListRepeats, 0)
	res.WatchCPUFile, res.WatchCPUTop = s.profileWhile(ctx, filepath.Join(o.OutDir, "kube-gateway-cpu-ucwatch.pprof"), func(d time.Duration) {
		s.watches(ctx, s.hubRoot, ucPath+q, o.Clusters, 0, d)
	})
	logf("clusters: LIST through the hub: UpstreamClusters %s, ConfigMaps %s; UpstreamClusters straight from the gateway %s; WATCH: %s, %s, straight from the gateway %s",
		measure.Dur(medianDur(res.UpstreamClusters.List)), measure.Dur(medianDur(res.ConfigMaps.List)), measure.Dur(medianDur(res.GatewayList)),
		measure.Dur(medianDur(res.UpstreamClusters.Watch)), measure.Dur(medianDur(res.ConfigMaps.Watch)), measure.Dur(medianDur(res.GatewayWatch)))

	if f.Kind != serversMemberA {
		logf("clusters: no fan-out phase: the stand-ins serve no ConfigMaps (-cluster-servers=%s has one)", serversMemberA)
		return res, nil
	}
	logf("clusters: fan-out LIST and WATCH over the %d clusters", o.Clusters+2)
	res.FanOut = fanOutPhase(ctx, s, o.Clusters+2, o.ListRepeats, res.AfterIdle.GatewayCPU, baseIdle,
		filepath.Join(o.OutDir, "kube-gateway-cpu-fanout.pprof"), filepath.Join(o.OutDir, "kube-gateway-heap-fanout.pprof"))
	logf("clusters: fan-out LIST %s; WATCH open in %s, %d events in %s%s", measure.Dur(medianDur(res.FanOut.List)),
		measure.Dur(res.FanOut.WatchOpen), res.FanOut.Events.Events, measure.Dur(res.FanOut.Events.Took), firstErr(res.FanOut.Err))
	if o.RemoteClusters > 0 {
		logf("clusters: fan-out over %d more clusters %s away", o.RemoteClusters, o.RemoteLatency)
		res.Remote = remotePhase(ctx, s, ucs, o)
		logf("clusters: remote fan-out LIST %s%s", measure.Dur(medianDur(res.Remote.List)), firstErr(res.Remote.Err))
	}
	return res, nil
}

// upstreamCluster is the burst's object number i: f's servers and Secret.
func upstreamCluster(i int, f *fleet) *unstructured.Unstructured {
	return burstCluster(clusterName(i), scaleLabel, f.endpoints(i), f.Secret)
}

// memberACluster is an UpstreamCluster labeled label=true whose servers are
// endpoints, with member-a's Secret.
func memberACluster(name, label string, endpoints []string) *unstructured.Unstructured {
	return burstCluster(name, label, endpoints, harness.MemberA)
}

// burstCluster is an UpstreamCluster labeled label=true whose servers are
// endpoints, with the credential of Secret secret.
func burstCluster(name, label string, endpoints []string, secret string) *unstructured.Unstructured {
	var servers []any
	for _, e := range endpoints {
		servers = append(servers, map[string]any{"endpoint": e})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": harness.UpstreamClusterGVR.GroupVersion().String(),
		"kind":       "UpstreamCluster",
		"metadata":   map[string]any{"name": name, "labels": map[string]any{label: "true"}},
		"spec": map[string]any{
			"servers":      servers,
			"clientConfig": map[string]any{"secretRef": map[string]any{"namespace": harness.GatewayNamespace, "name": secret}},
		},
	}}
}

func clusterName(i int) string { return fmt.Sprintf("scale-%05d", i) }

// applyClusters server-side applies n UpstreamClusters, c at a time.
func applyClusters(ctx context.Context, ucs dynamic.NamespaceableResourceInterface, f *fleet, n, c int) (errs int, first string) {
	var mu sync.Mutex
	concurrently(ctx, n, c, func(i int) {
		name := clusterName(i)
		if _, err := ucs.Apply(ctx, name, upstreamCluster(i, f), metav1.ApplyOptions{FieldManager: fieldMgr, Force: true}); err != nil {
			mu.Lock()
			errs++
			if first == "" {
				first = err.Error()
			}
			mu.Unlock()
		}
	})
	return errs, first
}

// countReady counts the objects whose status answers their generation
// (compiled) and those that are also Ready=True.
func countReady(items []unstructured.Unstructured) (compiled, ready int) {
	for _, it := range items {
		og, _, _ := unstructured.NestedInt64(it.Object, "status", "observedGeneration")
		if og != it.GetGeneration() {
			continue
		}
		compiled++
		conds, _, _ := unstructured.NestedSlice(it.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == gatewayv1alpha1.ConditionReady && m["status"] == string(metav1.ConditionTrue) {
				ready++
				break
			}
		}
	}
	return compiled, ready
}

// idle measures a steady-state window of d: the gateway's and member-a's
// CPU, the /readyz requests member-a's replicas served and, with ucs, the
// status writes of the bench's UpstreamClusters (MODIFIED events of a watch
// from the window's start); with cpuFile, the gateway's CPU profile of the
// window.
func (s *scene) idle(ctx context.Context, d time.Duration, ucs dynamic.NamespaceableResourceInterface, cpuFile string) idle {
	var out idle
	profiled := make(chan error, 1)
	if cpuFile != "" {
		go func() { profiled <- s.cpuProfile(ctx, d, cpuFile) }()
	}
	var w watch.Interface
	if ucs != nil {
		sel := scaleLabel + "=true"
		list, err := ucs.List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err == nil {
			w, err = ucs.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.GetResourceVersion()})
		}
		if err != nil {
			out.Err = err.Error()
		}
	}
	probesBefore, perr := s.fleet.probes(ctx)
	pooledBefore, newBefore, gerr := s.gatewayProbes(ctx)
	cpuBefore, _ := measure.CPUTicks(s.gatewayPID)
	serversBefore := s.fleet.cpuTicks()
	hz, _ := measure.ClockTicks()
	start := time.Now()
	timer := time.NewTimer(d)
	defer timer.Stop()
	var events <-chan watch.Event
	if w != nil {
		defer w.Stop()
		events = w.ResultChan()
	}
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-timer.C:
			break loop
		case ev, ok := <-events:
			if !ok {
				out.Err = "the status watch ended early"
				events = nil
				continue
			}
			if ev.Type == watch.Modified {
				out.StatusWrites++
			}
		}
	}
	out.For = time.Since(start)
	cpuAfter, _ := measure.CPUTicks(s.gatewayPID)
	out.GatewayCPU = float64(cpuAfter-cpuBefore) / hz / out.For.Seconds()
	out.ServersCPU = float64(s.fleet.cpuTicks()-serversBefore) / hz / out.For.Seconds()
	if cpuFile != "" {
		if err := <-profiled; err != nil {
			logf("clusters: CPU profile: %v", err)
		} else {
			bin, _ := harness.GatewayBinary(s.env.BinDir)
			out.CPUFile, out.CPUTop = cpuFile, measure.Pprof(ctx, bin, cpuFile, "-top", "-nodecount=15")
		}
	}
	probesAfter, perr2 := s.fleet.probes(ctx)
	if perr == nil && perr2 == nil {
		out.Probes = (probesAfter - probesBefore) / out.For.Seconds()
	} else if out.Err == "" {
		out.Err = fmt.Sprint("the servers' metrics: ", perr, perr2)
	}
	pooledAfter, newAfter, gerr2 := s.gatewayProbes(ctx)
	if gerr == nil && gerr2 == nil {
		out.ProbesPooled = (pooledAfter - pooledBefore) / out.For.Seconds()
		out.ProbesNew = (newAfter - newBefore) / out.For.Seconds()
	} else if out.Err == "" {
		out.Err = fmt.Sprint("gateway metrics: ", gerr, gerr2)
	}
	return out
}

// gatewayProbes reads the gateway's health probes sent so far over pooled
// connections and over new ones.
func (s *scene) gatewayProbes(ctx context.Context) (pooled, own float64, err error) {
	m, err := s.gatewayRoot.Scrape(ctx, s.env.GatewayURL+"/metrics")
	if err != nil {
		return 0, 0, err
	}
	pooled, _ = m.Sum(metrics.HealthProbesName, map[string]string{"connection": metrics.ConnectionPooled})
	own, _ = m.Sum(metrics.HealthProbesName, map[string]string{"connection": metrics.ConnectionNew})
	return pooled, own, nil
}

// hubConfigMaps creates n ConfigMaps in scaleNS on the hub, c at a time,
// holding what the burst's first UpstreamCluster holds (its spec and status
// as JSON) and padded to its size (managedFields included), so that both
// lists carry about as many bytes.
func hubConfigMaps(ctx context.Context, cs kubernetes.Interface, ucs dynamic.NamespaceableResourceInterface, f *fleet, n, c int) error {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	obj := upstreamCluster(0, f)
	if got, err := ucs.Get(ctx, clusterName(0), metav1.GetOptions{}); err == nil {
		obj = got
	}
	spec, err := json.Marshal(obj.Object["spec"])
	if err != nil {
		return err
	}
	status, err := json.Marshal(obj.Object["status"])
	if err != nil {
		return err
	}
	data := map[string]string{"spec": string(spec), "status": string(status)}
	// The padding: what the UpstreamCluster is larger than a ConfigMap of
	// this data, less what the key and its managed field add.
	size, err := json.Marshal(obj.Object)
	if err != nil {
		return err
	}
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "size-probe", Labels: map[string]string{"bench-size-probe": "true"}}, Data: data}
	created, err := cs.CoreV1().ConfigMaps(scaleNS).Create(ctx, probe, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = cs.CoreV1().ConfigMaps(scaleNS).Get(ctx, probe.Name, metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	created.APIVersion, created.Kind = "v1", "ConfigMap"
	cmSize, err := json.Marshal(created)
	if err != nil {
		return err
	}
	if pad := len(size) - len(cmSize) - len(`,"pad":""`) - len(`,"f:pad":{}`); pad > 0 {
		data["pad"] = strings.Repeat("x", pad)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, c)
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: clusterName(i), Labels: map[string]string{scaleLabel: "true"}}, Data: data}
				if _, err := cs.CoreV1().ConfigMaps(scaleNS).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// listAndWatch LISTs path through the hub repeats times, and as often WATCHes
// it from no resourceVersion until the initial ADDED event of every one of n
// objects arrived.
func (s *scene) listAndWatch(ctx context.Context, path string, n, repeats int) listStat {
	st := listStat{Objects: n}
	for i := 0; i < repeats && ctx.Err() == nil; i++ {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		t0 := time.Now()
		r, err := s.hubRoot.Do(rctx, path)
		cancel()
		if err != nil {
			st.Err = err.Error()
			return st
		}
		st.List = append(st.List, time.Since(t0))
		st.Bytes = r.Bytes

		w := s.watches(ctx, s.hubRoot, path, n, 1, 0)
		if len(w) == 0 {
			st.Err = fmt.Sprintf("watch: not all %d initial events arrived (the log says why)", n)
			return st
		}
		st.Watch = append(st.Watch, w...)
	}
	return st
}

// lists LISTs path with t n times, or for d: the time of each LIST.
func (s *scene) lists(ctx context.Context, t *measure.Target, path string, n int, d time.Duration) []time.Duration {
	var took []time.Duration
	start := time.Now()
	for i := 0; (i < n || time.Since(start) < d) && ctx.Err() == nil; i++ {
		t0 := time.Now()
		if _, err := t.Do(ctx, path); err != nil {
			logf("clusters: LIST %s: %v", path, err)
			return took
		}
		took = append(took, time.Since(t0))
	}
	return took
}

// profileWhile takes the gateway's CPU profile into file while load runs
// for 4 s, and returns file and pprof's top of it; "" for both when the
// profile failed.
func (s *scene) profileWhile(ctx context.Context, file string, load func(d time.Duration)) (string, string) {
	const d = 4 * time.Second
	profiled := make(chan error, 1)
	go func() { profiled <- s.cpuProfile(ctx, d, file) }()
	load(d)
	if err := <-profiled; err != nil {
		logf("clusters: CPU profile %s: %v", filepath.Base(file), err)
		return "", ""
	}
	bin, _ := harness.GatewayBinary(s.env.BinDir)
	return file, measure.Pprof(ctx, bin, file, "-top", "-cum", "-nodecount=25")
}

// watches WATCHes path with t from no resourceVersion until the initial
// events of n objects arrived, k times or for d: the time of each.
func (s *scene) watches(ctx context.Context, t *measure.Target, path string, n, k int, d time.Duration) []time.Duration {
	var took []time.Duration
	start := time.Now()
	for i := 0; (i < k || time.Since(start) < d) && ctx.Err() == nil; i++ {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		t0 := time.Now()
		got, err := watchInitial(wctx, t, path+"&watch=1", n)
		cancel()
		if err != nil || got < n {
			logf("clusters: WATCH %s: %d of %d initial events: %v", path, got, n, err)
			return took
		}
		took = append(took, time.Since(t0))
	}
	return took
}

// watchInitial opens the watch path and reads events until n arrived.
func watchInitial(ctx context.Context, t *measure.Target, path string, n int) (int, error) {
	body, err := openWatch(ctx, t, path, "")
	if err != nil {
		return 0, err
	}
	defer body.Close()
	dec := json.NewDecoder(body)
	got := 0
	for got < n {
		var ev struct {
			Type string `json:"type"`
		}
		if err := dec.Decode(&ev); err != nil {
			return got, err
		}
		if ev.Type == string(watch.Added) {
			got++
		}
	}
	return got, nil
}

func medianDur(ds []time.Duration) time.Duration {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return time.Duration(measure.Median(xs))
}
