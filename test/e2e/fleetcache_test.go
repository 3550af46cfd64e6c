package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// cacheLabelled creates a CachedResource name of ConfigMaps over the
// clusters labelled label=yes, and waits until cluster's cache of it is
// synced and holds objects.
func cacheLabelled(ctx context.Context, t *testing.T, name, label, cluster string) {
	t.Helper()
	cr := newCachedResource(name, "", "v1", "configmaps")
	cr.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{label: "yes"}}
	createCachedResource(t, cr)
	eventually(t, time.Minute, func(ctx context.Context) error {
		e, err := cacheEntry(ctx, t, cluster, cr.Name)
		if err != nil {
			return err
		}
		if !e.Synced || e.Objects == 0 {
			return errorf("not synced with objects: %+v", e)
		}
		return nil
	})
}

// cacheEntry returns the status.caches entry of cluster for cachedResource.
func cacheEntry(ctx context.Context, t *testing.T, cluster, cachedResource string) (*gatewayv1alpha1.UpstreamClusterCacheStatus, error) {
	uc, err := upstreamClusters(t).Get(ctx, cluster, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	for i := range uc.Status.Caches {
		if uc.Status.Caches[i].CachedResource == cachedResource {
			return &uc.Status.Caches[i], nil
		}
	}
	return nil, errorf("no status.caches entry for %q: %+v", cachedResource, uc.Status.Caches)
}

// A CachedResource for configmaps selecting a cluster by label: the gateway
// lists and watches member-b's configmaps with an identity that may only do
// that, reports the cache in the cluster's status.caches and the totals in
// the CachedResource's status; a selected cluster without cacheSecretRef says
// what to set; deleting the CachedResource removes the entries.
func TestFleetCacheFillsAndReports(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	member, err := kubernetes.NewForConfig(env.Members[harness.MemberB].Config(harness.UserAdmin, 0))
	if err != nil {
		t.Fatal(err)
	}
	const sa, ns = "fleet-cache-e2e", "default"
	cacheSecret := grantCacheIdentity(ctx, t, env.Members[harness.MemberB], sa)

	const label = "fleet-cache-e2e"
	cached := newCluster("fleet-cached", env.Members[harness.MemberB].Servers[0].URL)
	cached.Labels = map[string]string{label: "yes"}
	cached.Spec.ClientConfig.CacheSecretRef = &gatewayv1alpha1.SecretReference{Namespace: harness.GatewayNamespace, Name: cacheSecret}
	createCluster(t, cached)
	cr := newCachedResource("fleet-cache-e2e-configmaps", "", "v1", "configmaps")
	cr.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{label: "yes"}}
	createCachedResource(t, cr)

	eventually(t, time.Minute, func(ctx context.Context) error {
		e, err := cacheEntry(ctx, t, cached.Name, cr.Name)
		if err != nil {
			return err
		}
		if !e.Synced || e.Objects == 0 || e.ResourceVersion == "" || e.Bytes == 0 || e.LastSyncTime == nil {
			return errorf("not synced with objects: %+v", e)
		}
		return nil
	})

	// The cache lists with the cache identity, not the gateway's own: a
	// resource that identity may not list is refused to it, by name.
	denied := newCachedResource("fleet-cache-e2e-serviceaccounts", "", "v1", "serviceaccounts")
	denied.Spec.ClusterSelector = cr.Spec.ClusterSelector
	createCachedResource(t, denied)
	eventually(t, time.Minute, func(ctx context.Context) error {
		e, err := cacheEntry(ctx, t, cached.Name, denied.Name)
		if err != nil {
			return err
		}
		if e.Synced || (e.Reason != "ListFailed" && e.Reason != "WatchFailed") || !strings.Contains(e.Message, "system:serviceaccount:"+ns+":"+sa) {
			return errorf("entry of a resource the cache identity may not list: %+v", e)
		}
		return nil
	})
	if err := cachedResources(t).Delete(ctx, denied.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// A new ConfigMap reaches the cache within the status period: the count
	// matches member-b's ConfigMaps at a resourceVersion past the new one's
	// (other tests' ConfigMaps come and go meanwhile: the count alone would
	// not say).
	created, err := member.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fleet-cache-e2e"},
		Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = member.CoreV1().ConfigMaps(ns).Delete(context.Background(), "fleet-cache-e2e", metav1.DeleteOptions{})
	})
	createdRV, _ := strconv.ParseInt(created.ResourceVersion, 10, 64)
	eventually(t, 2*time.Minute, func(ctx context.Context) error {
		e, err := cacheEntry(ctx, t, cached.Name, cr.Name)
		if err != nil {
			return err
		}
		live, err := member.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if rv, _ := strconv.ParseInt(e.ResourceVersion, 10, 64); rv < createdRV || e.Objects != int64(len(live.Items)) {
			return errorf("cache at resourceVersion %s with %d objects; member-b has %d ConfigMaps, the new one at %s", e.ResourceVersion, e.Objects, len(live.Items), created.ResourceVersion)
		}
		return nil
	})

	eventually(t, time.Minute, func(ctx context.Context) error {
		got, err := cachedResources(t).Get(ctx, cr.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if st := got.Status; st.SelectedClusters != 1 || st.SyncedClusters != 1 || st.Objects == 0 || len(st.NotSynced) != 0 {
			return errorf("CachedResource status: %+v", st)
		}
		return nil
	})

	// A selected cluster without a cache identity says which field to set.
	bare := newCluster("fleet-uncached", env.Members[harness.MemberB].Servers[0].URL)
	bare.Labels = map[string]string{label: "yes"}
	createCluster(t, bare)
	eventually(t, time.Minute, func(ctx context.Context) error {
		e, err := cacheEntry(ctx, t, bare.Name, cr.Name)
		if err != nil {
			return err
		}
		if e.Synced || e.Reason != "NoCacheIdentity" || !strings.Contains(e.Message, "spec.clientConfig.cacheSecretRef") {
			return errorf("entry of a cluster without cacheSecretRef: %+v", e)
		}
		return nil
	})
	eventually(t, time.Minute, func(ctx context.Context) error {
		got, err := cachedResources(t).Get(ctx, cr.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if st := got.Status; st.SelectedClusters != 2 || st.SyncedClusters != 1 || len(st.NotSynced) != 1 || st.NotSynced[0].Cluster != bare.Name {
			return errorf("CachedResource status: %+v", st)
		}
		return nil
	})

	if err := cachedResources(t).Delete(ctx, cr.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func(ctx context.Context) error {
		for _, name := range []string{cached.Name, bare.Name} {
			uc, err := upstreamClusters(t).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(uc.Status.Caches) != 0 {
				return errorf("%s still has status.caches %+v", name, uc.Status.Caches)
			}
		}
		return nil
	})
}

// grantCacheIdentity creates on member m a ServiceAccount default/name that
// may only list and watch configmaps, and on the hub a Secret of the same
// name with its token and the member's CA (a cacheSecretRef's); both go when
// the test ends. It returns the Secret's name.
func grantCacheIdentity(ctx context.Context, t *testing.T, m *harness.Cluster, name string) string {
	t.Helper()
	member, err := kubernetes.NewForConfig(m.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "default"
	if _, err := member.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = member.CoreV1().ServiceAccounts(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if _, err := member.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = member.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if _, err := member.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = member.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	tok, err := member.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secrets := hubAdmin(t).CoreV1().Secrets(harness.GatewayNamespace)
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
		Data: map[string][]byte{"token": []byte(tok.Status.Token), "ca.crt": m.CAData}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = secrets.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

func ptrTo[T any](v T) *T { return &v }
