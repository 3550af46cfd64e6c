package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewharf/kube-gateway/apis/client/clientset/versioned"
	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/fleetcache"
	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// The fleet cache phase's names. The cluster labels have no prefix, so that
// the fan-out's selector segment needs no escaped slash.
const (
	cacheLabel     = "bench-cache"     // every UpstreamCluster of the phase
	cacheOneLabel  = "bench-cache-one" // the one the watches read
	cacheNS        = "bench-cache"     // member-b's namespace of the cached ConfigMaps
	cacheDirectNS  = "bench-cache-direct"
	cacheResource  = "bench-configmaps"   // the CachedResource
	cacheIdentity  = "bench-cache-reader" // member-b ServiceAccount, ClusterRole and binding, hub Secret
	cacheValueSize = 560                  // bytes of data per ConfigMap: about 1.1 KB of JSON with its metadata
)

// cacheSegment and cacheOneSegment are the fan-out's selector segments.
var (
	cacheSegment    = cacheLabel + "=true"
	cacheOneSegment = cacheOneLabel + "=true"
)

// fleetPath is a fan-out over the clusters segment selects, to path on each.
func fleetPath(segment, path string) string {
	return ucPath + "/" + url.PathEscape(segment) + "/proxy" + path
}

// listKinds are the three LISTs of the phase, in the order of a round.
var listKinds = []string{"direct", "cached", "live"}

// cacheResult is everything the fleet cache phase measured.
type cacheResult struct {
	Clusters, Objects int // UpstreamClusters, ConfigMaps per member (-cache-clusters, -cache-objects)
	ObjectJSON        int // bytes of one of the ConfigMaps as member-b serves it
	ReadyTook         time.Duration
	Ready             int
	// The direct LIST's ConfigMaps on member-a.
	CreateTook   time.Duration
	CreateErrors int
	FirstErr     string
	// The CachedResource: from its creation until its status said every
	// cache synced, and until the last status.caches lastSyncTime (1 s).
	SyncTook, LastSyncAfter time.Duration
	Synced, Selected        int
	// From the clusters' status.caches once synced.
	CachedObjects, CachedBytes int64
	// Member-b's ConfigMaps, all namespaces, as it lists them: what each
	// cache holds, and their JSON.
	MemberObjects   int
	MemberJSONBytes int64
	Before, After   snapshot
	// The gateway's heap profiles before the CachedResource and with the
	// caches synced, and the top sites of their difference.
	HeapBeforeFile, HeapFile, HeapTop string
	// The LISTs: items and bytes (as received, uncompressed) of each kind,
	// and the rounds.
	Items  map[string]int
	Bytes  map[string]int64
	Rounds []cacheRound
	// Member-b's LISTs of ConfigMaps (apiserver_request_total) during the
	// cached LISTs, and how the gateway answered the members' parts of them.
	MemberLists float64
	CachedReads map[string]float64
	LiveReads   map[string]float64
	// Two consistent LISTs (no resourceVersion), one after the other: time,
	// how the gateway answered the members' parts, member-b's LISTs of
	// ConfigMaps meanwhile.
	Consistent            [2]time.Duration
	ConsistentReads       [2]map[string]float64
	ConsistentMemberLists [2]float64
	CPUFile, CPUTop       string
	// The watches over one cluster: the gateway once the other caches were
	// dropped and their clusters' status written, the machine's load
	// average then, the gateway's CPU (seconds per second) and its profile
	// while the events pass.
	OneCache         snapshot
	OneCacheHeapFile string // its heap profile, and the top sites of what it holds beyond what it held before the CachedResource
	OneCacheHeapTop  string
	WatchLoad        string
	WatchCPU         float64
	WatchCPUFile     string
	WatchCPUTop      string
	Events           *eventResult
	Deliveries       []delivery // cached, live, direct
	WatchReads       map[string]float64
	Err              string
}

// cacheRound is one round of the three LISTs: wall time and CPU seconds of
// the gateway, the hub and the member that answered (member-a for direct,
// member-b for the fan-outs).
type cacheRound map[string]listCost

type listCost struct {
	Took                 time.Duration
	Gateway, Hub, Member float64
}

// cachePhase measures the fleet cache over o.CacheClusters UpstreamClusters,
// all member-b, each caching its o.CacheObjects ConfigMaps.
func cachePhase(ctx context.Context, s *scene, o options) (*cacheResult, error) {
	res := &cacheResult{Clusters: o.CacheClusters, Objects: o.CacheObjects, Items: map[string]int{}, Bytes: map[string]int64{}}
	mb := s.env.Members[harness.MemberB]
	mbcs, err := kubernetes.NewForConfig(mb.Config(harness.UserAdmin, 0))
	if err != nil {
		return nil, err
	}
	hub, err := kubernetes.NewForConfig(s.env.HubConfig(harness.UserAdmin))
	if err != nil {
		return nil, err
	}
	gw, err := versioned.NewForConfig(s.env.HubConfig(harness.UserAdmin))
	if err != nil {
		return nil, err
	}
	ucs, crs := gw.GatewayV1alpha1().UpstreamClusters(), gw.GatewayV1alpha1().CachedResources()
	defer cleanupCache(mbcs, hub, gw)

	// member-b: the cached ConfigMaps, the ones the watches follow, the
	// cache identity.
	if err := setupWatchObjects(ctx, mbcs); err != nil {
		return nil, err
	}
	logf("cache: creating %d ConfigMaps in %s on member-b", o.CacheObjects, cacheNS)
	if _, errs, first := createConfigMaps(ctx, []kubernetes.Interface{mbcs}, cacheNS, o.CacheObjects, o.Burst); errs > 0 {
		return nil, fmt.Errorf("ConfigMaps on member-b: %d failed, first: %s", errs, first)
	}
	r, err := s.direct.Do(ctx, "/api/v1/namespaces/"+cacheNS+"/configmaps/"+cacheObjectName(0))
	if err != nil {
		return nil, err
	}
	res.ObjectJSON = int(r.Bytes) - 1 // the encoder's newline
	secret, err := grantCacheReader(ctx, mbcs, hub, mb)
	if err != nil {
		return nil, fmt.Errorf("cache identity: %w", err)
	}

	// The clusters, all member-b.
	logf("cache: applying %d UpstreamClusters (member-b, cache identity %s), %d at a time", o.CacheClusters, secret, o.Burst)
	start := time.Now()
	var mu sync.Mutex
	var applyErr error
	concurrently(ctx, o.CacheClusters, o.Burst, func(i int) {
		uc := cacheCluster(i, mb, secret)
		if _, err := ucs.Create(ctx, uc, metav1.CreateOptions{FieldManager: fieldMgr}); err != nil && !apierrors.IsAlreadyExists(err) {
			mu.Lock()
			applyErr = err
			mu.Unlock()
		}
	})
	if applyErr != nil {
		return nil, fmt.Errorf("UpstreamClusters: %w", applyErr)
	}
	sel := metav1.ListOptions{LabelSelector: cacheSegment}
	for res.Ready < o.CacheClusters {
		if time.Since(start) > o.ReadyTimeout {
			return nil, fmt.Errorf("only %d of %d UpstreamClusters Ready after %s", res.Ready, o.CacheClusters, o.ReadyTimeout)
		}
		if err := sleep(ctx, time.Second); err != nil {
			return nil, err
		}
		l, err := ucs.List(ctx, sel)
		if err != nil {
			continue
		}
		res.Ready = 0
		for _, uc := range l.Items {
			if metav1Ready(uc.Status.Conditions) {
				res.Ready++
			}
		}
	}
	res.ReadyTook = time.Since(start)
	logf("cache: %d Ready in %s", res.Ready, res.ReadyTook.Round(100*time.Millisecond))

	// The direct LIST's ConfigMaps: as many as the caches hold, on member-a.
	var macs []kubernetes.Interface
	for i := range s.env.Members[harness.MemberA].Servers {
		c, err := kubernetes.NewForConfig(s.env.Members[harness.MemberA].Config(harness.UserAdmin, i))
		if err != nil {
			return nil, err
		}
		macs = append(macs, c)
	}
	n := o.CacheClusters * o.CacheObjects
	logf("cache: creating %d ConfigMaps in %s on member-a, %d at a time", n, cacheDirectNS, 2*o.Burst)
	res.CreateTook, res.CreateErrors, res.FirstErr = createConfigMaps(ctx, macs, cacheDirectNS, n, 2*o.Burst)
	logf("cache: created in %s (%.0f/s, %d errors%s)", res.CreateTook.Round(100*time.Millisecond), float64(n)/res.CreateTook.Seconds(), res.CreateErrors, firstErr(res.FirstErr))
	defer func() {
		if err := macs[0].CoreV1().Namespaces().Delete(context.Background(), cacheDirectNS, metav1.DeleteOptions{}); err != nil {
			logf("cache: deleting %s on member-a: %v", cacheDirectNS, err)
		}
	}()

	// Fill the caches.
	res.Before = s.take(ctx, "before the CachedResource", true)
	res.HeapBeforeFile = filepath.Join(o.OutDir, "kube-gateway-heap-before-cache.pprof")
	if err := s.saveProfile(ctx, "/debug/pprof/heap", res.HeapBeforeFile); err != nil {
		logf("cache: heap profile: %v", err)
		res.HeapBeforeFile = ""
	}
	cr := &gatewayv1alpha1.CachedResource{ObjectMeta: metav1.ObjectMeta{Name: cacheResource}, Spec: gatewayv1alpha1.CachedResourceSpec{
		Version: "v1", Resource: "configmaps", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{cacheLabel: "true"}}}}
	logf("cache: creating CachedResource %s over the %d clusters", cacheResource, o.CacheClusters)
	created := time.Now()
	if _, err := crs.Create(ctx, cr, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	for {
		got, err := crs.Get(ctx, cacheResource, metav1.GetOptions{})
		if err == nil {
			res.Synced, res.Selected = int(got.Status.SyncedClusters), int(got.Status.SelectedClusters)
			if res.Selected == o.CacheClusters && res.Synced == res.Selected {
				res.SyncTook = time.Since(created)
				break
			}
		}
		if time.Since(created) > o.ReadyTimeout {
			return nil, fmt.Errorf("CachedResource: %d of %d clusters synced after %s", res.Synced, o.CacheClusters, o.ReadyTimeout)
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return nil, err
		}
	}
	if l, err := ucs.List(ctx, sel); err == nil {
		var last time.Time
		for _, uc := range l.Items {
			for _, c := range uc.Status.Caches {
				if c.CachedResource != cacheResource {
					continue
				}
				res.CachedObjects += c.Objects
				res.CachedBytes += c.Bytes
				if c.LastSyncTime != nil && c.LastSyncTime.After(last) {
					last = c.LastSyncTime.Time
				}
			}
		}
		res.LastSyncAfter = last.Sub(created)
	}
	logf("cache: %d of %d synced in %s by the CachedResource's status (last lastSyncTime %s after creation); %d objects, %s counted",
		res.Synced, res.Selected, res.SyncTook.Round(100*time.Millisecond), res.LastSyncAfter.Round(time.Second), res.CachedObjects, mib(float64(res.CachedBytes)))
	if res.MemberObjects, res.MemberJSONBytes, err = listJSON(ctx, s.direct, "/api/v1/configmaps"); err != nil {
		return nil, fmt.Errorf("member-b's ConfigMaps: %w", err)
	}
	res.After = s.take(ctx, "caches synced", true)
	res.HeapFile = filepath.Join(o.OutDir, "kube-gateway-heap-cache.pprof")
	if res.HeapTop, err = s.heapProfile(ctx, res.HeapFile, res.HeapBeforeFile); err != nil {
		logf("cache: heap profile: %v", err)
		res.HeapFile = ""
	}
	logf("cache: live heap %s → %s, RSS %s → %s", mib(res.Before.HeapAlloc), mib(res.After.HeapAlloc), measure.MB(float64(res.Before.RSSKB)), measure.MB(float64(res.After.RSSKB)))

	// The LISTs: each once, decoded, to count what it holds (the cached one
	// also asks member-b's SubjectAccessReviews, kept for the rounds), then
	// the rounds.
	paths := map[string]*listPath{
		"direct": {s.memberA[0], "/api/v1/namespaces/" + cacheDirectNS + "/configmaps?resourceVersion=0", s.env.Members[harness.MemberA].Servers[0].Process.PID()},
		"cached": {s.hubRoot, fleetPath(cacheSegment, "/api/v1/namespaces/"+cacheNS+"/configmaps") + "?resourceVersion=0&" + strictParam, mb.Servers[0].Process.PID()},
		// pretty=false changes nothing in a JSON answer, and the cache does
		// not apply it: every member answers, the caches in place.
		"live": {s.hubRoot, fleetPath(cacheSegment, "/api/v1/namespaces/"+cacheNS+"/configmaps") + "?resourceVersion=0&pretty=false&" + strictParam, mb.Servers[0].Process.PID()},
	}
	for _, kind := range listKinds {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		items, bytes, err := countItems(lctx, paths[kind].target, paths[kind].path)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s LIST: %w", kind, err)
		}
		res.Items[kind], res.Bytes[kind] = items, bytes
	}
	logf("cache: items direct %d, cached %d, live %d", res.Items["direct"], res.Items["cached"], res.Items["live"])
	res.CachedReads, res.LiveReads = map[string]float64{}, map[string]float64{}
	for i := range o.CacheRounds {
		round := cacheRound{}
		for j := range listKinds {
			kind := listKinds[(i+j)%len(listKinds)] // each kind in each place in turn
			readsBefore, _ := s.cacheReads(ctx, "list")
			listsBefore, lerr := memberLists(ctx, s.direct, mb.Servers[0].URL)
			c, err := s.timeList(ctx, paths[kind])
			if err != nil {
				return nil, fmt.Errorf("%s LIST, round %d: %w", kind, i+1, err)
			}
			round[kind] = c
			listsAfter, lerr2 := memberLists(ctx, s.direct, mb.Servers[0].URL)
			readsAfter, _ := s.cacheReads(ctx, "list")
			switch kind {
			case "cached":
				if lerr == nil && lerr2 == nil {
					res.MemberLists += listsAfter - listsBefore
				}
				addDelta(res.CachedReads, readsBefore, readsAfter)
			case "live":
				addDelta(res.LiveReads, readsBefore, readsAfter)
			}
		}
		logf("cache: round %d: direct %s, cached %s, live %s", i+1, measure.Dur(round["direct"].Took), measure.Dur(round["cached"].Took), measure.Dur(round["live"].Took))
		res.Rounds = append(res.Rounds, round)
	}

	// Where the gateway's time goes in a cached LIST: a CPU profile over
	// back-to-back cached LISTs.
	if med := res.median("cached"); med > 0 {
		d := min(max(3*med, 6*time.Second), 30*time.Second)
		res.CPUFile = filepath.Join(o.OutDir, "kube-gateway-cpu-cache-list.pprof")
		profiled := make(chan error, 1)
		go func() { profiled <- s.cpuProfile(ctx, d, res.CPUFile) }()
		for end := time.Now().Add(d - time.Second); time.Now().Before(end); {
			if _, err := s.hubRoot.Do(ctx, paths["cached"].path); err != nil {
				logf("cache: LIST while profiling: %v", err)
				break
			}
		}
		if err := <-profiled; err != nil {
			logf("cache: CPU profile: %v", err)
			res.CPUFile = ""
		} else {
			bin, _ := harness.GatewayBinary(s.env.BinDir)
			res.CPUTop = measure.Pprof(ctx, bin, res.CPUFile, "-top", "-nodecount=25")
		}
	}

	// Consistent LISTs, for contrast: the second finds the caches known
	// behind and does not ask the members whether they are.
	for i := range res.Consistent {
		readsBefore, _ := s.cacheReads(ctx, "list")
		listsBefore, lerr := memberLists(ctx, s.direct, mb.Servers[0].URL)
		t0 := time.Now()
		if _, err := s.hubRoot.Do(ctx, fleetPath(cacheSegment, "/api/v1/namespaces/"+cacheNS+"/configmaps")+"?"+strictParam); err != nil {
			return nil, fmt.Errorf("consistent LIST: %w", err)
		}
		res.Consistent[i] = time.Since(t0)
		listsAfter, lerr2 := memberLists(ctx, s.direct, mb.Servers[0].URL)
		readsAfter, _ := s.cacheReads(ctx, "list")
		res.ConsistentReads[i] = map[string]float64{}
		addDelta(res.ConsistentReads[i], readsBefore, readsAfter)
		if lerr == nil && lerr2 == nil {
			res.ConsistentMemberLists[i] = listsAfter - listsBefore
		}
		logf("cache: consistent LIST %s: %v; member-b LISTs %.0f", measure.Dur(res.Consistent[i]), res.ConsistentReads[i], res.ConsistentMemberLists[i])
	}

	if o.CacheWatches > 0 && o.EventRate > 0 {
		if err := cacheWatches(ctx, s, o, mbcs, ucs, crs, res); err != nil {
			res.Err = "watches: " + err.Error()
			logf("cache: %s", res.Err)
		}
	}
	return res, nil
}

// cacheWatches measures event delay through the cache of one cluster: the
// CachedResource then selects only that one. Every cluster of the phase is
// member-b, so with all of them cached each update would be an event for
// every cache: the machine's limit, not the cache's delay.
func cacheWatches(ctx context.Context, s *scene, o options, mbcs kubernetes.Interface, ucs upstreamClusters, crs cachedResources, res *cacheResult) error {
	watchesBefore, err := memberWatches(ctx, s.direct, s.env.Members[harness.MemberB].Servers[0].URL)
	if err != nil {
		return err
	}
	patch := fmt.Appendf(nil, `{"spec":{"clusterSelector":{"matchLabels":{%q:null,%q:"true"}}}}`, cacheLabel, cacheOneLabel)
	if _, err := crs.Patch(ctx, cacheResource, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	// Until the other caches' watches on member-b ended and the one left is
	// synced.
	want := watchesBefore - float64(o.CacheClusters-1)
	start := time.Now()
	for {
		got, gerr := crs.Get(ctx, cacheResource, metav1.GetOptions{})
		n, werr := memberWatches(ctx, s.direct, s.env.Members[harness.MemberB].Servers[0].URL)
		if gerr == nil && werr == nil && got.Status.SelectedClusters == 1 && got.Status.SyncedClusters == 1 && n <= want {
			break
		}
		if time.Since(start) > 2*time.Minute {
			return fmt.Errorf("the caches of the other clusters did not stop within 2 minutes: member-b holds %.0f ConfigMap watches, %.0f expected", n, want)
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
	// And until the other clusters' status no longer lists their caches:
	// the status writes (rate-limited) and the collection of the dropped
	// caches are over before the events begin.
	for {
		l, err := ucs.List(ctx, metav1.ListOptions{LabelSelector: cacheSegment})
		left := -1
		if err == nil {
			left = 0
			for _, uc := range l.Items {
				for _, c := range uc.Status.Caches {
					if c.CachedResource == cacheResource {
						left++
					}
				}
			}
		}
		if left == 1 {
			break
		}
		if time.Since(start) > 2*time.Minute {
			return fmt.Errorf("%d clusters still list a cache in their status after 2 minutes", left)
		}
		if err := sleep(ctx, 2*time.Second); err != nil {
			return err
		}
	}
	res.OneCache = s.take(ctx, "one cache", true)
	if res.HeapBeforeFile != "" {
		res.OneCacheHeapFile = filepath.Join(o.OutDir, "kube-gateway-heap-one-cache.pprof")
		if res.OneCacheHeapTop, err = s.heapProfile(ctx, res.OneCacheHeapFile, res.HeapBeforeFile); err != nil {
			logf("cache: heap profile: %v", err)
			res.OneCacheHeapFile = ""
		}
	}
	logf("cache: one cache left: live heap %s, %.0f goroutines, TCP to member-b %v", mib(res.OneCache.HeapAlloc), res.OneCache.Goroutines, res.OneCache.ToMemberB)
	q := url.Values{"watch": {"1"}, "labelSelector": {roleLabel + "=event"}, "resourceVersion": {"0"}, "allowWatchBookmarks": {"true"},
		"timeoutSeconds": {fmt.Sprint(watchHours)}}
	path := "/api/v1/namespaces/" + watchNS + "/configmaps?" + q.Encode()
	readsBefore, _ := s.cacheReads(ctx, "watch")
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		res.WatchLoad = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	logf("cache: %d watches over one cluster's cache, %d over its member through the hub and %d on member-b (load average %s)", o.CacheWatches, o.CacheWatches, o.CacheWatches, res.WatchLoad)
	res.WatchCPUFile = filepath.Join(o.OutDir, "kube-gateway-cpu-cache-watch.pprof")
	profiled := make(chan error, 1)
	go func() { profiled <- s.cpuProfile(ctx, o.EventDuration, res.WatchCPUFile) }()
	cpu0, _ := measure.CPUTicks(s.gatewayPID)
	t0 := time.Now()
	ev, ds, err := deliverVia(ctx, mbcs, o, o.CacheWatches, []watchVia{
		{target: s.hubRoot, path: fleetPath(cacheOneSegment, path)},
		{target: s.hubRoot, path: fleetPath(cacheOneSegment, path+"&pretty=false")}, // not from the cache, as the live LIST
		{target: s.direct, path: path},
	})
	cpu1, _ := measure.CPUTicks(s.gatewayPID)
	hz, _ := measure.ClockTicks()
	res.WatchCPU = float64(cpu1-cpu0) / hz / time.Since(t0).Seconds()
	if perr := <-profiled; perr != nil {
		logf("cache: CPU profile: %v", perr)
		res.WatchCPUFile = ""
	} else {
		bin, _ := harness.GatewayBinary(s.env.BinDir)
		res.WatchCPUTop = measure.Pprof(ctx, bin, res.WatchCPUFile, "-top", "-nodecount=25")
	}
	if err != nil {
		return err
	}
	readsAfter, _ := s.cacheReads(ctx, "watch")
	res.WatchReads = map[string]float64{}
	addDelta(res.WatchReads, readsBefore, readsAfter)
	res.Events, res.Deliveries = ev, ds
	logf("cache: events %d published (%.0f/s); p99 cached %s, live %s, direct %s", ev.Published, ev.PublishRate,
		measure.Dur(measure.Pct(ds[0].Latencies, 99)), measure.Dur(measure.Pct(ds[1].Latencies, 99)), measure.Dur(measure.Pct(ds[2].Latencies, 99)))
	return nil
}

type upstreamClusters interface {
	List(ctx context.Context, opts metav1.ListOptions) (*gatewayv1alpha1.UpstreamClusterList, error)
}

type cachedResources interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*gatewayv1alpha1.CachedResource, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*gatewayv1alpha1.CachedResource, error)
}

// listPath is one of the LISTs: a path through a target, and the member
// process that answers it.
type listPath struct {
	target    *measure.Target
	path      string
	memberPID int
}

// timeList LISTs lp once: its time, and the CPU the gateway, the hub and
// the member spent meanwhile.
func (s *scene) timeList(ctx context.Context, lp *listPath) (listCost, error) {
	pids := []int{s.gatewayPID, s.hubPID, lp.memberPID}
	before := make([]int64, len(pids))
	for i, p := range pids {
		before[i], _ = measure.CPUTicks(p)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	_, err := lp.target.Do(lctx, lp.path)
	c := listCost{Took: time.Since(t0)}
	if err != nil {
		return c, err
	}
	hz, _ := measure.ClockTicks()
	secs := make([]float64, len(pids))
	for i, p := range pids {
		after, _ := measure.CPUTicks(p)
		secs[i] = float64(after-before[i]) / hz
	}
	c.Gateway, c.Hub, c.Member = secs[0], secs[1], secs[2]
	return c, nil
}

// getOK GETs path through t once; the body of a 200 answer, else an error
// with the status and the start of the body.
func getOK(ctx context.Context, t *measure.Target, path string) (io.ReadCloser, error) {
	req, err := t.NewRequest(ctx, path)
	if err != nil {
		return nil, err
	}
	resp, err := t.Client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s: %s", resp.Status, b)
	}
	return resp.Body, nil
}

// countItems LISTs path through t once and counts its items; bytes as
// received (uncompressed).
func countItems(ctx context.Context, t *measure.Target, path string) (items int, bytes int64, err error) {
	body, err := getOK(ctx, t, path)
	if err != nil {
		return 0, 0, err
	}
	defer body.Close()
	cr := &countingReader{r: body}
	var list struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.NewDecoder(cr).Decode(&list); err != nil {
		return 0, cr.n, err
	}
	_, _ = io.Copy(io.Discard, cr)
	return len(list.Items), cr.n, nil
}

// listJSON LISTs path through t once: its items and the bytes of their
// JSON.
func listJSON(ctx context.Context, t *measure.Target, path string) (items int, bytes int64, err error) {
	body, err := getOK(ctx, t, path)
	if err != nil {
		return 0, 0, err
	}
	defer body.Close()
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.NewDecoder(body).Decode(&list); err != nil {
		return 0, 0, err
	}
	for _, it := range list.Items {
		bytes += int64(len(it))
	}
	return len(list.Items), bytes, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	k, err := c.r.Read(b)
	c.n += int64(k)
	return k, err
}

// cacheReads sums the gateway's kube_gateway_fleet_cache_reads_total of
// verb by result, over every cluster.
func (s *scene) cacheReads(ctx context.Context, verb string) (map[string]float64, error) {
	m, err := s.gatewayRoot.Scrape(ctx, s.env.GatewayURL+"/metrics")
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, r := range []string{fleetcache.ServedFromCache, fleetcache.ServedForbidden, fleetcache.ServedLiveNotCached,
		fleetcache.ServedLiveQuery, fleetcache.ServedLiveBehind, fleetcache.ServedLiveAuthFailed} {
		out[r], _ = m.Sum("kube_gateway_fleet_cache_reads_total", map[string]string{"verb": verb, "result": r})
	}
	return out, nil
}

func addDelta(into, before, after map[string]float64) {
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			into[k] += d
		}
	}
}

// memberLists is member's count of LISTs of ConfigMaps (its
// apiserver_request_total), read with t's credential at base.
func memberLists(ctx context.Context, t *measure.Target, base string) (float64, error) {
	m, err := t.Scrape(ctx, base+"/metrics")
	if err != nil {
		return 0, err
	}
	v, _ := m.Sum("apiserver_request_total", map[string]string{"verb": "LIST", "resource": "configmaps"})
	return v, nil
}

// memberWatches is how many watches of ConfigMaps member serves now.
func memberWatches(ctx context.Context, t *measure.Target, base string) (float64, error) {
	m, err := t.Scrape(ctx, base+"/metrics")
	if err != nil {
		return 0, err
	}
	v, ok := m.Sum("apiserver_longrunning_requests", map[string]string{"verb": "WATCH", "resource": "configmaps"})
	if !ok {
		return 0, fmt.Errorf("member has no apiserver_longrunning_requests")
	}
	return v, nil
}

func metav1Ready(conds []metav1.Condition) bool {
	for _, c := range conds {
		if c.Type == gatewayv1alpha1.ConditionReady {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

func cacheObjectName(i int) string { return fmt.Sprintf("obj-%06d", i) }

// cacheObject is the i-th ConfigMap of the phase: about 1.1 KB of JSON, as
// member-b serves it.
func cacheObject(i int) *corev1.ConfigMap {
	v := strings.Repeat(fmt.Sprintf("%08d", i), cacheValueSize/8+1)[:cacheValueSize]
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: cacheObjectName(i), Labels: map[string]string{"app": "bench-cache", "shard": fmt.Sprint(i % 16), "tier": "bench"}},
		Data:       map[string]string{"value": v},
	}
}

// createConfigMaps creates namespace ns and n ConfigMaps in it, c at a time,
// spread over clients (a member's replicas).
func createConfigMaps(ctx context.Context, clients []kubernetes.Interface, ns string, n, c int) (took time.Duration, errs int, first string) {
	if _, err := clients[0].CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return 0, 1, err.Error()
	}
	var mu sync.Mutex
	start := time.Now()
	concurrently(ctx, n, c, func(i int) {
		_, err := clients[i%len(clients)].CoreV1().ConfigMaps(ns).Create(ctx, cacheObject(i), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			mu.Lock()
			errs++
			if first == "" {
				first = err.Error()
			}
			mu.Unlock()
		}
	})
	return time.Since(start), errs, first
}

// grantCacheReader makes the identity the caches read member-b with: a
// ServiceAccount that may get, list and watch ConfigMaps, its token in a hub
// Secret (returned).
func grantCacheReader(ctx context.Context, mbcs, hub kubernetes.Interface, mb *harness.Cluster) (string, error) {
	const ns = "default"
	if _, err := mbcs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: cacheIdentity}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	if _, err := mbcs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: cacheIdentity},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	if _, err := mbcs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: cacheIdentity},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cacheIdentity},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: cacheIdentity}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	expiry := int64(6 * 3600)
	tok, err := mbcs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, cacheIdentity, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: cacheIdentity},
		Data: map[string][]byte{"token": []byte(tok.Status.Token), "ca.crt": mb.CAData}}
	if _, err := hub.CoreV1().Secrets(harness.GatewayNamespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	return cacheIdentity, nil
}

// cacheCluster is the i-th UpstreamCluster of the phase: member-b's servers
// and Secret, the cache identity's Secret; the first also carries
// cacheOneLabel.
func cacheCluster(i int, mb *harness.Cluster, cacheSecret string) *gatewayv1alpha1.UpstreamCluster {
	labels := map[string]string{cacheLabel: "true"}
	if i == 0 {
		labels[cacheOneLabel] = "true"
	}
	uc := &gatewayv1alpha1.UpstreamCluster{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cache-%05d", i), Labels: labels}}
	for _, srv := range mb.Servers {
		uc.Spec.Servers = append(uc.Spec.Servers, gatewayv1alpha1.UpstreamServer{Endpoint: srv.URL})
	}
	uc.Spec.ClientConfig.SecretRef = gatewayv1alpha1.SecretReference{Namespace: harness.GatewayNamespace, Name: harness.MemberB}
	uc.Spec.ClientConfig.CacheSecretRef = &gatewayv1alpha1.SecretReference{Namespace: harness.GatewayNamespace, Name: cacheSecret}
	return uc
}

// cleanupCache removes what the phase created on the hub and member-b (the
// namespace on member-a goes as soon as the LISTs are done).
func cleanupCache(mbcs, hub kubernetes.Interface, gw versioned.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []string
	note := func(what string, err error) {
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, what+": "+err.Error())
		}
	}
	note("CachedResource", gw.GatewayV1alpha1().CachedResources().Delete(ctx, cacheResource, metav1.DeleteOptions{}))
	note("UpstreamClusters", gw.GatewayV1alpha1().UpstreamClusters().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: cacheSegment}))
	note("hub Secret", hub.CoreV1().Secrets(harness.GatewayNamespace).Delete(ctx, cacheIdentity, metav1.DeleteOptions{}))
	note("ClusterRoleBinding", mbcs.RbacV1().ClusterRoleBindings().Delete(ctx, cacheIdentity, metav1.DeleteOptions{}))
	note("ClusterRole", mbcs.RbacV1().ClusterRoles().Delete(ctx, cacheIdentity, metav1.DeleteOptions{}))
	note("ServiceAccount", mbcs.CoreV1().ServiceAccounts("default").Delete(ctx, cacheIdentity, metav1.DeleteOptions{}))
	note("namespace", mbcs.CoreV1().Namespaces().Delete(ctx, cacheNS, metav1.DeleteOptions{}))
	if len(errs) > 0 {
		logf("cache: cleaning up: %s", strings.Join(errs, "; "))
	}
}

// median is the median time of the rounds' LISTs of kind.
func (r *cacheResult) median(kind string) time.Duration {
	var ds []time.Duration
	for _, rd := range r.Rounds {
		ds = append(ds, rd[kind].Took)
	}
	return medianDur(ds)
}

// medianCPU is the median CPU seconds of the rounds' LISTs of kind, of the
// process pick chooses.
func (r *cacheResult) medianCPU(kind string, pick func(listCost) float64) float64 {
	var xs []float64
	for _, rd := range r.Rounds {
		xs = append(xs, pick(rd[kind]))
	}
	return measure.Median(xs)
}

// ratios are the per-round ratios of kind a's LIST time to kind b's, sorted.
func (r *cacheResult) ratios(a, b string) []float64 {
	var xs []float64
	for _, rd := range r.Rounds {
		if rd[b].Took > 0 {
			xs = append(xs, float64(rd[a].Took)/float64(rd[b].Took))
		}
	}
	slices.Sort(xs)
	return xs
}

// cacheOptions are the flags of the fleet cache phase.
type cacheOptions struct {
	CacheClusters int // UpstreamClusters (0: no fleet cache phase)
	CacheObjects  int // ConfigMaps on member-b, in every cache
	CacheRounds   int // rounds of the three LISTs
	CacheWatches  int // sample watches per path over one cluster's cache
}

func (c *cacheOptions) register(fs *flag.FlagSet) {
	fs.IntVar(&c.CacheClusters, "cache-clusters", 1000, "UpstreamClusters of the fleet cache phase, all member-b with one cache identity, selected by a CachedResource of ConfigMaps; as many times -cache-objects ConfigMaps are created on member-a for the direct LIST (0: no fleet cache phase)")
	fs.IntVar(&c.CacheObjects, "cache-objects", 100, "ConfigMaps of about 1.1 KB created on member-b for the fleet cache phase: each cluster's cache holds them and member-b's few others")
	fs.IntVar(&c.CacheRounds, "cache-rounds", 5, "rounds of the fleet cache phase's LISTs: direct on member-a, fan-out from the caches, fan-out live")
	fs.IntVar(&c.CacheWatches, "cache-watches", 10, "watches through one cluster's cache, as many over the same member live and as many directly on member-b, recording events at -event-rate for -event-duration (0: none)")
}

func (r *report) cacheSection(p func(string, ...any), c *cacheResult) {
	o := r.Opts
	n := c.Clusters
	p("## Fleet cache\n\n")
	if r.RestartedForCache {
		p("The gateway was restarted (same flags and data) after the earlier phases, so that this phase starts from a fresh process")
		if r.Clusters != nil {
			p("; the cluster phase's UpstreamClusters stay registered")
		}
		p(". ")
	}
	p("%d UpstreamClusters (`%s=true`), each member-b's server with member-b's credential and one cache identity for all (a ServiceAccount of member-b that may get, list and watch ConfigMaps; `spec.clientConfig.cacheSecretRef`), registered and Ready in %s. ",
		n, cacheLabel, c.ReadyTook.Round(100*time.Millisecond))
	p("member-b holds %d ConfigMaps of %d bytes of JSON in namespace `%s`; with its own (a `kube-root-ca.crt` per namespace and a few more) it holds %d ConfigMaps, %s of JSON as it lists them (%.0f B each on average): what each cluster's cache holds. ",
		c.Objects, c.ObjectJSON, cacheNS, c.MemberObjects, measure.KiB(float64(c.MemberJSONBytes)), float64(c.MemberJSONBytes)/float64(max(c.MemberObjects, 1)))
	p("A CachedResource of `configmaps` selects the %d clusters. Every cluster is the same member-b here: %d caches fill from one apiserver, and a live fan-out asks it %d times.\n\n", n, n, n)

	perObj := func(a, b float64) string {
		if c.CachedObjects == 0 {
			return "–"
		}
		return fmt.Sprintf("%.0f B", (b-a)/float64(c.CachedObjects))
	}
	b, a := c.Before, c.After
	p("| filling the caches | |\n|---|---:|\n")
	p("| CachedResource created → its status says %d of %d synced | **%s** |\n", c.Synced, c.Selected, c.SyncTook.Round(100*time.Millisecond))
	p("| CachedResource created → the last cache's `status.caches[].lastSyncTime` (1 s resolution) | %s |\n", c.LastSyncAfter.Round(time.Second))
	p("| objects in the caches (`status.caches[].objects`) | %d (%.1f per cluster) |\n", c.CachedObjects, float64(c.CachedObjects)/float64(n))
	p("| bytes counted (`status.caches[].bytes`, what `--fleet-cache-memory` bounds) | %s (%.0f B per object) |\n\n", mib(float64(c.CachedBytes)), float64(c.CachedBytes)/float64(max(c.CachedObjects, 1)))
	p("| gateway | before the CachedResource | caches synced | per cached object | per cluster |\n|---|---:|---:|---:|---:|\n")
	kib := func(x float64) string { return measure.KiB(x) }
	p("| live heap (after two GCs) | %s | %s | %s | %s |\n", mib(b.HeapAlloc), mib(a.HeapAlloc), perObj(b.HeapAlloc, a.HeapAlloc), per(b.HeapAlloc, a.HeapAlloc, n, kib))
	p("| Go heap in use | %s | %s | %s | %s |\n", mib(b.HeapInuse), mib(a.HeapInuse), perObj(b.HeapInuse, a.HeapInuse), per(b.HeapInuse, a.HeapInuse, n, kib))
	p("| RSS | %s | %s | %s | %s |\n", measure.MB(float64(b.RSSKB)), measure.MB(float64(a.RSSKB)), perObj(float64(b.RSSKB)*1024, float64(a.RSSKB)*1024), per(float64(b.RSSKB)*1024, float64(a.RSSKB)*1024, n, kib))
	p("| goroutines | %.0f | %.0f | | %s |\n", b.Goroutines, a.Goroutines, per(b.Goroutines, a.Goroutines, n, func(x float64) string { return fmt.Sprintf("%.2f", x) }))
	p("| TCP gateway → member-b | %s | %s | | %s |\n\n", ints(b.ToMemberB), ints(a.ToMemberB), per(float64(sum(b.ToMemberB)), float64(sum(a.ToMemberB)), n, func(x float64) string { return fmt.Sprintf("%.2f", x) }))
	if c.CachedObjects > 0 && c.MemberObjects > 0 {
		jsonPer := float64(c.MemberJSONBytes) / float64(c.MemberObjects)
		heapPer := (a.HeapAlloc - b.HeapAlloc) / float64(c.CachedObjects)
		countedPer := float64(c.CachedBytes) / float64(c.CachedObjects)
		p("Per cached object, all told: %.0f B of live heap against %.0f B of JSON (×%.2f); the counted bytes (%.0f B) are the objects alone, the rest (%s per cluster) is each cluster's cache machinery: its reflector, its connection to the member and their buffers.\n\n",
			heapPer, jsonPer, heapPer/jsonPer, countedPer, measure.KiB((a.HeapAlloc-b.HeapAlloc-float64(c.CachedBytes))/float64(n)))
	}
	if c.HeapFile != "" {
		base := ""
		if c.HeapBeforeFile != "" {
			base = " -base " + c.HeapBeforeFile
		}
		p("What the gateway's heap holds with the caches synced beyond what it held before, by allocation site (`go tool pprof -sample_index=inuse_space -top%s %s`):\n\n```\n%s```\n\n", base, c.HeapFile, measure.TrimPprof(c.HeapTop))
	}

	p("### LIST of every cached object\n\n")
	p("In each of %d rounds, in turn: **direct**, one LIST of `%s` on member-a (as many ConfigMaps of the same size as the caches hold in `%s`, created %d at a time in %s%s; `resourceVersion=0`, from its watch cache); **cached**, the fan-out LIST of `%s` over the %d clusters through the hub (`upstreamclusters/%s/proxy/...`, `resourceVersion=0`, strict), answered from the caches; **live**, the same with `pretty=false`, a parameter the cache does not apply (and which changes nothing in a JSON answer), so every member answers it with the caches in place. ",
		len(c.Rounds), cacheDirectNS, cacheDirectNS, 2*o.Burst, c.CreateTook.Round(time.Second), createErrs(c), cacheNS, n, cacheSegment)
	p("Each kind takes each place in the round in turn. Bodies as the Go client receives them (gzip on the wire, as client-go asks, uncompressed here). CPU: seconds of the process during the LIST, from /proc.\n\n")
	p("| LIST, median of %d | items | body | time | ÷ direct (per round: median, range) | gateway CPU | hub CPU | member CPU |\n|---|---:|---:|---:|---:|---:|---:|---:|\n", len(c.Rounds))
	for _, kind := range listKinds {
		ratio := "–"
		if kind != "direct" {
			xs := c.ratios(kind, "direct")
			if len(xs) > 0 {
				ratio = fmt.Sprintf("**×%.2f** (×%.2f–×%.2f)", measure.Median(xs), xs[0], xs[len(xs)-1])
			}
		}
		member := map[string]string{"direct": "member-a", "cached": "member-b", "live": "member-b"}[kind]
		p("| %s | %d | %s | %s | %s | %s | %s | %s (%s) |\n", kind, c.Items[kind], mib(float64(c.Bytes[kind])), measure.Dur(c.median(kind)), ratio,
			measure.Sec(c.medianCPU(kind, func(l listCost) float64 { return l.Gateway })), measure.Sec(c.medianCPU(kind, func(l listCost) float64 { return l.Hub })),
			measure.Sec(c.medianCPU(kind, func(l listCost) float64 { return l.Member })), member)
	}
	if xs := c.ratios("cached", "live"); len(xs) > 0 {
		p("\nCached ÷ live, per round: median ×%.2f (×%.2f–×%.2f). ", measure.Median(xs), xs[0], xs[len(xs)-1])
	}
	p("Rounds:\n\n| round | direct | cached | live |\n|---|---:|---:|---:|\n")
	for i, rd := range c.Rounds {
		p("| %d | %s | %s | %s |\n", i+1, measure.Dur(rd["direct"].Took), measure.Dur(rd["cached"].Took), measure.Dur(rd["live"].Took))
	}
	p("\n| members' parts, all told | %d cached LISTs | %d live LISTs | a consistent LIST (no resourceVersion) | the next consistent LIST |\n|---|---:|---:|---:|---:|\n", len(c.Rounds), len(c.Rounds))
	p("| member-b's LISTs of ConfigMaps (`apiserver_request_total`) | **%.0f** | | %.0f | %.0f |\n", c.MemberLists, c.ConsistentMemberLists[0], c.ConsistentMemberLists[1])
	p("| answered by the gateway (`kube_gateway_fleet_cache_reads_total`) | %s | %s | %s | %s |\n", fmtReads(c.CachedReads), fmtReads(c.LiveReads), fmtReads(c.ConsistentReads[0]), fmtReads(c.ConsistentReads[1]))
	p("| time | | | %s | %s |\n\n", measure.Dur(c.Consistent[0]), measure.Dur(c.Consistent[1]))
	p("A consistent read is served from a member's cache only when one LIST of one object (the cache identity's) says the cache holds the member's current resourceVersion, and not asked again while the cache has not reached what the member said last; member-b's Leases move its resourceVersion every few seconds, and its ConfigMaps do not, so its caches are usually behind ([fleet-cache.md](fleet-cache.md#consistency)).\n\n")
	if c.CPUTop != "" {
		p("The gateway's CPU over back-to-back cached LISTs (`%s`; `go tool pprof -top`):\n\n```\n%s```\n\n", c.CPUFile, measure.TrimPprof(c.CPUTop))
	}

	if e := c.Events; e != nil && len(c.Deliveries) == 3 {
		p("### Watch events through one cluster's cache\n\n")
		p("The CachedResource then selects one cluster (`%s`): with all %d cached, every update of member-b would be an event in each of the %d caches, all on this one machine. ", cacheOneSegment, n, n)
		oc := c.OneCache
		p("Once the other caches' watches on member-b ended and their clusters' status no longer listed them, the gateway held a live heap of %s (%s with every cache, %s before), RSS %s, %.0f goroutines (%.0f, %.0f), %s TCP connections to member-b (%s, %s). ",
			mib(oc.HeapAlloc), mib(a.HeapAlloc), mib(b.HeapAlloc), measure.MB(float64(oc.RSSKB)), oc.Goroutines, a.Goroutines, b.Goroutines, ints(oc.ToMemberB), ints(a.ToMemberB), ints(b.ToMemberB))
		p("%d watches through the hub over that cluster's cache (`upstreamclusters/%s/proxy/api/v1/namespaces/%s/configmaps?watch=1&resourceVersion=0&allowWatchBookmarks=true`, label `%s=event`), %d the same with `pretty=false` (live: the member answers through the gateway) and %d directly on member-b; the bench patches the %d ConfigMaps round-robin at %.0f/s for %s and matches each event to its update by resourceVersion (delay from the update's response to the event's receipt, as the watch phase measures it).\n\n",
			e.Samples, cacheOneSegment, watchNS, roleLabel, e.Samples, e.Samples, eventCMs, o.EventRate, o.EventDuration)
		d := c.Deliveries
		p("| | direct on member-b | through the hub, live | through the hub, from the cache | cache − direct |\n|---|---:|---:|---:|---:|\n")
		p("| events received / expected | %d / %d | %d / %d | %d / %d | |\n", d[2].Received, d[2].Expected, d[1].Received, d[1].Expected, d[0].Received, d[0].Expected)
		for _, q := range []float64{50, 99} {
			dp, lp, cp := measure.Pct(d[2].Latencies, q), measure.Pct(d[1].Latencies, q), measure.Pct(d[0].Latencies, q)
			bold := ""
			if q == 99 {
				bold = "**"
			}
			p("| p%.0f delay | %s | %s | %s | %s%s%s |\n", q, measure.Dur(dp), measure.Dur(lp), measure.Dur(cp), bold, measure.Dur(cp-dp), bold)
		}
		p("| max delay | %s | %s | %s | |\n", measure.Dur(measure.Pct(d[2].Latencies, 100)), measure.Dur(measure.Pct(d[1].Latencies, 100)), measure.Dur(measure.Pct(d[0].Latencies, 100)))
		p("| watches that ended early | %d | %d | %d | |\n\n", d[2].Early, d[1].Early, d[0].Early)
		p("The members' parts of these watches: %s. The gateway's CPU meanwhile: %.0f ms/s; the machine's load average as they opened: %s. Published: %d updates (%.0f/s achieved", fmtReads(c.WatchReads), 1e3*c.WatchCPU, c.WatchLoad, e.Published, e.PublishRate)
		if e.PublishErrors > 0 {
			p(", %d failed: %s", e.PublishErrors, e.FirstPublishErr)
		}
		p(")")
		if e.OpenErrors != "" {
			p("; watches that failed to open: %s", e.OpenErrors)
		}
		p(".\n\n")
	}
	if c.OneCacheHeapTop != "" {
		p("What the gateway's heap holds with one cache left beyond what it held before the CachedResource (`go tool pprof -sample_index=inuse_space -top -base %s %s`):\n\n```\n%s```\n\n", c.HeapBeforeFile, c.OneCacheHeapFile, measure.TrimPprof(c.OneCacheHeapTop))
	}
	if c.WatchCPUTop != "" {
		p("The gateway's CPU while the events pass (`%s`; `go tool pprof -top`):\n\n```\n%s```\n\n", c.WatchCPUFile, measure.TrimPprof(c.WatchCPUTop))
	}
	if c.Err != "" {
		p("Not measured: %s.\n\n", c.Err)
	}
}

func createErrs(c *cacheResult) string {
	if c.CreateErrors == 0 {
		return ""
	}
	return fmt.Sprintf(", %d failed: %s", c.CreateErrors, c.FirstErr)
}

// fmtReads prints the gateway's answers by result, largest first.
func fmtReads(m map[string]float64) string {
	type kv struct {
		k string
		v float64
	}
	var xs []kv
	for k, v := range m {
		if v != 0 {
			xs = append(xs, kv{k, v})
		}
	}
	if len(xs) == 0 {
		return "none"
	}
	slices.SortFunc(xs, func(a, b kv) int {
		if a.v != b.v {
			if a.v > b.v {
				return -1
			}
			return 1
		}
		return strings.Compare(a.k, b.k)
	})
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprintf("%s %.0f", x.k, x.v))
	}
	return strings.Join(s, ", ")
}
