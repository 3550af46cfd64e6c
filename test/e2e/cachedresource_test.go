package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/util/retry"

	applyv1alpha1 "github.com/kubewharf/kube-gateway/apis/client/applyconfiguration/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/apis/client/clientset/versioned"
	gatewayclient "github.com/kubewharf/kube-gateway/apis/client/clientset/versioned/typed/gateway/v1alpha1"
	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// cachedResources is the hub admin's client for CachedResources.
func cachedResources(t *testing.T) gatewayclient.CachedResourceInterface {
	t.Helper()
	c, err := versioned.NewForConfig(env.HubConfig(harness.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	return c.GatewayV1alpha1().CachedResources()
}

// createCachedResource creates cr on the hub and deletes it when the test ends.
func createCachedResource(t *testing.T, cr *gatewayv1alpha1.CachedResource) *gatewayv1alpha1.CachedResource {
	t.Helper()
	created, err := cachedResources(t).Create(testContext(t, 30*time.Second), cr, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cachedResources(t).Delete(context.Background(), cr.Name, metav1.DeleteOptions{}) })
	return created
}

func newCachedResource(name, group, version, resource string) *gatewayv1alpha1.CachedResource {
	return &gatewayv1alpha1.CachedResource{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       gatewayv1alpha1.CachedResourceSpec{Group: group, Version: version, Resource: resource},
	}
}

// invalidCauses returns the field paths of a 422, failing the test for any
// other answer.
func invalidCauses(t *testing.T, err error) map[string]string {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("got %v, want 422 Invalid", err)
	}
	status := err.(apierrors.APIStatus).Status()
	if status.Code != http.StatusUnprocessableEntity || status.Details == nil {
		t.Fatalf("got %d %+v, want 422 with details", status.Code, status)
	}
	causes := map[string]string{}
	for _, c := range status.Details.Causes {
		causes[c.Field] = c.Message
	}
	return causes
}

// A CachedResource is declared with server-side apply and listed with kubectl
// columns; a second one for the same resource is refused naming the first.
func TestCachedResourceApplyAndDuplicates(t *testing.T) {
	ctx := testContext(t, time.Minute)
	manifest := `apiVersion: gateway.kubewharf.io/v1alpha1
kind: CachedResource
metadata:
  name: %s
spec:
  group: ""
  version: v1
  resource: configmaps
%s`
	apply := func(name, extra string) (string, error) {
		t.Helper()
		cmd := env.KubectlCmd(ctx, "hub-admin", "apply", "--server-side", "--field-manager=e2e", "-f", "-")
		cmd.Stdin = strings.NewReader(sprintf(manifest, name, extra))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := apply("e2e-configmaps", ""); err != nil {
		t.Fatalf("kubectl apply --server-side: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = cachedResources(t).Delete(context.Background(), "e2e-configmaps", metav1.DeleteOptions{}) })
	if out, err := apply("e2e-configmaps", "  clusterSelector:\n    matchLabels: {cache: \"yes\"}\n"); err != nil {
		t.Fatalf("second kubectl apply --server-side: %v\n%s", err, out)
	}
	cr, err := cachedResources(t).Get(ctx, "e2e-configmaps", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cr.Generation != 2 || cr.Spec.ClusterSelector == nil || cr.Spec.ClusterSelector.MatchLabels["cache"] != "yes" ||
		!managedBy(cr.ManagedFields, "e2e", metav1.ManagedFieldsOperationApply) {
		t.Fatalf("after two applies: generation %d selector %v managedFields %+v", cr.Generation, cr.Spec.ClusterSelector, cr.ManagedFields)
	}

	out, _, err := env.Kubectl(ctx, "hub-admin", "get", "cachedresources")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if header := strings.Join(strings.Fields(lines[0]), " "); header != "NAME GROUP VERSION RESOURCE SELECTED SYNCED OBJECTS READY AGE" {
		t.Fatalf("columns: %q", header)
	}
	// The gateway writes the status: no cluster is labelled cache=yes.
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		out, _, err := env.Kubectl(ctx, "hub-admin", "get", "cachedresource", "e2e-configmaps", "--no-headers", "-o", "wide")
		if err != nil {
			return err
		}
		if f := strings.Fields(out); len(f) != 10 || strings.Join(f[:8], " ") != `e2e-configmaps "" v1 configmaps 0 0 0 True` || f[9] != "0" {
			return errorf("row: %q", out)
		}
		return nil
	})
	// The hub fetches the gateway's OpenAPI in the background.
	eventually(t, time.Minute, func(ctx context.Context) error {
		out, _, err := env.Kubectl(ctx, "hub-admin", "explain", "cachedresources.spec.resource")
		if err != nil || !strings.Contains(out, "lower-case plural") {
			return errorf("kubectl explain lacks the field docs: %v\n%s", err, out)
		}
		return nil
	})

	// The same resource under another name: 422 naming the first, through
	// kubectl and through a client.
	if out, err := apply("e2e-configmaps-again", ""); err == nil || !strings.Contains(out, `CachedResource "e2e-configmaps"`) ||
		!strings.Contains(out, "spec.resource") {
		t.Fatalf("kubectl apply of a duplicate: %v\n%s", err, out)
	}
	_, err = cachedResources(t).Create(ctx, newCachedResource("e2e-configmaps-again", "", "v1", "configmaps"), metav1.CreateOptions{})
	if msg := invalidCauses(t, err)["spec.resource"]; !strings.Contains(msg, `CachedResource "e2e-configmaps"`) {
		t.Fatalf("duplicate: %v, want 422 at spec.resource naming e2e-configmaps", err)
	}
	// Another version is another resource; moving it onto the first is refused.
	createCachedResource(t, newCachedResource("e2e-configmaps-v2", "", "v2", "configmaps"))
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cr, err := cachedResources(t).Get(ctx, "e2e-configmaps-v2", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cr.Spec.Version = "v1"
		_, err = cachedResources(t).Update(ctx, cr, metav1.UpdateOptions{})
		return err
	})
	if msg := invalidCauses(t, err)["spec.resource"]; !strings.Contains(msg, `CachedResource "e2e-configmaps"`) {
		t.Fatalf("update onto a cached resource: %v, want 422 at spec.resource naming e2e-configmaps", err)
	}
	// Deleted, its resource is free again.
	if err := cachedResources(t).Delete(ctx, "e2e-configmaps", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	createCachedResource(t, newCachedResource("e2e-configmaps-again", "", "v1", "configmaps"))
}

// What must never be cached, and what is not a resource, is refused with 422
// saying why.
func TestInvalidCachedResourceIsRejected(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	_, err := cachedResources(t).Create(ctx, newCachedResource("e2e-secrets", "", "v1", "secrets"), metav1.CreateOptions{})
	if msg := invalidCauses(t, err)["spec.resource"]; !strings.Contains(msg, "secrets are never cached") {
		t.Fatalf("secrets: %v, want 422 at spec.resource saying secrets are never cached", err)
	}
	_, err = cachedResources(t).Create(ctx, newCachedResource("e2e-status", "apps", "v1", "deployments/status"), metav1.CreateOptions{})
	if msg := invalidCauses(t, err)["spec.resource"]; !strings.Contains(msg, "subresource") {
		t.Fatalf("a subresource: %v, want 422 at spec.resource", err)
	}
	bad := newCachedResource("e2e-bad", "Apps", "apps/v1", "Deployment")
	bad.Spec.ClusterSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Near"}}}
	causes := invalidCauses(t, func() error {
		_, err := cachedResources(t).Create(ctx, bad, metav1.CreateOptions{})
		return err
	}())
	for _, want := range []string{"spec.group", "spec.version", "spec.resource", "spec.clusterSelector.matchExpressions[0].operator"} {
		if _, ok := causes[want]; !ok {
			t.Errorf("422 does not name %s: %v", want, causes)
		}
	}

	// kubectl shows the reason to a person.
	cmd := env.KubectlCmd(ctx, "hub-admin", "create", "-f", "-")
	cmd.Stdin = strings.NewReader("apiVersion: gateway.kubewharf.io/v1alpha1\nkind: CachedResource\nmetadata:\n  name: e2e-secrets\nspec:\n  version: v1\n  resource: secrets\n")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "spec.resource: Forbidden: secrets are never cached") {
		t.Fatalf("kubectl create of a CachedResource for secrets: %v: %s", err, out)
	}
}

// The gateway writes the status (here of a CachedResource that selects no
// cluster) and follows spec changes; the status endpoint takes the status
// only, by update or by server-side apply, and refuses an impossible one;
// spec writes keep it.
func TestCachedResourceStatus(t *testing.T) {
	ctx := testContext(t, time.Minute)
	client := cachedResources(t)
	cr := newCachedResource("e2e-deployments", "apps", "v1", "deployments")
	cr.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"e2e-status": "none"}}
	createCachedResource(t, cr)
	gatewayWrote := func(generation int64) {
		t.Helper()
		eventually(t, 30*time.Second, func(ctx context.Context) error {
			cur, err := client.Get(ctx, "e2e-deployments", metav1.GetOptions{})
			if err != nil {
				return err
			}
			c := meta.FindStatusCondition(cur.Status.Conditions, gatewayv1alpha1.ConditionReady)
			if st := cur.Status; st.ObservedGeneration != generation || st.SelectedClusters != 0 || c == nil || c.Status != metav1.ConditionTrue ||
				c.Message != "0 of 0 selected clusters synced" {
				return errorf("status %+v, want the gateway's for generation %d", st, generation)
			}
			return nil
		})
		out, _, err := env.Kubectl(ctx, "hub-admin", "get", "cachedresource", "e2e-deployments", "--no-headers")
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(out); len(f) != 9 || strings.Join(f[:8], " ") != "e2e-deployments apps v1 deployments 0 0 0 True" {
			t.Fatalf("row: %q", out)
		}
	}
	gatewayWrote(1)

	now := metav1.NewTime(time.Now().Truncate(time.Second))
	ready := func(status metav1.ConditionStatus, reason, message string) *metav1apply.ConditionApplyConfiguration {
		return metav1apply.Condition().WithType(gatewayv1alpha1.ConditionReady).WithStatus(status).
			WithReason(reason).WithMessage(message).WithLastTransitionTime(now)
	}
	// Server-side apply of the status: an entry no longer applied leaves
	// status.notSynced (each answer is the apply's own; the gateway writes
	// its view again after).
	applied, err := client.ApplyStatus(ctx, applyv1alpha1.CachedResource("e2e-deployments").WithStatus(applyv1alpha1.CachedResourceStatus().
		WithObservedGeneration(1).WithSelectedClusters(3).WithSyncedClusters(1).WithObjects(1000).
		WithConditions(ready(metav1.ConditionFalse, "ClustersNotSynced", "2 of 3 selected clusters not synced")).
		WithNotSynced(applyv1alpha1.NotSyncedCluster().WithCluster("member-c").WithReason("NoCacheCredential"),
			applyv1alpha1.NotSyncedCluster().WithCluster("member-d").WithReason("Forbidden"))),
		metav1.ApplyOptions{FieldManager: "e2e-cache"})
	if err != nil {
		t.Fatal(err)
	}
	if len(applied.Status.NotSynced) != 2 || applied.Generation != 1 {
		t.Fatalf("after applying the status: generation %d status %+v", applied.Generation, applied.Status)
	}
	applied, err = client.ApplyStatus(ctx, applyv1alpha1.CachedResource("e2e-deployments").WithStatus(applyv1alpha1.CachedResourceStatus().
		WithObservedGeneration(1).WithSelectedClusters(3).WithSyncedClusters(2).WithObjects(1300).
		WithConditions(ready(metav1.ConditionFalse, "ClustersNotSynced", "1 of 3 selected clusters not synced")).
		WithNotSynced(applyv1alpha1.NotSyncedCluster().WithCluster("member-d").WithReason("Forbidden"))),
		metav1.ApplyOptions{FieldManager: "e2e-cache"})
	if err != nil {
		t.Fatal(err)
	}
	if len(applied.Status.NotSynced) != 1 || applied.Status.NotSynced[0].Cluster != "member-d" || applied.Status.Objects != 1300 {
		t.Fatalf("after applying the status again: %+v", applied.Status)
	}

	// An update of the status endpoint writes the status only.
	var updated *gatewayv1alpha1.CachedResource
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.Get(ctx, "e2e-deployments", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.Resource = "replicasets" // ignored by the status endpoint
		cur.Status = gatewayv1alpha1.CachedResourceStatus{
			ObservedGeneration: 1,
			Conditions: []metav1.Condition{{Type: gatewayv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Synced",
				Message: "3 of 3 selected clusters synced", LastTransitionTime: now}},
			SelectedClusters: 3, SyncedClusters: 3, Objects: 1234, Bytes: 5 << 20,
		}
		updated, err = client.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if updated.Spec.Resource != "deployments" || updated.Generation != 1 || updated.Status.SyncedClusters != 3 || len(updated.Status.NotSynced) != 0 {
		t.Fatalf("after status update: spec %+v generation %d status %+v", updated.Spec, updated.Generation, updated.Status)
	}

	// A status the API refuses: more synced than selected.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.Get(ctx, "e2e-deployments", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.SyncedClusters = cur.Status.SelectedClusters + 1
		_, err = client.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if _, ok := invalidCauses(t, err)["status.syncedClusters"]; !ok {
		t.Fatalf("synced > selected: %v, want 422 at status.syncedClusters", err)
	}

	// A spec change bumps the generation and keeps the status; a status sent
	// with it is ignored. The gateway follows the new generation.
	var specUpdated *gatewayv1alpha1.CachedResource
	var stored int64
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.Get(ctx, "e2e-deployments", metav1.GetOptions{})
		if err != nil {
			return err
		}
		stored = cur.Status.Objects
		cur.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"e2e-status": "still-none"}}
		cur.Status.Objects = stored + 1
		specUpdated, err = client.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if specUpdated.Generation != 2 || specUpdated.Status.Objects != stored {
		t.Fatalf("after a spec update: generation %d objects %d, want 2 and the stored %d", specUpdated.Generation, specUpdated.Status.Objects, stored)
	}
	gatewayWrote(2)
}

// An UpstreamCluster names the cache's read-only identity in
// spec.clientConfig.cacheSecretRef, validated like secretRef; the gateway
// writes status.caches, and the API refuses duplicate entries in it.
func TestUpstreamClusterCacheFields(t *testing.T) {
	ctx := testContext(t, time.Minute)
	client := upstreamClusters(t)

	bad := newCluster("cache-bad", "https://127.0.0.1:1")
	bad.Spec.ClientConfig.CacheSecretRef = &gatewayv1alpha1.SecretReference{Namespace: "default", Name: "reader"}
	_, err := client.Create(ctx, bad, metav1.CreateOptions{})
	if _, ok := invalidCauses(t, err)["spec.clientConfig.cacheSecretRef.namespace"]; !ok {
		t.Fatalf("cacheSecretRef in another namespace: %v, want 422 at spec.clientConfig.cacheSecretRef.namespace", err)
	}
	bad.Spec.ClientConfig.CacheSecretRef = bad.Spec.ClientConfig.SecretRef.DeepCopy()
	_, err = client.Create(ctx, bad, metav1.CreateOptions{})
	if msg := invalidCauses(t, err)["spec.clientConfig.cacheSecretRef.name"]; !strings.Contains(msg, "other than secretRef") {
		t.Fatalf("cacheSecretRef naming secretRef's Secret: %v, want 422 at spec.clientConfig.cacheSecretRef.name", err)
	}

	uc := newCluster("cache-ok", "https://127.0.0.1:1")
	uc.Spec.ClientConfig.CacheSecretRef = &gatewayv1alpha1.SecretReference{Namespace: harness.GatewayNamespace, Name: "cache-ok-reader"}
	created := createCluster(t, uc)
	if ref := created.Spec.ClientConfig.CacheSecretRef; ref == nil || *ref != *uc.Spec.ClientConfig.CacheSecretRef {
		t.Fatalf("cacheSecretRef stored as %+v", ref)
	}

	// Selected by a CachedResource, the cluster gets an entry saying that
	// its cache Secret is missing; a spec change makes the gateway write the
	// status again (observedGeneration 2), the entry stays.
	cr := newCachedResource("e2e-cache-fields", "", "v1", "endpoints")
	cr.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"e2e-cache-fields": "yes"}}
	createCachedResource(t, cr)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.Get(ctx, "cache-ok", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Labels = map[string]string{"e2e-cache-fields": "yes"}
		_, err = client.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	missingSecret := func(cur *gatewayv1alpha1.UpstreamCluster) error {
		if len(cur.Status.Caches) != 1 || cur.Status.Caches[0].CachedResource != cr.Name || cur.Status.Caches[0].Synced ||
			cur.Status.Caches[0].Reason != "SecretNotFound" || !strings.Contains(cur.Status.Caches[0].Message, "cache-ok-reader") {
			return errorf("status.caches %+v, want SecretNotFound naming cache-ok-reader", cur.Status.Caches)
		}
		return nil
	}
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		cur, err := client.Get(ctx, "cache-ok", metav1.GetOptions{})
		if err != nil {
			return err
		}
		return missingSecret(cur)
	})
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.Get(ctx, "cache-ok", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.Servers[0].Disabled = true
		_, err = client.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		cur, err := client.Get(ctx, "cache-ok", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.Status.ObservedGeneration != 2 {
			return errorf("observedGeneration %d, want the gateway's write for generation 2", cur.Status.ObservedGeneration)
		}
		return missingSecret(cur)
	})

	// Duplicate entries are refused.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.Get(ctx, "cache-ok", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Caches = append(cur.Status.Caches, cur.Status.Caches...)
		_, err = client.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if _, ok := invalidCauses(t, err)["status.caches[1].cachedResource"]; !ok {
		t.Fatalf("duplicate status.caches entry: %v, want 422 at status.caches[1].cachedResource", err)
	}
}
