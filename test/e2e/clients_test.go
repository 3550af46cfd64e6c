package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	gatewayac "github.com/kubewharf/kube-gateway/apis/client/applyconfiguration/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/apis/client/clientset/versioned"
	gatewayinformers "github.com/kubewharf/kube-gateway/apis/client/informers/externalversions"
	"github.com/kubewharf/kube-gateway/apis/client/multicluster"
	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/harness"
)

var configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// directClient is an admin client straight to a cluster (a member or the hub),
// to check where an object really is.
func directClient(t *testing.T, cluster string) kubernetes.Interface {
	t.Helper()
	cfg := env.HubConfig(harness.UserAdmin)
	if cluster != "hub" {
		cfg = env.Members[cluster].AdminConfig
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// otherMember is the member that is not member.
func otherMember(member string) string {
	if member == harness.MemberA {
		return harness.MemberB
	}
	return harness.MemberA
}

// exerciseMember uses typed, dynamic and discovery clients built from cfg, with
// requests made under ctx, against member in namespace ns, and checks on the
// clusters themselves that every effect landed on member: not on the other
// member, not on the hub.
func exerciseMember(t *testing.T, ctx context.Context, cfg *rest.Config, member, ns, prefix string) {
	t.Helper()
	direct := directClient(t, member)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	marker := prefix + "-marker"
	if _, err := direct.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: marker},
		Data:       map[string]string{"cluster": member},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = direct.CoreV1().ConfigMaps(ns).Delete(context.Background(), marker, metav1.DeleteOptions{})
	})

	// Typed: list sees what is on the member; create, get and delete act on it.
	list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("typed list: %v", err)
	}
	if !slices.ContainsFunc(list.Items, func(cm corev1.ConfigMap) bool { return cm.Name == marker }) {
		t.Fatalf("typed list of %s/%s does not show %s, created on the member", member, ns, marker)
	}
	name := prefix + "-typed"
	created, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Data:       map[string]string{"via": "gateway"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("typed create: %v", err)
	}
	t.Cleanup(func() {
		_ = direct.CoreV1().ConfigMaps(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	got, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || got.UID != created.UID || got.Data["via"] != "gateway" {
		t.Fatalf("typed get: %+v %v", got, err)
	}
	onMember, err := direct.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || onMember.UID != created.UID {
		t.Fatalf("the created configmap is not on %s: %+v %v", member, onMember, err)
	}
	for _, elsewhere := range []string{otherMember(member), "hub"} {
		if _, err := directClient(t, elsewhere).CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("configmap %s/%s created for %s is on %s too (err %v)", ns, name, member, elsewhere, err)
		}
	}

	// Dynamic: reads the member's object.
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u, err := dyn.Resource(configMapsGVR).Namespace(ns).Get(ctx, marker, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("dynamic get: %v", err)
	}
	if data, _ := u.Object["data"].(map[string]any); data["cluster"] != member {
		t.Fatalf("dynamic get of %s: %v", marker, u.Object)
	}
	ulist, err := dyn.Resource(configMapsGVR).Namespace(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil || len(ulist.Items) != 1 || ulist.Items[0].GetUID() != created.UID {
		t.Fatalf("dynamic list: %v %v", ulist, err)
	}

	// Watch: an object created on the member itself arrives as an event.
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, FieldSelector: "metadata.name=" + prefix + "-watched"})
	if err != nil {
		t.Fatalf("typed watch: %v", err)
	}
	defer w.Stop()
	watched, err := direct.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-watched"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = direct.CoreV1().ConfigMaps(ns).Delete(context.Background(), watched.Name, metav1.DeleteOptions{})
	})
	expectConfigMapEvent(t, w, watch.Added, watched.UID)

	// Discovery: the member's groups (the hub's gateway group is not among
	// them) and version.
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := dc.ServerGroupsWithContext(ctx)
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	memberGroups, err := direct.Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	if g, want := groupNames(groups), groupNames(memberGroups); !slices.Equal(g, want) || slices.Contains(g, gatewayv1alpha1.GroupName) {
		t.Fatalf("discovery groups through the gateway %v, want the member's %v", g, want)
	}
	v, err := dc.ServerVersionWithContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if mv, err := direct.Discovery().ServerVersion(); err != nil || v.GitVersion != mv.GitVersion {
		t.Fatalf("version through the gateway %+v, on the member %+v (%v)", v, mv, err)
	}

	// Delete through the gateway removes it from the member.
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("typed delete: %v", err)
	}
	if _, err := direct.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("deleted configmap still on %s: %v", member, err)
	}
}

func groupNames(l *metav1.APIGroupList) []string {
	var names []string
	for _, g := range l.Groups {
		names = append(names, g.Name)
	}
	slices.Sort(names)
	return names
}

func expectConfigMapEvent(t *testing.T, w watch.Interface, typ watch.EventType, uid types.UID) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	var seen []string
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch ended; saw %v", seen)
			}
			if cm, isCM := ev.Object.(*corev1.ConfigMap); isCM && ev.Type == typ && cm.UID == uid {
				return
			}
			seen = append(seen, string(ev.Type))
		case <-deadline:
			t.Fatalf("no %s event; saw %v", typ, seen)
		}
	}
}

// multicluster.ConfigFor gives client-go clients for a member from a hub
// config: alice on member-a (where she may edit namespace alice), admin on
// member-b.
func TestClientsConfigFor(t *testing.T) {
	for _, tc := range []struct{ user, member, ns string }{
		{harness.UserAlice, harness.MemberA, harness.AliceNamespace},
		{harness.UserAdmin, harness.MemberB, "default"},
	} {
		t.Run(tc.user+"@"+tc.member, func(t *testing.T) {
			ctx := testContext(t, 2*time.Minute)
			hub := env.HubConfig(tc.user)
			cfg, err := multicluster.ConfigFor(hub, tc.member)
			if err != nil {
				t.Fatal(err)
			}
			if want := hub.Host + harness.ProxyPath(tc.member); cfg.Host != want {
				t.Fatalf("Host %q, want %q", cfg.Host, want)
			}
			exerciseMember(t, ctx, cfg, tc.member, tc.ns, "configfor-"+tc.member)
		})
	}
}

// One client built from multicluster.RoutingConfig reaches the cluster its
// request context names, and the hub when the context names none or Local.
func TestClientsRoutingRoundTripper(t *testing.T) {
	cfg := multicluster.RoutingConfig(env.HubConfig(harness.UserAdmin))
	for _, member := range []string{harness.MemberA, harness.MemberB} {
		t.Run(member, func(t *testing.T) {
			ctx := multicluster.WithCluster(testContext(t, 2*time.Minute), member)
			exerciseMember(t, ctx, cfg, member, "default", "routing-"+member)
		})
	}

	t.Run("hub", func(t *testing.T) {
		bg := testContext(t, time.Minute)
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name, cm string
			ctx      context.Context
		}{
			{"no cluster", "routing-hub-none", bg},
			{"Local", "routing-hub-local", multicluster.WithCluster(bg, multicluster.Local)},
			{"cleared with \"\"", "routing-hub-cleared", multicluster.WithCluster(multicluster.WithCluster(bg, harness.MemberA), "")},
		} {
			name, cmName, ctx := tc.name, tc.cm, tc.ctx
			groups, err := dc.ServerGroupsWithContext(ctx)
			if err != nil {
				t.Fatalf("%s: discovery: %v", name, err)
			}
			// Only the hub serves the gateway's own group.
			if !slices.Contains(groupNames(groups), gatewayv1alpha1.GroupName) {
				t.Fatalf("%s: discovery did not reach the hub: %v", name, groupNames(groups))
			}
			created, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cmName}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("%s: create: %v", name, err)
			}
			t.Cleanup(func() {
				_ = directClient(t, "hub").CoreV1().ConfigMaps("default").Delete(context.Background(), cmName, metav1.DeleteOptions{})
			})
			hubCM, err := directClient(t, "hub").CoreV1().ConfigMaps("default").Get(ctx, cmName, metav1.GetOptions{})
			if err != nil || hubCM.UID != created.UID {
				t.Fatalf("%s: configmap not on the hub: %v", name, err)
			}
			for _, m := range []string{harness.MemberA, harness.MemberB} {
				if _, err := directClient(t, m).CoreV1().ConfigMaps("default").Get(ctx, cmName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Fatalf("%s: configmap for the hub is on %s (err %v)", name, m, err)
				}
			}
			if err := cs.CoreV1().ConfigMaps("default").Delete(ctx, cmName, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("%s: delete: %v", name, err)
			}
		}
	})

	t.Run("invalid cluster", func(t *testing.T) {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := multicluster.WithCluster(testContext(t, 30*time.Second), "../member-a")
		if _, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "invalid cluster name") {
			t.Fatalf("list with an invalid cluster name: %v", err)
		}
	})
}

// The generated clientset, informers, listers and apply configurations work
// against the hub.
func TestClientsGeneratedClientset(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	cs, err := versioned.NewForConfig(env.HubConfig(harness.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	client := cs.GatewayV1alpha1().UpstreamClusters()

	factory := gatewayinformers.NewSharedInformerFactory(cs, 0)
	informer := factory.Gateway().V1alpha1().UpstreamClusters()
	lister := informer.Lister()
	stop := make(chan struct{})
	factory.Start(stop)
	defer func() {
		close(stop)
		factory.Shutdown() // waits for the informer's goroutines
	}()
	if !cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced) {
		t.Fatal("the UpstreamCluster informer did not sync")
	}
	for _, m := range []string{harness.MemberA, harness.MemberB} {
		if _, err := lister.Get(m); err != nil {
			t.Fatalf("lister: %v", err)
		}
	}

	const name = "clients-typed"
	w, err := client.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	t.Cleanup(func() { _ = client.Delete(context.Background(), name, metav1.DeleteOptions{}) })

	created, err := client.Create(ctx, newCluster(name, "https://127.0.0.1:1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Generation != 1 || created.Spec.HealthCheck == nil || created.Spec.HealthCheck.Path != "/readyz" {
		t.Fatalf("created: generation %d, healthCheck %+v", created.Generation, created.Spec.HealthCheck)
	}
	expectClusterEvent(t, w, watch.Added, name, 1)
	got, err := client.Get(ctx, name, metav1.GetOptions{})
	if err != nil || got.UID != created.UID {
		t.Fatalf("get: %+v %v", got, err)
	}
	list, err := client.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, uc := range list.Items {
		names = append(names, uc.Name)
	}
	for _, want := range []string{name, harness.MemberA, harness.MemberB} {
		if !slices.Contains(names, want) {
			t.Fatalf("list %v misses %s", names, want)
		}
	}
	eventually(t, 30*time.Second, func(context.Context) error {
		uc, err := lister.Get(name)
		if err != nil {
			return err
		}
		if uc.UID != created.UID {
			return errorf("lister has uid %s, want %s", uc.UID, created.UID)
		}
		return nil
	})

	// Update the spec; the gateway writes status concurrently, so retry.
	var updated *gatewayv1alpha1.UpstreamCluster
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		uc, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		uc.Spec.Servers[0].Disabled = true
		updated, err = client.Update(ctx, uc, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if updated.Generation != 2 || !updated.Spec.Servers[0].Disabled {
		t.Fatalf("update: generation %d disabled %v", updated.Generation, updated.Spec.Servers[0].Disabled)
	}
	expectClusterEvent(t, w, watch.Modified, name, 2)

	// UpdateStatus writes the status only.
	var statusUpdated *gatewayv1alpha1.UpstreamCluster
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		uc, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		uc.Status.ObservedGeneration = 7
		uc.Spec.Servers[0].Disabled = false
		statusUpdated, err = client.UpdateStatus(ctx, uc, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if statusUpdated.Status.ObservedGeneration != 7 || !statusUpdated.Spec.Servers[0].Disabled || statusUpdated.Generation != 2 {
		t.Fatalf("update status: observedGeneration %d disabled %v generation %d", statusUpdated.Status.ObservedGeneration, statusUpdated.Spec.Servers[0].Disabled, statusUpdated.Generation)
	}

	// Typed server-side apply: the manager owns what it applied; applying
	// again without a server removes that server (list-map ownership).
	const applied = "clients-applied"
	t.Cleanup(func() { _ = client.Delete(context.Background(), applied, metav1.DeleteOptions{}) })
	config := func(endpoints ...string) *gatewayac.UpstreamClusterApplyConfiguration {
		spec := gatewayac.UpstreamClusterSpec().
			WithClientConfig(gatewayac.ClientConfig().
				WithSecretRef(gatewayac.SecretReference().WithNamespace(harness.GatewayNamespace).WithName(harness.MemberB)))
		for _, e := range endpoints {
			spec.WithServers(gatewayac.UpstreamServer().WithEndpoint(e))
		}
		return gatewayac.UpstreamCluster(applied).WithSpec(spec)
	}
	opts := metav1.ApplyOptions{FieldManager: "e2e-clients", Force: true}
	first, err := client.Apply(ctx, config("https://127.0.0.1:2", "https://127.0.0.1:3"), opts)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if len(first.Spec.Servers) != 2 || first.Generation != 1 || !managedBy(first.ManagedFields, "e2e-clients", metav1.ManagedFieldsOperationApply) {
		t.Fatalf("first apply: servers %+v generation %d managed %+v", first.Spec.Servers, first.Generation, first.ManagedFields)
	}
	second, err := client.Apply(ctx, config("https://127.0.0.1:3"), opts)
	if err != nil {
		t.Fatalf("second apply: %v", err)
	}
	if len(second.Spec.Servers) != 1 || second.Spec.Servers[0].Endpoint != "https://127.0.0.1:3" || second.Generation != 2 {
		t.Fatalf("second apply: servers %+v generation %d", second.Spec.Servers, second.Generation)
	}
	// Read-modify-apply: Extract gives back exactly what the manager applied, as
	// the server tracked it (the schema of the apply configurations matches the
	// server's: the servers list is keyed by endpoint on both sides).
	extracted, err := gatewayac.ExtractUpstreamCluster(second, opts.FieldManager)
	if err != nil {
		t.Fatal(err)
	}
	if want := config("https://127.0.0.1:3"); !reflect.DeepEqual(extracted, want) {
		got, _ := json.Marshal(extracted)
		wantJSON, _ := json.Marshal(want)
		t.Fatalf("extracted for %s:\n%s\nwant what it applied:\n%s", opts.FieldManager, got, wantJSON)
	}
	if other, err := gatewayac.ExtractUpstreamCluster(second, "someone-else"); err != nil || other.Spec != nil {
		t.Fatalf("extracted for a manager that applied nothing: %+v, %v", other, err)
	}
	eventually(t, 30*time.Second, func(context.Context) error {
		uc, err := lister.Get(applied)
		if err != nil {
			return err
		}
		if uc.Generation != 2 {
			return errorf("lister has generation %d, want 2", uc.Generation)
		}
		return nil
	})

	// Delete: the watch and the lister see it go.
	if err := client.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectClusterEvent(t, w, watch.Deleted, name, 2)
	eventually(t, 30*time.Second, func(context.Context) error {
		if _, err := lister.Get(name); !apierrors.IsNotFound(err) {
			return errorf("lister still has %s (err %v)", name, err)
		}
		return nil
	})
}

func expectClusterEvent(t *testing.T, w watch.Interface, typ watch.EventType, name string, generation int64) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	var seen []string
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch ended; saw %v", seen)
			}
			uc, isUC := ev.Object.(*gatewayv1alpha1.UpstreamCluster)
			if isUC && ev.Type == typ && uc.Name == name && uc.Generation == generation {
				return
			}
			seen = append(seen, string(ev.Type))
		case <-deadline:
			t.Fatalf("no %s event for %s at generation %d; saw %v", typ, name, generation, seen)
		}
	}
}

// kubeGatewayKubeconfig runs the built `kube-gateway kubeconfig` with the hub
// kubeconfig hubKubeconfig (a name for env.Kubeconfig) and returns stdout and
// stderr.
func kubeGatewayKubeconfig(ctx context.Context, t *testing.T, hubKubeconfig string, args ...string) (string, string, error) {
	t.Helper()
	bin, ok := harness.GatewayBinary(env.BinDir)
	if !ok {
		t.Fatalf("no kube-gateway binary in %s: run make build", env.BinDir)
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"kubeconfig", "--kubeconfig", env.Kubeconfig(hubKubeconfig)}, args...)...)
	// Only --kubeconfig decides; an inherited KUBECONFIG must not.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// `kube-gateway kubeconfig --cluster member-a` prints a kubeconfig with which
// kubectl reaches member-a through the hub as the hub user.
func TestClientsKubeconfigCommand(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	dir := t.TempDir()
	write := func(hubKubeconfig, file string, args ...string) string {
		t.Helper()
		out, stderr, err := kubeGatewayKubeconfig(ctx, t, hubKubeconfig, args...)
		if err != nil {
			t.Fatalf("kube-gateway kubeconfig %v: %v\n%s", args, err, stderr)
		}
		cfg, err := clientcmd.Load([]byte(out))
		if err != nil {
			t.Fatalf("stdout of kube-gateway kubeconfig is not a kubeconfig: %v\n%s", err, out)
		}
		if len(cfg.Contexts) != 1 || cfg.Contexts[cfg.CurrentContext] == nil {
			t.Fatalf("want one context, the current one: %s", out)
		}
		if c := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]; c == nil || c.Server != env.Hub.Servers[0].URL+harness.ProxyPath(harness.MemberA) {
			t.Fatalf("server: %+v", c)
		}
		path := filepath.Join(dir, file)
		if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	// The hub admin: kubectl get namespaces lists member-a's namespaces.
	adminA := write("hub-admin", "admin-a.kubeconfig", "--cluster", harness.MemberA, "--check")
	out, _, err := env.Kubectl(ctx, adminA, "get", "namespaces", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(out)
	slices.Sort(got)
	nsNames := func(cluster string) []string {
		list, err := directClient(t, cluster).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, ns := range list.Items {
			names = append(names, "namespace/"+ns.Name)
		}
		slices.Sort(names)
		return names
	}
	if want := nsNames(harness.MemberA); !slices.Equal(got, want) {
		t.Fatalf("kubectl get namespaces = %v, member-a has %v", got, want)
	}
	if hub := nsNames("hub"); slices.Equal(got, hub) {
		t.Fatalf("kubectl get namespaces shows the hub's namespaces %v", hub)
	}

	// Alice, under her own context name: the member sees her (auth whoami),
	// and member-a's audit log records her request.
	aliceA := write("hub-alice", "alice-a.kubeconfig", "--cluster", harness.MemberA, "--context-name", "alice-on-a")
	if cfg, err := clientcmd.LoadFromFile(aliceA); err != nil || cfg.CurrentContext != "alice-on-a" {
		t.Fatalf("--context-name: %v %v", cfg, err)
	}
	auditBefore := 0
	for _, s := range env.Members[harness.MemberA].Servers {
		auditBefore += auditCount(t, s, "create", "selfsubjectreviews", harness.UserAlice)
	}
	out, _, err = env.Kubectl(ctx, aliceA, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.uid} {.status.userInfo.groups}")
	if err != nil {
		t.Fatal(err)
	}
	if want := `alice alice-uid ["dev-team","system:authenticated"]`; out != want {
		t.Fatalf("kubectl auth whoami = %q, want %q", out, want)
	}
	eventually(t, 20*time.Second, func(context.Context) error {
		n := 0
		for _, s := range env.Members[harness.MemberA].Servers {
			n += auditCount(t, s, "create", "selfsubjectreviews", harness.UserAlice)
		}
		if n <= auditBefore {
			return errorf("member-a's audit logs show no new selfsubjectreview by alice (%d before, %d now)", auditBefore, n)
		}
		return nil
	})
	// Member-a's RBAC applies to her: her namespace yes, cluster-wide no.
	if _, _, err := env.Kubectl(ctx, aliceA, "get", "configmaps", "-n", harness.AliceNamespace); err != nil {
		t.Fatalf("alice in her namespace: %v", err)
	}
	if _, stderr, err := env.Kubectl(ctx, aliceA, "get", "namespaces"); err == nil || !strings.Contains(stderr, "Forbidden") {
		t.Fatalf("alice listing namespaces on member-a: %v %s", err, stderr)
	}

	// Merged as docs/clients.md says, each context keeps its own user.
	merge := exec.CommandContext(ctx, filepath.Join(env.BinDir, "kubectl"), "config", "view", "--flatten")
	merge.Env = append(os.Environ(), "KUBECONFIG="+adminA+string(filepath.ListSeparator)+aliceA)
	merged, err := merge.Output()
	if err != nil {
		t.Fatalf("kubectl config view --flatten: %v", err)
	}
	mergedFile := filepath.Join(dir, "merged.kubeconfig")
	if err := os.WriteFile(mergedFile, merged, 0o600); err != nil {
		t.Fatal(err)
	}
	for context, want := range map[string]string{harness.MemberA: harness.UserAdmin, "alice-on-a": harness.UserAlice} {
		if out, _, err := env.Kubectl(ctx, mergedFile, "--context", context, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); err != nil || out != want {
			t.Fatalf("merged kubeconfig, context %s: whoami %q (%v), want %s", context, out, err, want)
		}
	}

	// --check fails for a cluster the hub does not have, and stdout stays empty.
	out, stderr, err := kubeGatewayKubeconfig(ctx, t, "hub-admin", "--cluster", "no-such-cluster", "--check")
	if err == nil || out != "" || !strings.Contains(stderr, `upstreamcluster \"no-such-cluster\" not found`) && !strings.Contains(stderr, `upstreamcluster "no-such-cluster" not found`) {
		t.Fatalf("--check of a missing cluster: err %v stdout %q stderr %q", err, out, stderr)
	}
	// An invalid name is refused before anything is printed.
	if out, _, err := kubeGatewayKubeconfig(ctx, t, "hub-admin", "--cluster", "../member-a"); err == nil || out != "" {
		t.Fatalf("invalid cluster name: err %v stdout %q", err, out)
	}
}
