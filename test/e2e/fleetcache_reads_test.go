package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// listWatchOnly is a ListerWatcher an informer lists and then watches with,
// as informers do without watch lists.
type listWatchOnly struct{ *cache.ListWatch }

func (listWatchOnly) IsWatchListSemanticsUnSupported() bool { return true }

// cacheReads is the gateway's count of cluster's fan-out reads (verb list or
// watch) answered with result (cache, forbidden, or why the member answered).
func cacheReads(t *testing.T, cluster, verb, result string) float64 {
	t.Helper()
	v, _ := gatewayMetric(t, "kube_gateway_fleet_cache_reads_total", map[string]string{"cluster": cluster, "verb": verb, "result": result})
	return v
}

// fanOutItems returns "cluster/namespace/name@resourceVersion" of each item
// of a fan-out ConfigMap list, sorted.
func fanOutItems(t *testing.T, body []byte) []string {
	t.Helper()
	var list corev1.ConfigMapList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("not a ConfigMapList: %v: %s", err, body)
	}
	var out []string
	for _, cm := range list.Items {
		out = append(out, fmt.Sprintf("%s/%s/%s@%s", cm.Annotations["gateway.kubewharf.io/cluster"], cm.Namespace, cm.Name, cm.ResourceVersion))
	}
	slices.Sort(out)
	return out
}

// memberItems is fanOutItems of the members' own lists of namespace ns:
// what a fan-out list over clusters (name to member client) must hold.
func memberItems(ctx context.Context, clients map[string]kubernetes.Interface, ns string) ([]string, error) {
	var out []string
	for cluster, c := range clients {
		l, err := c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, cm := range l.Items {
			out = append(out, fmt.Sprintf("%s/%s/%s@%s", cluster, cm.Namespace, cm.Name, cm.ResourceVersion))
		}
	}
	slices.Sort(out)
	return out, nil
}

// Fan-out reads of a cached resource come from the caches, with each
// member's RBAC for the user: an informer lists and watches from them and
// follows the members' changes; lists (pages, selectors) hold what the
// members hold; alice sees member-a's namespace alice and nothing of
// member-b, with the warning a live 403 gives; a RoleBinding granted on
// member-b lets her read it, and its removal takes that away within the
// gateway's --member-access-review-ttl.
func TestFleetCacheReads(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	suffix := utilrand.String(5)
	ns := "fleet-reads-" + suffix
	label := "fleet-reads-e2e-" + suffix
	segment := label + "=yes"
	// Clusters of their own (the other tests' "*" stays as it was): reads-a
	// is member-a, reads-b member-b, each with a cache identity.
	members := map[string]kubernetes.Interface{}
	memberOf := map[string]string{"reads-a-" + suffix: harness.MemberA, "reads-b-" + suffix: harness.MemberB}
	clusterA, clusterB := "reads-a-"+suffix, "reads-b-"+suffix
	for cluster, m := range memberOf {
		c := kubernetes.NewForConfigOrDie(env.Members[m].AdminConfig)
		members[cluster] = c
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
		for _, app := range []string{"web", "db"} {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: m + "-" + app, Labels: map[string]string{"app": app}}, Data: map[string]string{"v": "1"}}
			if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		var servers []string
		for _, s := range env.Members[m].Servers {
			servers = append(servers, s.URL)
		}
		uc := newCluster(cluster, servers...)
		uc.Labels = map[string]string{label: "yes"}
		uc.Spec.ClientConfig.SecretRef.Name = m
		uc.Spec.ClientConfig.CacheSecretRef = &gatewayv1alpha1.SecretReference{Namespace: harness.GatewayNamespace,
			Name: grantCacheIdentity(ctx, t, env.Members[m], "fleet-reads-"+m+"-"+suffix)}
		createCluster(t, uc)
	}
	// alice may edit namespace alice on member-a, nothing on member-b.
	aliceCM := "fleet-reads-" + suffix
	if _, err := members[clusterA].CoreV1().ConfigMaps(harness.AliceNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: aliceCM}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = members[clusterA].CoreV1().ConfigMaps(harness.AliceNamespace).Delete(context.Background(), aliceCM, metav1.DeleteOptions{})
	})
	cr := newCachedResource("fleet-reads-"+suffix, "", "v1", "configmaps")
	cr.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{label: "yes"}}
	createCachedResource(t, cr)
	eventually(t, time.Minute, func(ctx context.Context) error {
		for cluster := range memberOf {
			e, err := cacheEntry(ctx, t, cluster, cr.Name)
			if err != nil {
				return err
			}
			if !e.Synced {
				return errorf("%s not synced: %+v", cluster, e)
			}
		}
		return nil
	})
	configMaps := fanOutPath(segment) + "/api/v1/namespaces/" + ns + "/configmaps"

	t.Run("lists hold what the members hold", func(t *testing.T) {
		before := cacheReads(t, clusterA, "list", "cache")
		// The caches follow the members: wait for them to hold every change.
		eventually(t, 30*time.Second, func(ctx context.Context) error {
			want, err := memberItems(ctx, members, ns)
			if err != nil {
				return err
			}
			body, code, warnings := fanOutGet(ctx, t, harness.UserAdmin, configMaps, map[string]string{"resourceVersion": "0"})
			if code != http.StatusOK || len(warnings) > 0 {
				return errorf("%d %q: %s", code, warnings, body)
			}
			if got := fanOutItems(t, body); !slices.Equal(got, want) {
				return errorf("cached list %v, members hold %v", got, want)
			}
			return nil
		})
		if after := cacheReads(t, clusterA, "list", "cache"); after <= before {
			t.Fatalf("%s's cache answered %v lists before and %v after", clusterA, before, after)
		}

		// Pages of one item, and a label selector, from the caches.
		var paged []string
		params := map[string]string{"resourceVersion": "0", "limit": "1"}
		for range 10 {
			body, code, _ := fanOutGet(ctx, t, harness.UserAdmin, configMaps, params)
			if code != http.StatusOK {
				t.Fatalf("page: %d %s", code, body)
			}
			paged = append(paged, fanOutItems(t, body)...)
			var l metav1.List
			_ = json.Unmarshal(body, &l)
			if l.Continue == "" {
				break
			}
			params = map[string]string{"limit": "1", "continue": l.Continue}
		}
		slices.Sort(paged)
		want, err := memberItems(ctx, members, ns)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(paged, want) {
			t.Errorf("pages of one item %v, members hold %v", paged, want)
		}
		body, code, _ := fanOutGet(ctx, t, harness.UserAdmin, configMaps, map[string]string{"resourceVersion": "0", "labelSelector": "app=web"})
		var web []string
		for _, it := range want {
			if strings.Contains(it, "-web@") {
				web = append(web, it)
			}
		}
		if got := fanOutItems(t, body); code != http.StatusOK || !slices.Equal(got, web) {
			t.Errorf("app=web: %d %v, want %v", code, got, web)
		}
		// A consistent read (no resourceVersion) holds the same, from the
		// caches or from the members.
		body, code, _ = fanOutGet(ctx, t, harness.UserAdmin, configMaps, nil)
		if got := fanOutItems(t, body); code != http.StatusOK || !slices.Equal(got, want) {
			t.Errorf("consistent read: %d %v, want %v", code, got, want)
		}
	})

	t.Run("kubectl", func(t *testing.T) {
		// kubectl reads Tables and consistent lists: the members answer what
		// the caches cannot, in the same merged answer; the objects are the
		// members'.
		kc := fanOutKubeconfigFor(t, harness.UserAdmin, segment)
		want, err := memberItems(ctx, members, ns)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := env.Kubectl(ctx, kc, "get", "configmaps", "-n", ns, "--chunk-size=1", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		if got := fanOutItems(t, []byte(out)); !slices.Equal(got, want) {
			t.Errorf("kubectl get --chunk-size=1 -o json: %v, members hold %v", got, want)
		}
		out, _, err = env.Kubectl(ctx, kc, "get", "configmaps", "-A", "-l", "app=web")
		if err != nil {
			t.Fatal(err)
		}
		for cluster, m := range memberOf {
			if !strings.Contains(out, cluster) || !strings.Contains(out, m+"-web") {
				t.Errorf("kubectl get -A -l app=web has no row of %s's %s-web:\n%s", cluster, m, out)
			}
		}
	})

	t.Run("kubectl get --watch follows the caches", func(t *testing.T) {
		// kubectl lists (consistent: the members or the caches answer) and
		// then watches Tables from the list's resourceVersion: the caches
		// answer the watch with the rows the members' printers made.
		before := map[string]float64{}
		for cluster := range memberOf {
			before[cluster] = cacheReads(t, cluster, "watch", "cache")
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		lines, stderr := kubectlLines(wctx, t, fanOutKubeconfigFor(t, harness.UserAdmin, segment), "get", "configmaps", "-n", ns, "--watch")
		var seen []string
		// waitFor reads kubectl's lines until one has name from cluster.
		waitFor := func(name, cluster string) []string {
			t.Helper()
			for {
				l, ok := <-lines
				if !ok {
					t.Fatalf("kubectl ended before printing %s of %s (stderr %s):\n%s", name, cluster, stderr.String(), strings.Join(seen, "\n"))
				}
				seen = append(seen, l)
				if f := strings.Fields(l); slices.Contains(f, name) && slices.Contains(f, cluster) {
					return f
				}
			}
		}
		waitFor(harness.MemberB+"-web", clusterB) // the list
		// The watches opened once the list was printed: wait for both.
		eventually(t, 30*time.Second, func(context.Context) error {
			for cluster := range memberOf {
				if after := cacheReads(t, cluster, "watch", "cache"); after <= before[cluster] {
					return errorf("%s: watches from the cache %v before, %v after (query %v behind %v not cached %v)", cluster, before[cluster], after, cacheReads(t, cluster, "watch", "query"), cacheReads(t, cluster, "watch", "behind"), cacheReads(t, cluster, "watch", "not_cached"))
				}
			}
			return nil
		})
		if _, err := members[clusterB].CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kubectl-watched"},
			Data: map[string]string{"a": "1", "b": "2"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = members[clusterB].CoreV1().ConfigMaps(ns).Delete(context.Background(), "kubectl-watched", metav1.DeleteOptions{})
		})
		// CLUSTER NAME DATA AGE: the member's cells, the cluster first.
		if f := waitFor("kubectl-watched", clusterB); len(f) != 4 || f[2] != "2" {
			t.Errorf("kubectl's row of the new ConfigMap %v, want CLUSTER NAME DATA(2) AGE:\n%s", f, strings.Join(seen, "\n"))
		}
	})

	t.Run("informers list and watch from the caches", func(t *testing.T) {
		lists, watches := cacheReads(t, clusterB, "list", "cache"), cacheReads(t, clusterB, "watch", "cache")
		cfg := env.HubConfig(harness.UserAdmin)
		cfg.Host = strings.TrimSuffix(cfg.Host, "/") + fanOutPath(segment)
		client := dynamic.NewForConfigOrDie(cfg)
		factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 0, ns, nil)
		// client-go's informers start with a watch with initial events, a
		// consistent read: from the caches when they hold the member's
		// current resourceVersion, else from the members. An informer that
		// lists (resourceVersion 0) and then watches reads the caches only.
		configMaps := client.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(ns)
		lw := listWatchOnly{&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return configMaps.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return configMaps.Watch(ctx, o)
			},
		}}
		informers := map[string]cache.SharedIndexInformer{
			"watch list":     factory.ForResource(corev1.SchemeGroupVersion.WithResource("configmaps")).Informer(),
			"list and watch": cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, cache.Indexers{}),
		}
		stop := make(chan struct{})
		var once sync.Once
		shutdown := func() {
			once.Do(func() {
				close(stop)
				factory.Shutdown()
			})
		}
		t.Cleanup(shutdown)
		factory.Start(stop)
		go informers["list and watch"].Run(stop)
		for kind, informer := range informers {
			if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
				t.Fatalf("the %s informer never synced", kind)
			}
		}
		// holds waits until every informer holds name from cluster with data
		// v, or (v "") none holds it.
		holds := func(name, cluster, v string) {
			t.Helper()
			eventually(t, 30*time.Second, func(context.Context) error {
				for kind, informer := range informers {
					obj, ok, _ := informer.GetStore().GetByKey(ns + "/" + name)
					if v == "" {
						if ok {
							return errorf("the %s informer still holds %s", kind, name)
						}
						continue
					}
					if !ok {
						return errorf("the %s informer has no %s", kind, name)
					}
					u := obj.(*unstructured.Unstructured)
					got, _, _ := unstructured.NestedString(u.Object, "data", "v")
					if c := u.GetAnnotations()["gateway.kubewharf.io/cluster"]; c != cluster || got != v {
						return errorf("the %s informer has %s from %q with v=%q, want from %q with v=%q", kind, name, c, got, cluster, v)
					}
				}
				return nil
			})
		}
		holds(harness.MemberB+"-web", clusterB, "1")
		if _, err := members[clusterB].CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "informed"},
			Data: map[string]string{"v": "1"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		holds("informed", clusterB, "1")
		if _, err := members[clusterB].CoreV1().ConfigMaps(ns).Patch(ctx, "informed", types.MergePatchType, []byte(`{"data":{"v":"2"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		holds("informed", clusterB, "2")
		if err := members[clusterB].CoreV1().ConfigMaps(ns).Delete(ctx, "informed", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		holds("informed", clusterB, "")
		shutdown()
		if l, w := cacheReads(t, clusterB, "list", "cache"), cacheReads(t, clusterB, "watch", "cache"); l <= lists || w <= watches {
			t.Errorf("%s's cache answered lists %v -> %v, watches %v -> %v: want both more", clusterB, lists, l, watches, w)
		}
	})

	t.Run("a watch after a list the members answered reads the caches", func(t *testing.T) {
		// A Secret moves each member's resourceVersion past its cached
		// ConfigMaps': the consistent list below is the members' (or the
		// caches', if they caught up meanwhile), and the watch from its
		// resourceVersion starts where the caches have not been yet.
		for _, c := range members {
			if _, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "moves-" + suffix}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		cfg := env.HubConfig(harness.UserAdmin)
		cfg.Host = strings.TrimSuffix(cfg.Host, "/") + fanOutPath(segment)
		configMaps := dynamic.NewForConfigOrDie(cfg).Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(ns)
		l, err := configMaps.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before := map[string]float64{}
		for cluster := range memberOf {
			before[cluster] = cacheReads(t, cluster, "watch", "cache")
		}
		w, err := configMaps.Watch(ctx, metav1.ListOptions{ResourceVersion: l.GetResourceVersion()})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if _, err := members[clusterA].CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-list"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The first event is the new ConfigMap: nothing the list held.
		select {
		case ev, ok := <-w.ResultChan():
			u, _ := ev.Object.(*unstructured.Unstructured)
			if !ok || ev.Type != watch.Added || u == nil || u.GetName() != "after-list" || u.GetAnnotations()["gateway.kubewharf.io/cluster"] != clusterA {
				t.Fatalf("first event %s %v (open %v), want after-list ADDED from %s", ev.Type, ev.Object, ok, clusterA)
			}
		case <-ctx.Done():
			t.Fatal("no event of the new ConfigMap")
		}
		for cluster := range memberOf {
			if after := cacheReads(t, cluster, "watch", "cache"); after <= before[cluster] {
				t.Errorf("%s: watches from the cache %v before, %v after: the member answered", cluster, before[cluster], after)
			}
		}
	})

	t.Run("CONNECT admission decides cached reads as live ones", func(t *testing.T) {
		policy, binding := proxyPolicy("e2e-fleet-reads-"+suffix, "request.name != '"+clusterA+"'", "closed to the fleet cache e2e")
		createProxyPolicy(ctx, t, hubAdmin(t), policy, binding)
		eventually(t, time.Minute, func(ctx context.Context) error {
			body, code, warnings := fanOutGet(ctx, t, harness.UserAdmin, configMaps, map[string]string{"resourceVersion": "0"})
			if code != http.StatusOK {
				return errorf("%d %s", code, body)
			}
			for name, c := range fanOutClusters(t, body) {
				if c == clusterA {
					return errorf("%s from %s, which the policy closes", name, c)
				}
			}
			if !hasWarningAbout(warnings, clusterA) || !strings.Contains(strings.Join(warnings, " "), "closed to the fleet cache e2e") {
				return errorf("warnings %q, want the policy's refusal of %s", warnings, clusterA)
			}
			return nil
		})
	})

	t.Run("alice reads what each member lets her read", func(t *testing.T) {
		forbidden := cacheReads(t, clusterB, "list", "forbidden")
		aliceCMs := fanOutPath(segment) + "/api/v1/namespaces/" + harness.AliceNamespace + "/configmaps"
		body, code, warnings := fanOutGet(ctx, t, harness.UserAlice, aliceCMs, map[string]string{"resourceVersion": "0"})
		if code != http.StatusOK {
			t.Fatalf("alice's list of namespace alice: %d %s", code, body)
		}
		got := fanOutClusters(t, body)
		if got[aliceCM] != clusterA {
			t.Errorf("alice's items %v, want %s from %s", got, aliceCM, clusterA)
		}
		for name, cluster := range got {
			if cluster != clusterA {
				t.Errorf("alice got %s from %s", name, cluster)
			}
		}
		if !hasWarningAbout(warnings, clusterB) || hasWarningAbout(warnings, clusterA) || !strings.Contains(strings.Join(warnings, " "), "forbidden") {
			t.Errorf("warnings %q, want one about %s (forbidden) only", warnings, clusterB)
		}
		if after := cacheReads(t, clusterB, "list", "forbidden"); after <= forbidden {
			t.Errorf("%s forbidden lists %v -> %v: the cache did not ask the member", clusterB, forbidden, after)
		}
		// The same list again, within the answers' lifetime: no review sent.
		reviews := func() (n float64) {
			for _, c := range []string{clusterA, clusterB} {
				v, _ := gatewayMetric(t, "kube_gateway_proxy_access_reviews_total", map[string]string{"cluster": c})
				n += v
			}
			return n
		}
		before := reviews()
		if body, code, _ := fanOutGet(ctx, t, harness.UserAlice, aliceCMs, map[string]string{"resourceVersion": "0"}); code != http.StatusOK {
			t.Fatalf("alice's list again: %d %s", code, body)
		}
		if after := reviews(); after != before || before == 0 {
			t.Errorf("SubjectAccessReviews %v before alice's list again, %v after: want some before, none sent for it", before, after)
		}

		// Granted on member-b (namespace ns), then taken away.
		rb := members[clusterB].RbacV1().RoleBindings(ns)
		if _, err := members[clusterB].RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "reader"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := rb.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-reads"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: harness.UserAlice}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// aliceSees tells why alice's list of ns does not hold member-b's
		// objects (want) or holds some (!want).
		aliceSees := func(want bool) func(context.Context) error {
			return func(ctx context.Context) error {
				body, code, warnings := fanOutGet(ctx, t, harness.UserAlice, configMaps, map[string]string{"resourceVersion": "0"})
				if code != http.StatusOK && code != http.StatusForbidden {
					return errorf("%d %s", code, body)
				}
				fromB := false
				if code == http.StatusOK {
					for _, c := range fanOutClusters(t, body) {
						fromB = fromB || c == clusterB
					}
				}
				if fromB != want || (!want && code == http.StatusOK && !hasWarningAbout(warnings, clusterB)) {
					return errorf("alice reads member-b: %v (%d, warnings %q), want %v", fromB, code, warnings, want)
				}
				return nil
			}
		}
		// A denied answer is kept 15 s (the e2e gateway's review TTL).
		eventually(t, time.Minute, aliceSees(true))
		if err := rb.Delete(ctx, "alice-reads", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		eventually(t, time.Minute, aliceSees(false))
		t.Logf("access taken away after %s (review TTL %s)", time.Since(start).Round(time.Second), memberAccessReviewTTL)
	})
}

// A member whose apiserver is killed: its cache is reported stale (since when,
// why), reads that take any state still come from it with a warning saying
// so; once the apiserver runs again, the cache is synced again and follows
// the member's changes.
func TestFleetCacheStaleMember(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	const cluster = "member-cache-stale"
	m := startMember(ctx, t, cluster)
	member := kubernetes.NewForConfigOrDie(m.AdminConfig)
	create := func(name string) {
		t.Helper()
		if _, err := member.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("before-the-stop")
	label := "fleet-cache-stale-" + utilrand.String(5)
	secret := grantCacheIdentity(ctx, t, m, "fleet-cache-stale")
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"yes"}},"spec":{"clientConfig":{"cacheSecretRef":{"namespace":%q,"name":%q}}}}`, label, harness.GatewayNamespace, secret)
	if _, err := upstreamClusters(t).Patch(ctx, cluster, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	cr := newCachedResource("fleet-cache-stale", "", "v1", "configmaps")
	cr.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{label: "yes"}}
	createCachedResource(t, cr)
	synced := func(ctx context.Context) error {
		e, err := cacheEntry(ctx, t, cluster, cr.Name)
		if err != nil {
			return err
		}
		if !e.Synced || e.StaleSince != nil {
			return errorf("not synced: %+v", e)
		}
		return nil
	}
	eventually(t, time.Minute, synced)
	path := fanOutPath(label+"=yes") + "/api/v1/namespaces/default/configmaps"
	// reads waits until a resourceVersion=0 list holds name, and returns
	// its warnings.
	reads := func(name string) []string {
		t.Helper()
		var warnings []string
		eventually(t, time.Minute, func(ctx context.Context) error {
			body, code, w := fanOutGet(ctx, t, harness.UserAdmin, path, map[string]string{"resourceVersion": "0"})
			if code != http.StatusOK {
				return errorf("%d %s", code, body)
			}
			if got := fanOutClusters(t, body); got[name] != cluster {
				return errorf("items %v, want %s from %s", got, name, cluster)
			}
			warnings = w
			return nil
		})
		return warnings
	}
	if w := reads("before-the-stop"); len(w) != 0 {
		t.Errorf("warnings from a synced cache: %q", w)
	}

	if err := m.Servers[0].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func(ctx context.Context) error {
		e, err := cacheEntry(ctx, t, cluster, cr.Name)
		if err != nil {
			return err
		}
		if e.Synced || e.StaleSince == nil || (e.Reason != "WatchFailed" && e.Reason != "ListFailed") || e.Message == "" {
			return errorf("entry of a stopped member: %+v", e)
		}
		return nil
	})
	w := reads("before-the-stop")
	if !hasWarningAbout(w, cluster) || !strings.Contains(strings.Join(w, " "), "served from the gateway's cache") {
		t.Errorf("warnings %q, want one saying %s's answer came from a stale cache", w, cluster)
	}

	if err := m.Servers[0].Process.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, synced)
	create("after-the-restart")
	if w := reads("after-the-restart"); len(w) != 0 {
		t.Errorf("warnings once synced again: %q", w)
	}
}
