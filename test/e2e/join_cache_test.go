package e2e

import (
	"bytes"
	"context"
	"maps"
	"os/exec"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// `kube-gateway join --cache-resources=configmaps` gives the gateway's fleet
// cache an identity of its own on member-b, the same objects the member
// chart renders with cache.resources: it may list configmaps in every
// namespace and nothing else (not secrets, not pods, no writes, no
// impersonation); the UpstreamCluster names its hub Secret in cacheSecretRef
// and the gateway fills a CachedResource's cache with it. Another list
// changes its role; secrets are refused; join without the flag removes it,
// and so does unjoin.
func TestJoinCacheIdentity(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	bin, ok := harness.GatewayBinary(env.BinDir)
	if !ok {
		t.Fatalf("no kube-gateway binary in %s: run make build", env.BinDir)
	}
	const name, identity, ns = "member-b-cached", "kube-gateway-cached", "kube-system"
	cacheSA, cacheRole, cacheSecret := identity+"-cache", identity+":cache-reader", name+"-cache"
	flags := []string{"--kubeconfig", env.Kubeconfig("hub-admin"), "--member-kubeconfig", env.Kubeconfig("member-b-admin"), "--identity-name", identity}
	join := func(extra ...string) string {
		return runGatewayCLI(ctx, t, t.TempDir(), append(append([]string{bin, "join", name, "--timeout", "90s"}, flags...), extra...)...)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = exec.CommandContext(ctx, bin, append([]string{"unjoin", name}, flags...)...).Run()
	})
	member, hub, ucs := memberB(t), hubAdmin(t), upstreamClusters(t)
	b := env.Members[harness.MemberB]

	// cacheObjects says which of the cache identity's objects exist.
	cacheObjects := func(ctx context.Context) map[string]bool {
		t.Helper()
		exists := func(err error) bool {
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			return err == nil
		}
		_, saErr := member.CoreV1().ServiceAccounts(ns).Get(ctx, cacheSA, metav1.GetOptions{})
		_, roleErr := member.RbacV1().ClusterRoles().Get(ctx, cacheRole, metav1.GetOptions{})
		_, bindingErr := member.RbacV1().ClusterRoleBindings().Get(ctx, cacheRole, metav1.GetOptions{})
		_, secretErr := hub.CoreV1().Secrets(harness.GatewayNamespace).Get(ctx, cacheSecret, metav1.GetOptions{})
		return map[string]bool{"member serviceaccount": exists(saErr), "member clusterrole": exists(roleErr),
			"member clusterrolebinding": exists(bindingErr), "hub secret": exists(secretErr)}
	}
	wantCacheObjects := func(ctx context.Context, when string, want bool) {
		t.Helper()
		for what, ok := range cacheObjects(ctx) {
			if ok != want {
				t.Errorf("%s: the cache identity's %s exists: %v, want %v", when, what, ok, want)
			}
		}
		uc, err := ucs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if !want && apierrors.IsNotFound(err) {
				return
			}
			t.Fatal(err)
		}
		ref := uc.Spec.ClientConfig.CacheSecretRef
		wantRef := &gatewayv1alpha1.SecretReference{Namespace: harness.GatewayNamespace, Name: cacheSecret}
		if (ref != nil) != want || (want && *ref != *wantRef) {
			t.Errorf("%s: spec.clientConfig.cacheSecretRef %+v, want it %v (%+v)", when, ref, want, wantRef)
		}
	}

	out := join("--cache-resources=configmaps")
	for _, obj := range []string{"member: serviceaccount/" + ns + "/" + cacheSA, "member: clusterrole/" + cacheRole,
		"member: clusterrolebinding/" + cacheRole, "hub: secret/" + harness.GatewayNamespace + "/" + cacheSecret} {
		if !strings.Contains(out, obj+" created") {
			t.Errorf("join --cache-resources does not create %s:\n%s", obj, out)
		}
	}
	if !strings.Contains(out, "Its cache identity system:serviceaccount:"+ns+":"+cacheSA+" may read configmaps") {
		t.Errorf("join --cache-resources does not name the cache identity:\n%s", out)
	}
	sameAsMemberChart(ctx, t, identity, ns, false, "configmaps")
	wantCacheObjects(ctx, "after join --cache-resources", true)

	// The hub Secret's token, toward member-b.
	secret, err := hub.CoreV1().Secrets(harness.GatewayNamespace).Get(ctx, cacheSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cacheConfig := &rest.Config{Host: b.Servers[0].URL, BearerToken: string(secret.Data["token"]),
		TLSClientConfig: rest.TLSClientConfig{CAData: secret.Data["ca.crt"]}}
	cache, err := kubernetes.NewForConfig(cacheConfig)
	if err != nil {
		t.Fatal(err)
	}
	who, err := whoami(t, cacheConfig)
	if err != nil {
		t.Fatal(err)
	}
	if want := "system:serviceaccount:" + ns + ":" + cacheSA; who.Username != want {
		t.Fatalf("member-b authenticates the cache Secret's token as %q, want %q", who.Username, want)
	}
	// It reads configmaps in every namespace...
	if _, err := cache.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		t.Fatalf("the cache identity lists configmaps: %v", err)
	}
	if _, err := cache.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{}); err != nil {
		t.Fatalf("the cache identity gets a configmap: %v", err)
	}
	// ... and does nothing else.
	impersonating := rest.CopyConfig(cacheConfig)
	impersonating.Impersonate = rest.ImpersonationConfig{UserName: harness.UserAlice}
	impersonator, err := kubernetes.NewForConfig(impersonating)
	if err != nil {
		t.Fatal(err)
	}
	for what, try := range map[string]func() error{
		"list secrets": func() error {
			_, err := cache.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1})
			return err
		},
		"list pods": func() error {
			_, err := cache.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1})
			return err
		},
		"list deployments": func() error {
			_, err := cache.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1})
			return err
		},
		"create a configmap": func() error {
			_, err := cache.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cache-may-not"}}, metav1.CreateOptions{})
			return err
		},
		"impersonate alice": func() error {
			_, err := impersonator.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			return err
		},
	} {
		if err := try(); !apierrors.IsForbidden(err) {
			t.Errorf("the cache identity may %s: %v, want 403", what, err)
		}
	}

	// The gateway fills a cache of member-b's configmaps with it.
	const label = "join-cache-e2e"
	if _, err := ucs.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"`+label+`":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	const cachedResource = "join-cache-e2e-configmaps"
	cacheLabelled(ctx, t, cachedResource, label, name)

	// Another list: the role changes, nothing else, and the token is kept.
	out = join("--cache-resources=deployments.apps,configmaps")
	if !strings.Contains(out, "member: clusterrole/"+cacheRole+" configured") || strings.Contains(out, " created") ||
		strings.Count(out, " configured") != 1 || strings.Contains(out, "token of serviceaccount") {
		t.Errorf("join with another --cache-resources changes more than the cache role:\n%s", out)
	}
	sameAsMemberChart(ctx, t, identity, ns, false, "configmaps", "deployments.apps")
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		_, err := cache.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1})
		return err
	})

	// Secrets: refused, in one line, before anything changes.
	before := cacheObjects(ctx)
	cmd := exec.CommandContext(ctx, bin, append([]string{"join", name, "--cache-resources=configmaps,secrets"}, flags...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), `--cache-resources "secrets": secrets are never cached`) {
		t.Errorf("join --cache-resources=configmaps,secrets: %v, stderr %q; want refused", err, stderr.String())
	}
	role, err := member.RbacV1().ClusterRoles().Get(ctx, cacheRole, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) != 2 {
		t.Errorf("a refused join changed the cache role: %+v", role.Rules)
	}
	if after := cacheObjects(ctx); !maps.Equal(after, before) {
		t.Errorf("a refused join changed objects: %v, before %v", after, before)
	}

	// join without the flag: the cache identity goes, its token with it, and
	// the cache says the cluster has no cache identity.
	out = join()
	for _, obj := range []string{"hub: secret/" + harness.GatewayNamespace + "/" + cacheSecret, "member: clusterrolebinding/" + cacheRole,
		"member: serviceaccount/" + ns + "/" + cacheSA, "member: clusterrole/" + cacheRole} {
		if !strings.Contains(out, obj+" deleted") {
			t.Errorf("join without --cache-resources does not delete %s:\n%s", obj, out)
		}
	}
	wantCacheObjects(ctx, "after join without --cache-resources", false)
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		if _, err := cache.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1}); !apierrors.IsUnauthorized(err) {
			return errorf("the removed cache identity's token lists configmaps: %v, want 401", err)
		}
		return nil
	})
	eventually(t, time.Minute, func(ctx context.Context) error {
		e, err := cacheEntry(ctx, t, name, cachedResource)
		if err != nil {
			return err
		}
		if e.Synced || e.Reason != "NoCacheIdentity" {
			return errorf("cache entry after the cache identity went: %+v", e)
		}
		return nil
	})

	// Back, then unjoin: all of it goes.
	join("--cache-resources=configmaps")
	wantCacheObjects(ctx, "after join --cache-resources again", true)
	out = runGatewayCLI(ctx, t, t.TempDir(), append([]string{bin, "unjoin", name}, flags...)...)
	if !strings.Contains(out, "member: serviceaccount/"+ns+"/"+cacheSA+" deleted") || !strings.Contains(out, "member: clusterrole/"+cacheRole+" deleted") {
		t.Errorf("unjoin does not delete the cache identity:\n%s", out)
	}
	wantCacheObjects(ctx, "after unjoin", false)
}
