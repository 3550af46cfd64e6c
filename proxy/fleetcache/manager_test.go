package fleetcache

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// fakeSource serves a list of n configmaps and a watch that stays open.
type fakeSource struct {
	cache.ListWatch
}

// The fake does not do watch lists: the Reflector lists, then watches.
func (fakeSource) IsWatchListSemanticsUnSupported() bool { return true }

func newFakeSource(n int, data string) *fakeSource {
	return &fakeSource{cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			l := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMapList"}}
			l.SetResourceVersion("10")
			for i := range n {
				l.Items = append(l.Items, *configMap("ns", fmt.Sprintf("cm-%d", i), "10", data))
			}
			return l, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return watch.NewFake(), nil
		},
	}}
}

// fakeAccess records what the manager opens and closes.
type fakeAccess struct {
	f       *fakeMembers
	secret  string               // the token it was opened with
	watches []*watch.FakeWatcher // under f.mu
}

func (a *fakeAccess) Source(gvr schema.GroupVersionResource) Source {
	s := newFakeSource(a.f.objects, a.f.data)
	s.WatchFuncWithContext = func(context.Context, metav1.ListOptions) (watch.Interface, error) {
		w := watch.NewFake()
		a.f.mu.Lock()
		a.watches = append(a.watches, w)
		a.f.mu.Unlock()
		return w, nil
	}
	return s
}

func (a *fakeAccess) Close() {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	a.f.closed++
	for _, w := range a.watches {
		if !w.IsStopped() {
			a.f.closedWatching++
		}
	}
}

type fakeMembers struct {
	objects int
	data    string

	mu     sync.Mutex
	opened []string // the token of each Access opened
	closed int
	// closedWatching counts watches still open when their Access closed.
	closedWatching int
	report         map[string][]gatewayv1alpha1.UpstreamClusterCacheStatus
	counts         map[string]int // reports per cluster
}

func (f *fakeMembers) connect(uc *gatewayv1alpha1.UpstreamCluster, secret, _ *corev1.Secret) (Access, error) {
	if secret == nil {
		return nil, fmt.Errorf("no secret")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opened = append(f.opened, string(secret.Data["token"]))
	return &fakeAccess{f: f, secret: string(secret.Data["token"])}, nil
}

func (f *fakeMembers) reported(cluster string) ([]gatewayv1alpha1.UpstreamClusterCacheStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.report[cluster]
	return r, ok
}

type managerTest struct {
	t                            *testing.T
	clusters, secrets, resources *fcache.FakeControllerSource
	members                      *fakeMembers
	memory                       *Memory
	manager                      *Manager
}

func newManagerTest(t *testing.T, limit int64) *managerTest {
	mt := &managerTest{t: t, clusters: fcache.NewFakeControllerSource(), secrets: fcache.NewFakeControllerSource(),
		resources: fcache.NewFakeControllerSource(), memory: NewMemory(limit),
		members: &fakeMembers{objects: 3, data: "v", report: map[string][]gatewayv1alpha1.UpstreamClusterCacheStatus{}, counts: map[string]int{}}}
	clusters := cache.NewSharedIndexInformer(mt.clusters, &gatewayv1alpha1.UpstreamCluster{}, 0, cache.Indexers{})
	secrets := cache.NewSharedIndexInformer(mt.secrets, &corev1.Secret{}, 0, cache.Indexers{})
	resources := cache.NewSharedIndexInformer(mt.resources, &gatewayv1alpha1.CachedResource{}, 0, cache.Indexers{})
	m, err := NewManager(Config{Clusters: clusters, Secrets: secrets, Resources: resources, Connect: mt.members.connect, Memory: mt.memory,
		Report: func(cluster string, caches []gatewayv1alpha1.UpstreamClusterCacheStatus) {
			mt.members.mu.Lock()
			mt.members.report[cluster] = caches
			mt.members.counts[cluster]++
			mt.members.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	mt.manager = m
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go clusters.RunWithContext(ctx)
	go secrets.RunWithContext(ctx)
	go m.Run(ctx)
	return mt
}

func cacheSecret(name, token string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "gw", Name: name, UID: types.UID(name)}, Data: map[string][]byte{"token": []byte(token)}}
}

func upstream(name string, labels map[string]string, secret string) *gatewayv1alpha1.UpstreamCluster {
	uc := &gatewayv1alpha1.UpstreamCluster{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), Labels: labels}}
	uc.Spec.Servers = []gatewayv1alpha1.UpstreamServer{{Endpoint: "https://" + name}}
	if secret != "" {
		uc.Spec.ClientConfig.CacheSecretRef = &gatewayv1alpha1.SecretReference{Namespace: "gw", Name: secret}
	}
	return uc
}

func cachedResource(name string, selector map[string]string) *gatewayv1alpha1.CachedResource {
	cr := &gatewayv1alpha1.CachedResource{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)},
		Spec: gatewayv1alpha1.CachedResourceSpec{Version: "v1", Resource: "configmaps"}}
	if selector != nil {
		cr.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: selector}
	}
	return cr
}

// until polls cond, failing the test with what it last said.
func (mt *managerTest) until(what string, cond func() error) {
	mt.t.Helper()
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		last = cond()
		return last == nil, nil
	}); err != nil {
		mt.t.Fatalf("%s: %v", what, last)
	}
}

// entry waits for cluster's report to hold one entry satisfying ok.
func (mt *managerTest) entry(cluster, what string, ok func(gatewayv1alpha1.UpstreamClusterCacheStatus) bool) {
	mt.t.Helper()
	mt.until(what, func() error {
		r, _ := mt.members.reported(cluster)
		if len(r) != 1 || !ok(r[0]) {
			return fmt.Errorf("report of %s: %+v", cluster, r)
		}
		return nil
	})
}

func TestManagerStartsRestartsAndStopsCaches(t *testing.T) {
	mt := newManagerTest(t, 0)
	mt.secrets.Add(cacheSecret("s", "one"))
	mt.clusters.Add(upstream("a", map[string]string{"cache": "yes"}, "s"))
	mt.clusters.Add(upstream("bare", map[string]string{"cache": "yes"}, ""))
	mt.clusters.Add(upstream("other", nil, "s"))
	mt.resources.Add(cachedResource("cms", map[string]string{"cache": "yes"}))

	mt.entry("a", "the selected cluster's cache syncs", func(e gatewayv1alpha1.UpstreamClusterCacheStatus) bool {
		return e.Synced && e.Objects == 3 && e.ResourceVersion == "10" && e.CachedResource == "cms" && e.Resource == "configmaps" && e.LastSyncTime != nil
	})
	mt.entry("bare", "a cluster without cacheSecretRef says so", func(e gatewayv1alpha1.UpstreamClusterCacheStatus) bool {
		return !e.Synced && e.Reason == ReasonNoCacheIdentity
	})
	if r, _ := mt.members.reported("other"); len(r) != 0 {
		t.Fatalf("a cluster not selected has entries: %+v", r)
	}
	used := mt.memory.Used()
	if used == 0 {
		t.Fatal("no memory counted for the synced cache")
	}

	// A status write (the cluster's own, coming back as an update) changes
	// nothing: no report, or the counts would be written on every write.
	// "a" was reported twice so far, by the sync that started its cache and
	// by the cache when it synced; the second may land after the report the
	// wait above saw (both read the cache's state when they run).
	mt.until("both reports of the started cache are in", func() error {
		mt.members.mu.Lock()
		defer mt.members.mu.Unlock()
		if n := mt.members.counts["a"]; n != 2 {
			return fmt.Errorf("%d reports of a", n)
		}
		return nil
	})
	// One worker syncs in order: once "other" is reported, "a" was synced.
	mt.members.mu.Lock()
	reportsOfA, reportsOfOther := mt.members.counts["a"], mt.members.counts["other"]
	mt.members.mu.Unlock()
	withStatus := upstream("a", map[string]string{"cache": "yes"}, "s")
	withStatus.Status.ObservedGeneration = 1
	mt.clusters.Modify(withStatus)
	mt.clusters.Modify(upstream("other", nil, "s"))
	mt.until("the unselected cluster is reported after the status write", func() error {
		mt.members.mu.Lock()
		defer mt.members.mu.Unlock()
		if mt.members.counts["other"] == reportsOfOther {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	mt.members.mu.Lock()
	if n := mt.members.counts["a"]; n != reportsOfA {
		t.Fatalf("a status write made %d reports", n-reportsOfA)
	}
	mt.members.mu.Unlock()

	// A new credential restarts the cache with it.
	mt.secrets.Modify(cacheSecret("s", "two"))
	mt.until("the cache reconnects with the new credential", func() error {
		mt.members.mu.Lock()
		defer mt.members.mu.Unlock()
		if n := len(mt.members.opened); n != 2 || mt.members.opened[1] != "two" || mt.members.closed != 1 {
			return fmt.Errorf("opened %v, closed %d", mt.members.opened, mt.members.closed)
		}
		// Its connections close once its watches ended, not before.
		if mt.members.closedWatching != 0 {
			return fmt.Errorf("%d watches still open when their Access closed", mt.members.closedWatching)
		}
		return nil
	})
	mt.entry("a", "the restarted cache syncs", func(e gatewayv1alpha1.UpstreamClusterCacheStatus) bool { return e.Synced && e.Objects == 3 })
	mt.until("the replaced cache's memory is freed", func() error {
		if mt.memory.Used() != used {
			return fmt.Errorf("memory %d, want %d", mt.memory.Used(), used)
		}
		return nil
	})

	// Unselected: the cache stops and frees its memory.
	mt.clusters.Modify(upstream("a", nil, "s"))
	mt.until("the unselected cluster's cache stops", func() error {
		r, ok := mt.members.reported("a")
		if !ok || len(r) != 0 || mt.memory.Used() != 0 {
			return fmt.Errorf("report %+v, memory %d", r, mt.memory.Used())
		}
		return nil
	})

	// Selected again, then the CachedResource deleted.
	mt.clusters.Modify(upstream("a", map[string]string{"cache": "yes"}, "s"))
	mt.entry("a", "selected again", func(e gatewayv1alpha1.UpstreamClusterCacheStatus) bool { return e.Synced })
	mt.resources.Delete(cachedResource("cms", map[string]string{"cache": "yes"}))
	mt.until("the deleted CachedResource's entries go", func() error {
		for _, c := range []string{"a", "bare"} {
			if r, _ := mt.members.reported(c); len(r) != 0 {
				return fmt.Errorf("%s: %+v", c, r)
			}
		}
		if mt.memory.Used() != 0 {
			return fmt.Errorf("memory %d", mt.memory.Used())
		}
		return nil
	})

	// A deleted cluster's caches stop.
	mt.resources.Add(cachedResource("all", nil))
	mt.entry("other", "an empty selector selects every cluster", func(e gatewayv1alpha1.UpstreamClusterCacheStatus) bool { return e.Synced })
	mt.clusters.Delete(upstream("other", nil, "s"))
	mt.until("the deleted cluster's cache stops", func() error {
		mt.manager.mu.Lock()
		defer mt.manager.mu.Unlock()
		if mt.manager.members["other"] != nil {
			return fmt.Errorf("still cached")
		}
		return nil
	})
}

// A cache that would pass --fleet-cache-memory stops with MemoryLimit and
// frees what it held; one that fits keeps syncing. The stopped one starts
// again once what it needed is free.
func TestManagerMemoryLimit(t *testing.T) {
	one := sizeOf(t, configMap("ns", "cm-0", "10", "v"))
	mt := newManagerTest(t, 4*one) // room for one member's 3 objects, not two members'
	mt.secrets.Add(cacheSecret("s", "one"))
	mt.resources.Add(cachedResource("cms", nil))
	mt.clusters.Add(upstream("a", nil, "s"))
	mt.entry("a", "the first cache fits", func(e gatewayv1alpha1.UpstreamClusterCacheStatus) bool { return e.Synced && e.Objects == 3 })
	mt.clusters.Add(upstream("b", nil, "s"))
	mt.entry("b", "the second cache passes the bound", func(e gatewayv1alpha1.UpstreamClusterCacheStatus) bool {
		return !e.Synced && e.Reason == ReasonMemoryLimit && e.Objects == 0 && e.Bytes == 0
	})
	if got := mt.memory.Used(); got != 3*one {
		t.Fatalf("memory used %d, want the first cache's %d", got, 3*one)
	}
	mt.entry("a", "the first cache stays synced", func(e gatewayv1alpha1.UpstreamClusterCacheStatus) bool { return e.Synced && e.Objects == 3 })

	// Nothing freed: the stopped cache stays stopped.
	mt.manager.retryOverLimit()
	mt.entry("b", "the second cache stays stopped", func(e gatewayv1alpha1.UpstreamClusterCacheStatus) bool { return e.Reason == ReasonMemoryLimit })
	// The first member goes away: the second cache fits, and starts again.
	mt.clusters.Delete(upstream("a", nil, "s"))
	mt.until("the first cache freed its memory", func() error {
		if used := mt.memory.Used(); used != 0 {
			return fmt.Errorf("%d bytes used", used)
		}
		return nil
	})
	mt.manager.retryOverLimit()
	mt.entry("b", "the second cache syncs once memory is free", func(e gatewayv1alpha1.UpstreamClusterCacheStatus) bool { return e.Synced && e.Objects == 3 })
}
