package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/chart"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// Two gateway replicas behind a load balancer are restarted one after the
// other, each stopped as the chart's Deployment stops a pod, and no request
// fails.
//
// HAProxy in TCP mode stands in for the chart's Service: TLS passes through to
// the replicas, each new connection goes to a replica whose readiness probe
// (the chart's) passes, open connections stay where they are; the hub's
// APIService points at it. While that goes on:
//   - client-go GETs a namespace of member-a through the hub, steadily;
//   - informers watch ConfigMaps of member-a through the hub while a writer
//     changes one on the member;
//   - clients that open a connection per request, as many independent
//     clients behind the load balancer do, spend a token bucket of the
//     UpstreamCluster (the hub itself keeps one HTTP/2 connection, which
//     lands on one replica: see docs/operations.md).
//
// Each replica in turn gets SIGTERM with the chart's shutdown flags, leaves
// HAProxy, exits within the chart's terminationGracePeriodSeconds, starts
// again and rejoins HAProxy. Then: no GET failed; every watch that ended
// ended cleanly and the informers re-listed at most once each; the informers
// saw the writer's last change; and in every window the replicas together
// admitted the bucket's rate within 10 %.
func TestRollingRestart(t *testing.T) {
	const (
		qps, burst = 20, 4
		window     = 5 * time.Second
		group      = "roll-e2e-status"
		watchNS    = "roll-watch"
		limitedNS  = "roll-limited"
		informers  = 4
	)
	ctx := testContext(t, 4*time.Minute)
	pod := chartPodShutdown(ctx, t)
	t.Logf("the chart's pod: shutdown flags %v, terminationGracePeriodSeconds %s, readiness %s", pod.args, pod.grace, pod.readyPath)
	grantReplicaLeases(ctx, t)

	uc := memberACluster("roll")
	uc.Spec.FlowControl = &gatewayv1alpha1.FlowControl{FlowControlSchemas: []gatewayv1alpha1.FlowControlSchema{
		{Name: "bucket", TokenBucket: &gatewayv1alpha1.TokenBucketFlowControl{QPS: *resource.NewQuantity(qps, resource.DecimalSI), Burst: burst}},
	}}
	// Only the bucket's own traffic spends it: the GETs and watches must not
	// be refused.
	uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{
		Rules:                 []gatewayv1alpha1.DispatchPolicyRule{{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, Namespaces: []string{limitedNS}}},
		FlowControlSchemaName: "bucket",
	}}
	createCluster(t, uc)
	member, err := kubernetes.NewForConfig(env.Members[harness.MemberA].Config(harness.UserAdmin, 0))
	if err != nil {
		t.Fatal(err)
	}
	createMemberNamespace(ctx, t, member, watchNS)

	// The replicas and the load balancer.
	names := []string{"roll-0", "roll-1"}
	procs := make([]*harness.Process, len(names))
	gws := make([]extraGatewayClient, len(names))
	backends := map[string]string{}
	for i, name := range names {
		args := append([]string{"--status-lease-name=" + group}, pod.args...)
		p, url, err := env.StartExtraGateway(ctx, "kube-gateway-"+name, args...)
		t.Cleanup(func() { _ = p.Stop() })
		if err != nil {
			t.Fatal(err)
		}
		procs[i], backends[name] = p, url
		gws[i] = extraGatewayClient{t: t, url: url, prefix: harness.ProxyPath(uc.Name), c: gatewayClient(t, true)}
	}
	lb, err := env.StartLoadBalancer(ctx, "haproxy-roll", harness.LoadBalancerConfig{Backends: backends, ReadyPath: pod.readyPath})
	t.Cleanup(func() { _ = lb.Process.Stop() })
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if err := lb.WaitServer(ctx, name, true, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	restore, err := env.RouteAPIServiceTo(ctx, lb.Port)
	t.Cleanup(func() {
		if restore != nil {
			if err := restore(context.Background()); err != nil {
				t.Errorf("pointing the APIService back at the suite's gateway: %v", err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	waitReplicaCount(t, 30*time.Second, 2, gws...)
	waitUsable(t, uc.Name)

	// The traffic.
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	informCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	var load, inform sync.WaitGroup
	gets := &outcomes{}
	load.Go(func() { hubGets(loadCtx, t, uc.Name, gets) })
	watches := &watchStats{}
	stores := make([]cache.Store, informers)
	through, err := kubernetes.NewForConfig(env.ProxyConfig(harness.UserAdmin, uc.Name))
	if err != nil {
		t.Fatal(err)
	}
	for i := range stores {
		inf := cache.NewSharedIndexInformer(watches.listWatch(through, watchNS), &corev1.ConfigMap{}, 0, cache.Indexers{})
		if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) { watches.handlerError(err) }); err != nil {
			t.Fatal(err)
		}
		stores[i] = inf.GetStore()
		inform.Go(func() { inf.RunWithContext(informCtx) })
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatal("an informer through the hub did not sync")
		}
	}
	var lastWrite atomic.Int64
	load.Go(func() { writeTicks(loadCtx, t, member, watchNS, &lastWrite) })
	bucket := &outcomes{}
	start := time.Now()
	limited := lb.URL + harness.ProxyPath(uc.Name) + "/api/v1/namespaces/" + limitedNS + "/configmaps"
	load.Go(func() { spendBucket(loadCtx, t, limited, 2*qps, bucket) })

	// A first window with both replicas, then the roll.
	marks := []string{}
	mark := func(what string) {
		marks = append(marks, fmt.Sprintf("%5.1fs %s", time.Since(start).Seconds(), what))
	}
	waitFor(ctx, t, window+window/2)
	for i, name := range names {
		mark("SIGTERM " + name)
		if err := procs[i].Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := lb.WaitServer(ctx, name, false, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		mark(name + " out of HAProxy")
		eventually(t, pod.grace, func(context.Context) error {
			if procs[i].Running() {
				return errorf("%s still runs: the kubelet would kill it after terminationGracePeriodSeconds (%s)", name, pod.grace)
			}
			return nil
		})
		mark(name + " exited")
		if err := procs[i].Restart(ctx); err != nil {
			t.Fatal(err)
		}
		mark(name + " ready again")
		if err := lb.WaitServer(ctx, name, true, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		mark(name + " back in HAProxy")
		waitReplicaCount(t, 30*time.Second, 2, gws...)
		mark("both count 2 replicas")
	}
	waitFor(ctx, t, window)
	stopLoad()
	end := time.Now()
	load.Wait()
	for _, m := range marks {
		t.Log(m)
	}

	// The informers saw the last write, and then stop.
	want := strconv.FormatInt(lastWrite.Load(), 10)
	eventually(t, 30*time.Second, func(context.Context) error {
		for i, s := range stores {
			obj, ok, _ := s.GetByKey(watchNS + "/tick")
			if !ok || obj.(*corev1.ConfigMap).Data["n"] != want {
				return errorf("informer %d has not seen the last write (n=%s): %v", i, want, obj)
			}
		}
		return nil
	})
	stopInformers()
	inform.Wait()

	// No GET failed.
	t.Logf("GETs through the hub: %d answered, %d failed", gets.ok.Load(), len(gets.failed))
	if len(gets.failed) > 0 {
		t.Errorf("%d GETs through the hub failed during the roll; the first: %s", len(gets.failed), gets.failed[0])
	}
	// The watches ended cleanly and resumed.
	w := watches.snapshot()
	t.Logf("watches through the hub: %d opened, %d ended cleanly, %d ended with an error, %d lasted under a second without an event; %d lists by %d informers; errors: %v",
		w.watches, w.clean, w.errored, w.short, w.lists, informers, w.errs)
	if w.errored > 0 || w.short > 0 || len(w.errs) > 0 {
		t.Errorf("watches did not all end cleanly: %d with an error, %d too short, reflector errors %v", w.errored, w.short, w.errs)
	}
	if relists := w.lists - informers; relists > informers {
		t.Errorf("the informers re-listed %d times, more than once each (%d)", relists, informers)
	}
	if w.clean == 0 {
		t.Errorf("no watch ended while the replicas stopped: the watches did not go through them")
	}
	// The bucket held across replicas in every whole window after the first.
	if len(bucket.failed) > 0 {
		t.Errorf("%d requests through the load balancer got neither 200 nor 429; the first: %s", len(bucket.failed), bucket.failed[0])
	}
	counts := bucket.perWindow(start, end, window)
	expected := float64(qps) * window.Seconds()
	t.Logf("admitted per %s window (want %.0f ± 10%%): %v; per second: %v", window, expected, counts, bucket.perWindow(start, end, time.Second))
	for k, n := range counts {
		if k == 0 {
			continue // the buckets start full
		}
		if d := float64(n) - expected; d > expected/10 || d < -expected/10 {
			t.Errorf("window %d (%s-%s): the replicas admitted %d requests of a %d qps bucket, want %.0f ± 10%%",
				k, time.Duration(k)*window, time.Duration(k+1)*window, n, qps, expected)
		}
	}
}

// podShutdown is how the chart's Deployment stops a gateway pod.
type podShutdown struct {
	args      []string // the gateway's --shutdown-* flags
	grace     time.Duration
	readyPath string
}

// chartPodShutdown renders the gateway chart with its defaults and reads how
// its pods stop and when they are ready.
func chartPodShutdown(ctx context.Context, t *testing.T) podShutdown {
	t.Helper()
	m := helm().Render(ctx, t, "kube-gateway", "kube-gateway")
	var dep *appsv1.Deployment
	for _, d := range m.All("Deployment") {
		if d.GetLabels()["app.kubernetes.io/component"] == "gateway" {
			dep = chart.Convert[appsv1.Deployment](t, d)
		}
	}
	if dep == nil {
		t.Fatal("the chart renders no gateway Deployment")
	}
	spec := dep.Spec.Template.Spec
	c := spec.Containers[0]
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		t.Fatalf("the chart has a preStop hook (%+v): emulate it here before SIGTERM", c.Lifecycle.PreStop)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil {
		t.Fatal("the chart's gateway has no HTTP readiness probe")
	}
	s := podShutdown{readyPath: c.ReadinessProbe.HTTPGet.Path, grace: 30 * time.Second}
	if g := spec.TerminationGracePeriodSeconds; g != nil {
		s.grace = time.Duration(*g) * time.Second
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--shutdown-") {
			s.args = append(s.args, a)
		}
	}
	return s
}

func createMemberNamespace(ctx context.Context, t *testing.T, member kubernetes.Interface, name string) {
	t.Helper()
	_, err := member.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = member.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// waitReplicaCount waits until every gateway counts want live replicas.
func waitReplicaCount(t *testing.T, within time.Duration, want float64, gws ...extraGatewayClient) {
	t.Helper()
	eventually(t, within, func(ctx context.Context) error {
		for i, g := range gws {
			if v, _ := g.metric(ctx, "kube_gateway_replicas", nil); v != want {
				return errorf("replica %d counts %v replicas, want %v", i, v, want)
			}
		}
		return nil
	})
}

// waitFor lets traffic run for d (the test measures over it; nothing is
// awaited).
func waitFor(ctx context.Context, t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	case <-time.After(d):
	}
}

// outcomes collects the answers of a stream of requests.
type outcomes struct {
	ok       atomic.Int64
	mu       sync.Mutex
	admitted []time.Time
	failed   []string
}

func (o *outcomes) fail(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failed = append(o.failed, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
}

func (o *outcomes) admit(at time.Time) {
	o.ok.Add(1)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.admitted = append(o.admitted, at)
}

// perWindow counts the admitted requests in each whole window from start
// to end.
func (o *outcomes) perWindow(start, end time.Time, window time.Duration) []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	counts := make([]int, int(end.Sub(start)/window))
	for _, at := range o.admitted {
		if k := int(at.Sub(start) / window); k >= 0 && k < len(counts) {
			counts[k]++
		}
	}
	return counts
}

// hubGets GETs the namespace default of cluster through the hub from two
// clients, each every 50 ms, until ctx ends.
func hubGets(ctx context.Context, t *testing.T, cluster string, o *outcomes) {
	c, err := kubernetes.NewForConfig(env.ProxyConfig(harness.UserAdmin, cluster))
	if err != nil {
		o.fail("%v", err)
		return
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				_, err := c.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
				switch {
				case err == nil:
					o.ok.Add(1)
				case ctx.Err() == nil:
					o.fail("GET namespace default: %v", err)
				}
			}
		})
	}
	wg.Wait()
}

// spendBucket offers GETs of url (a list of the bucket's ConfigMaps) at
// offered requests a second until ctx ends, each on a connection of its own
// through the load balancer, as the hub's front proxy (its client
// certificate). 200 counts as admitted, 429 as refused, anything else fails.
func spendBucket(ctx context.Context, t *testing.T, url string, offered int, o *outcomes) {
	tr := gatewayClient(t, true).Transport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	tick := time.NewTicker(time.Second / time.Duration(offered))
	defer tick.Stop()
	inflight := make(chan struct{}, 2*offered) // bounds the goroutines of a slow gateway
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case inflight <- struct{}{}:
		default:
			continue
		}
		wg.Go(func() {
			defer func() { <-inflight }()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				o.fail("%v", err)
				return
			}
			req.Header = harness.AdminFrontProxyHeader()
			resp, err := c.Do(req)
			if err != nil {
				if ctx.Err() == nil {
					o.fail("%v", err)
				}
				return
			}
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				o.admit(time.Now())
			case http.StatusTooManyRequests:
			default:
				o.fail("%s", resp.Status)
			}
		})
	}
}

// writeTicks updates the ConfigMap tick of ns on the member every 100 ms,
// with data n counting up, until ctx ends; last is the last n written.
func writeTicks(ctx context.Context, t *testing.T, member kubernetes.Interface, ns string, last *atomic.Int64) {
	cms := member.CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "tick"}, Data: map[string]string{"n": "0"}}, metav1.CreateOptions{})
	if err != nil {
		t.Errorf("create the ConfigMap the informers watch: %v", err)
		return
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for n := int64(1); ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cm.Data["n"] = strconv.FormatInt(n, 10)
		updated, err := cms.Update(context.WithoutCancel(ctx), cm, metav1.UpdateOptions{})
		if err != nil {
			t.Errorf("update the ConfigMap the informers watch: %v", err)
			return
		}
		cm = updated
		last.Store(n)
	}
}

// watchStats counts what informers ask through a ListWatch and how their
// watches end.
type watchStats struct {
	mu                             sync.Mutex
	lists, watches                 int
	clean, errored, short, stopped int
	errs                           []string
}

func (s *watchStats) count(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

func (s *watchStats) handlerError(err error) {
	s.count(func() { s.errs = append(s.errs, time.Now().Format("15:04:05.000 ")+err.Error()) })
}

func (s *watchStats) snapshot() watchStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return watchStats{lists: s.lists, watches: s.watches, clean: s.clean, errored: s.errored, short: s.short, stopped: s.stopped, errs: slices.Clone(s.errs)}
}

// listWatch lists and watches the ConfigMaps of ns with c; a watch that
// sends the initial events (a watch-list) counts as a list.
func (s *watchStats) listWatch(c kubernetes.Interface, ns string) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			s.count(func() { s.lists++ })
			return c.CoreV1().ConfigMaps(ns).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			s.count(func() {
				if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
					s.lists++
				} else {
					s.watches++
				}
			})
			w, err := c.CoreV1().ConfigMaps(ns).Watch(ctx, opts)
			if err != nil {
				if ctx.Err() == nil {
					s.handlerError(fmt.Errorf("watch: %w", err))
				}
				return nil, err
			}
			return s.observe(ctx, w), nil
		},
	}
}

// observe passes w's events on and, when w ends by itself before ctx (the
// reflector's) does, counts how: with an error event, without any event
// within a second (what a reflector calls a very short watch), or cleanly.
func (s *watchStats) observe(ctx context.Context, w watch.Interface) watch.Interface {
	out := make(chan watch.Event)
	stop := make(chan struct{})
	var once sync.Once
	ow := &observedWatch{Interface: w, out: out, stop: func() { once.Do(func() { close(stop) }); w.Stop() }}
	go func() {
		defer close(out)
		start, events, failed := time.Now(), 0, false
		for {
			select {
			case <-stop:
				s.count(func() { s.stopped++ })
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					s.count(func() {
						switch {
						case ctx.Err() != nil:
							s.stopped++
						case failed:
							s.errored++
						case events == 0 && time.Since(start) < time.Second:
							s.short++
						default:
							s.clean++
						}
					})
					return
				}
				if ev.Type == watch.Error && ctx.Err() == nil {
					failed = true
					s.handlerError(fmt.Errorf("watch error event: %v", apierrors.FromObject(ev.Object)))
				}
				events++
				select {
				case out <- ev:
				case <-stop:
					s.count(func() { s.stopped++ })
					return
				}
			}
		}
	}()
	return ow
}

type observedWatch struct {
	watch.Interface
	out  chan watch.Event
	stop func()
}

func (w *observedWatch) ResultChan() <-chan watch.Event { return w.out }
func (w *observedWatch) Stop()                          { w.stop() }
