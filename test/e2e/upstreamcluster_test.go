package e2e

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/kubewharf/kube-gateway/apis/client/clientset/versioned"
	gatewayclient "github.com/kubewharf/kube-gateway/apis/client/clientset/versioned/typed/gateway/v1alpha1"
	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// upstreamClusters is the hub admin's client for UpstreamClusters: the
// project's generated clientset.
func upstreamClusters(t *testing.T) gatewayclient.UpstreamClusterInterface {
	t.Helper()
	c, err := versioned.NewForConfig(env.HubConfig(harness.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	return c.GatewayV1alpha1().UpstreamClusters()
}

func newCluster(name string, endpoints ...string) *gatewayv1alpha1.UpstreamCluster {
	uc := &gatewayv1alpha1.UpstreamCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, e := range endpoints {
		uc.Spec.Servers = append(uc.Spec.Servers, gatewayv1alpha1.UpstreamServer{Endpoint: e})
	}
	uc.Spec.ClientConfig.SecretRef = gatewayv1alpha1.SecretReference{Namespace: harness.GatewayNamespace, Name: harness.MemberB}
	return uc
}

// createCluster creates uc on the hub and deletes it when the test ends.
func createCluster(t *testing.T, uc *gatewayv1alpha1.UpstreamCluster) *gatewayv1alpha1.UpstreamCluster {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	created, err := upstreamClusters(t).Create(ctx, uc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = upstreamClusters(t).Delete(context.Background(), uc.Name, metav1.DeleteOptions{})
	})
	return created
}

// Invalid UpstreamClusters are refused with 422 and the paths of the bad fields.
func TestInvalidUpstreamClusterIsRejected(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	uc := newCluster("invalid", "http://127.0.0.1:6443", "https://127.0.0.1:6443/prefix", "https://127.0.0.1:6443", "https://127.0.0.1:6443")
	uc.Spec.ClientConfig.SecretRef.Namespace = "default"
	_, err := upstreamClusters(t).Create(ctx, uc, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("got %v, want 422 Invalid", err)
	}
	status := err.(apierrors.APIStatus).Status()
	if status.Code != http.StatusUnprocessableEntity {
		t.Fatalf("code %d, want 422", status.Code)
	}
	fields := map[string]bool{}
	for _, c := range status.Details.Causes {
		fields[c.Field] = true
	}
	for _, want := range []string{"spec.servers[0].endpoint", "spec.servers[1].endpoint", "spec.servers[3].endpoint", "spec.clientConfig.secretRef.namespace"} {
		if !fields[want] {
			t.Errorf("422 does not name field %s; causes: %+v", want, status.Details.Causes)
		}
	}
	if fields["spec.servers[2].endpoint"] {
		t.Errorf("the valid first occurrence of a server was reported: %+v", status.Details.Causes)
	}

	// kubectl shows the same to a person.
	cmd := env.KubectlCmd(ctx, "hub-admin", "create", "-f", "-")
	cmd.Stdin = strings.NewReader("apiVersion: gateway.kubewharf.io/v1alpha1\nkind: UpstreamCluster\nmetadata:\n  name: invalid\nspec:\n  servers: []\n  clientConfig:\n    secretRef: {namespace: kube-gateway, name: member-b}\n")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "spec.servers: Required value") {
		t.Fatalf("kubectl create of a cluster without servers: %v: %s", err, out)
	}
}

// Full CRUD and watch through the hub; the generation follows spec changes only,
// and spec and status are written through their own endpoints.
func TestUpstreamClusterLifecycle(t *testing.T) {
	ctx := testContext(t, time.Minute)
	client := upstreamClusters(t)
	w, err := client.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=lifecycle"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	created := createCluster(t, newCluster("lifecycle", "https://127.0.0.1:1"))
	if created.Generation != 1 || created.Spec.HealthCheck == nil || created.Spec.HealthCheck.Path != "/readyz" {
		t.Fatalf("created: generation %d, healthCheck %+v (want generation 1 and defaults)", created.Generation, created.Spec.HealthCheck)
	}
	expectEvent(t, w, watch.Added, 1)

	// A spec change bumps the generation; a status sent with it is ignored. The
	// gateway writes status concurrently, so read-modify-write with retries.
	var updated *gatewayv1alpha1.UpstreamCluster
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		uc, err := client.Get(ctx, "lifecycle", metav1.GetOptions{})
		if err != nil {
			return err
		}
		uc.Spec.Servers[0].Disabled = true
		uc.Status.ObservedGeneration = 42
		updated, err = client.Update(ctx, uc, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if updated.Generation != 2 || updated.Status.ObservedGeneration == 42 {
		t.Fatalf("after spec update: generation %d observedGeneration %d", updated.Generation, updated.Status.ObservedGeneration)
	}
	expectEvent(t, w, watch.Modified, 2)

	// The status endpoint writes the status only.
	var statusUpdated *gatewayv1alpha1.UpstreamCluster
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		uc, err := client.Get(ctx, "lifecycle", metav1.GetOptions{})
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
	if statusUpdated.Generation != 2 || statusUpdated.Status.ObservedGeneration != 7 || !statusUpdated.Spec.Servers[0].Disabled {
		t.Fatalf("after status update: generation %d observedGeneration %d disabled %v", statusUpdated.Generation, statusUpdated.Status.ObservedGeneration, statusUpdated.Spec.Servers[0].Disabled)
	}

	list, err := client.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, item := range list.Items {
		names[item.Name] = true
	}
	if !names["lifecycle"] || !names[harness.MemberA] || !names[harness.MemberB] {
		t.Fatalf("list: %v", names)
	}

	if err := client.Delete(ctx, "lifecycle", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, w, watch.Deleted, 2)
	if _, err := client.Get(ctx, "lifecycle", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: %v", err)
	}
}

// expectEvent waits for an event of type typ for an object at generation,
// skipping others (the gateway's own status writes are MODIFIED events too).
func expectEvent(t *testing.T, w watch.Interface, typ watch.EventType, generation int64) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	var seen []string
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch ended; saw %v", seen)
			}
			uc, isObj := ev.Object.(*gatewayv1alpha1.UpstreamCluster)
			if isObj && ev.Type == typ && uc.Generation == generation {
				return
			}
			seen = append(seen, string(ev.Type))
		case <-deadline:
			t.Fatalf("no %s event at generation %d; saw %v", typ, generation, seen)
		}
	}
}

// kubectl get shows useful columns, knows the short name, explains the fields,
// and server-side apply works on UpstreamClusters.
func TestKubectlOnUpstreamClusters(t *testing.T) {
	ctx := testContext(t, time.Minute)
	out, _, err := env.Kubectl(ctx, "hub-admin", "get", "upstreamclusters")
	if err != nil {
		t.Fatal(err)
	}
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	if strings.Join(header, " ") != "NAME SERVERS HEALTHY READY AGE" {
		t.Fatalf("columns: %q", header)
	}
	// The status the gateway writes fills the health columns.
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		out, _, err := env.Kubectl(ctx, "hub-admin", "get", "uc", harness.MemberA, "--no-headers", "-o", "wide")
		if err != nil {
			return err
		}
		if f := strings.Fields(out); len(f) < 6 || f[0] != harness.MemberA || f[1] != "2" || f[2] != "2/2" || f[3] != "True" || strings.Count(f[5], "https://") != 2 {
			return errorf("member-a row: %q, want 2 servers, 2/2 healthy, Ready True", out)
		}
		return nil
	})

	// The hub loads the gateway's OpenAPI in the background, after the
	// APIService is Available.
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		out, _, err := env.Kubectl(ctx, "hub-admin", "explain", "upstreamclusters.spec.servers")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "endpoint") || !strings.Contains(out, "https URL of the apiserver") {
			return errorf("kubectl explain lacks the field docs:\n%s", out)
		}
		return nil
	})

	manifest := `apiVersion: gateway.kubewharf.io/v1alpha1
kind: UpstreamCluster
metadata:
  name: applied
spec:
  servers:
  - endpoint: https://127.0.0.1:1
%s  clientConfig:
    secretRef: {namespace: kube-gateway, name: member-b}
`
	apply := func(extra string) {
		t.Helper()
		cmd := env.KubectlCmd(ctx, "hub-admin", "apply", "--server-side", "--field-manager=e2e", "-f", "-")
		cmd.Stdin = strings.NewReader(sprintf(manifest, extra))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl apply --server-side: %v\n%s", err, out)
		}
	}
	// A LIST shows each version once applied: listed objects' JSON is kept
	// between LISTs, by resourceVersion.
	listedServers := func() int {
		t.Helper()
		list, err := upstreamClusters(t).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, uc := range list.Items {
			if uc.Name == "applied" {
				return len(uc.Spec.Servers)
			}
		}
		t.Fatalf("applied is not in the list")
		return 0
	}
	apply("")
	t.Cleanup(func() { _ = upstreamClusters(t).Delete(context.Background(), "applied", metav1.DeleteOptions{}) })
	if n := listedServers(); n != 1 {
		t.Fatalf("listed after the first apply: %d servers, want 1", n)
	}
	apply("  - endpoint: https://127.0.0.1:2\n")
	if n := listedServers(); n != 2 {
		t.Fatalf("listed after the second apply: %d servers, want 2", n)
	}
	uc, err := upstreamClusters(t).Get(ctx, "applied", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(uc.Spec.Servers) != 2 || uc.Generation != 2 || !managedBy(uc.ManagedFields, "e2e", metav1.ManagedFieldsOperationApply) {
		t.Fatalf("after two applies: servers %v generation %d managedFields %+v", uc.Spec.Servers, uc.Generation, uc.ManagedFields)
	}
}

// proxyStatus GETs path through the hub as admin and returns the Status the
// gateway or the hub answered with.
func proxyStatus(ctx context.Context, t *testing.T, cluster, path string) (metav1.Status, int) {
	t.Helper()
	c, err := kubernetes.NewForConfig(env.HubConfig(harness.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	var code int
	// No retries: client-go would retry a 503 with Retry-After on its own.
	body, _ := c.CoreV1().RESTClient().Get().AbsPath(harness.ProxyPath(cluster) + path).MaxRetries(0).Do(ctx).StatusCode(&code).Raw()
	var status metav1.Status
	_ = json.Unmarshal(body, &status)
	return status, code
}

// Unknown clusters are 404; a cluster whose servers cannot be reached, or whose
// credential Secret is missing, is 503 with a Status that says which and why.
func TestProxyErrors(t *testing.T) {
	ctx := testContext(t, time.Minute)
	if status, code := proxyStatus(ctx, t, "no-such-cluster", "/version"); code != http.StatusNotFound || status.Reason != metav1.StatusReasonNotFound {
		t.Fatalf("unknown cluster: %d %+v", code, status)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	createCluster(t, newCluster("unreachable", "https://127.0.0.1:"+closedPort))
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		status, code := proxyStatus(ctx, t, "unreachable", "/version")
		if code != http.StatusServiceUnavailable || !strings.Contains(status.Message, `upstream cluster "unreachable"`) ||
			!strings.Contains(status.Message, "could not be reached") {
			return errorf("got %d %q", code, status.Message)
		}
		if status.Details == nil || status.Details.RetryAfterSeconds <= 0 {
			return errorf("no Retry-After in %+v", status.Details)
		}
		return nil
	})

	noSecret := newCluster("no-secret", "https://127.0.0.1:"+closedPort)
	noSecret.Spec.ClientConfig.SecretRef.Name = "does-not-exist"
	createCluster(t, noSecret)
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		status, code := proxyStatus(ctx, t, "no-secret", "/version")
		if code != http.StatusServiceUnavailable || !strings.Contains(status.Message, "kube-gateway/does-not-exist was not found") {
			return errorf("got %d %q", code, status.Message)
		}
		return nil
	})
}

// The OpenAPI the hub aggregates from the gateway names UpstreamCluster with the
// served group-version-kind only: clients map schemas to kinds by it.
func TestOpenAPINamesServedVersionOnly(t *testing.T) {
	name := gatewayv1alpha1.UpstreamCluster{}.OpenAPIModelName()
	want := []map[string]string{{"group": gatewayv1alpha1.GroupName, "version": gatewayv1alpha1.Version, "kind": "UpstreamCluster"}}
	for _, path := range []string{"/openapi/v3/apis/gateway.kubewharf.io/v1alpha1", "/openapi/v2"} {
		// The hub's aggregator fetches the gateway's documents in the background.
		eventually(t, time.Minute, func(ctx context.Context) error {
			out, _, err := env.Kubectl(ctx, "hub-admin", "get", "--raw", path)
			if err != nil {
				return err
			}
			var doc struct {
				Definitions map[string]map[string]json.RawMessage `json:"definitions"` // v2
				Components  struct {
					Schemas map[string]map[string]json.RawMessage `json:"schemas"`
				} `json:"components"` // v3
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				return err
			}
			schemas := doc.Definitions
			if schemas == nil {
				schemas = doc.Components.Schemas
			}
			s, ok := schemas[name]
			if !ok {
				return errorf("%s has no schema %s yet", path, name)
			}
			var gvks []map[string]string
			if err := json.Unmarshal(s["x-kubernetes-group-version-kind"], &gvks); err != nil {
				return errorf("%s: %s: x-kubernetes-group-version-kind: %v", path, name, err)
			}
			if !reflect.DeepEqual(gvks, want) {
				return errorf("%s: %s x-kubernetes-group-version-kind = %v, want %v", path, name, gvks, want)
			}
			return nil
		})
	}
}

// A member whose readiness check fails can often still answer. When no server
// of a cluster is healthy the gateway forwards anyway: what the member serves
// reaches the client, while status keeps saying the server is unhealthy.
func TestForwardsWhenNoServerIsHealthy(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	uc := newCluster("no-healthy-server", env.Members[harness.MemberB].Servers[0].URL)
	// A path the member does not serve: every probe fails with 404.
	uc.Spec.HealthCheck = &gatewayv1alpha1.HealthCheck{Path: "/no-such-health-path", IntervalSeconds: 2, TimeoutSeconds: 1,
		UnhealthyThreshold: 1, HealthyThreshold: 1}
	createCluster(t, uc)
	unhealthy := func(ctx context.Context) error {
		got, err := upstreamClusters(t).Get(ctx, uc.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(got.Status.Servers) != 1 || healthyString(got.Status.Servers[0].Healthy) != "false" {
			return errorf("servers %+v, want the one server unhealthy", got.Status.Servers)
		}
		if ready := meta.FindStatusCondition(got.Status.Conditions, gatewayv1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionFalse {
			return errorf("Ready %+v, want False", ready)
		}
		return nil
	}
	eventually(t, time.Minute, unhealthy)

	out, stderr, err := env.Kubectl(ctx, "hub-admin", "get", "--raw", harness.ProxyPath(uc.Name)+"/version")
	if err != nil || !strings.Contains(out, "gitVersion") {
		t.Fatalf("/version of a member whose readiness check fails: %q %q %v, want the member's answer", out, stderr, err)
	}
	if err := unhealthy(ctx); err != nil {
		t.Fatalf("after a request the member answered: %v", err)
	}
}

// Status claims only what was checked: a server that never answered is not
// healthy (its health is unknown until a failure streak or an answer), and a
// server that answered says so.
func TestStatusSaysWhatWasChecked(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	// A listener that never accepts: connections open (the kernel's
	// backlog takes them) and no TLS handshake is ever answered, so each
	// probe times out. A refused connection would be a verdict of its own.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	silent := "https://" + l.Addr().String()

	never := newCluster("never-answered", silent)
	// One failure of three: the health stays unknown for the whole test.
	never.Spec.HealthCheck = &gatewayv1alpha1.HealthCheck{IntervalSeconds: 600, TimeoutSeconds: 2, UnhealthyThreshold: 3, HealthyThreshold: 1}
	never = createCluster(t, never)
	answers := createCluster(t, newCluster("answered", env.Members[harness.MemberB].Servers[0].URL))

	eventually(t, time.Minute, func(ctx context.Context) error {
		got, err := upstreamClusters(t).Get(ctx, never.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Status.ObservedGeneration != got.Generation || len(got.Status.Servers) != 1 {
			return errorf("status not written yet: %+v", got.Status)
		}
		if s := got.Status.Servers[0]; s.Healthy != nil || s.Reason != "NotChecked" {
			return errorf("server that never answered: healthy=%s reason %s, want unset and NotChecked", healthyString(s.Healthy), s.Reason)
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, gatewayv1alpha1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionUnknown || ready.Reason != "NotChecked" {
			return errorf("Ready %+v, want Unknown NotChecked", ready)
		}
		return nil
	})
	eventually(t, time.Minute, func(ctx context.Context) error {
		got, err := upstreamClusters(t).Get(ctx, answers.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(got.Status.Servers) != 1 || healthyString(got.Status.Servers[0].Healthy) != "true" || got.Status.Servers[0].Reason != "ProbeSucceeded" {
			return errorf("servers %+v, want the one server healthy with reason ProbeSucceeded", got.Status.Servers)
		}
		if ready := meta.FindStatusCondition(got.Status.Conditions, gatewayv1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionTrue {
			return errorf("Ready %+v, want True", ready)
		}
		return nil
	})
	// What kubectl shows: nothing healthy, readiness unknown.
	out, stderr, err := env.Kubectl(ctx, "hub-admin", "get", "upstreamcluster", never.Name, "--no-headers")
	if f := strings.Fields(out); err != nil || len(f) < 4 || f[2] != "0/1" || f[3] != "Unknown" {
		t.Fatalf("kubectl get: %q %q %v, want HEALTHY 0/1 and READY Unknown", out, stderr, err)
	}
	// The cluster still takes requests meanwhile: the member's own failure
	// reaches the client, not a claim that no server is healthy.
	status, code := proxyStatus(ctx, t, never.Name, "/version")
	if code != http.StatusBadGateway && code != http.StatusServiceUnavailable || !strings.Contains(status.Message, "TLS handshake timeout") {
		t.Errorf("request to a server that never answered: %d %q, want the connection failure", code, status.Message)
	}
}

// The credential Secret deleted: 503 naming the cluster and the Secret; put
// back: traffic resumes, without a restart.
func TestCredentialSecretDeletedAndRestored(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	secrets := hubAdmin(t).CoreV1().Secrets(harness.GatewayNamespace)
	source, err := secrets.Get(ctx, harness.MemberB, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "restorable"}, Data: source.Data}
	if _, err := secrets.Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = secrets.Delete(context.Background(), secret.Name, metav1.DeleteOptions{}) })
	uc := newCluster("restorable", env.Members[harness.MemberB].Servers[0].URL)
	uc.Spec.ClientConfig.SecretRef.Name = secret.Name
	createCluster(t, uc)
	served := func(ctx context.Context) error {
		out, stderr, err := env.Kubectl(ctx, "hub-admin", "get", "--raw", harness.ProxyPath(uc.Name)+"/version")
		if err != nil || !strings.Contains(out, "gitVersion") {
			return errorf("/version: %q %q %v", out, stderr, err)
		}
		return nil
	}
	eventually(t, time.Minute, served)

	if err := secrets.Delete(ctx, secret.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func(ctx context.Context) error {
		status, code := proxyStatus(ctx, t, uc.Name, "/version")
		if code != http.StatusServiceUnavailable || !strings.Contains(status.Message, `upstream cluster "restorable"`) ||
			!strings.Contains(status.Message, harness.GatewayNamespace+"/restorable was not found") {
			return errorf("after deleting the Secret: %d %q", code, status.Message)
		}
		return nil
	})

	if _, err := secrets.Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, served)
}

// A dispatch rule naming a resource the member does not serve (the singular
// "namespace") is valid, but never matches: the gateway reads the member's
// discovery and says so in a condition and an Event; fixed, the condition
// turns True.
func TestDispatchRulesNamingUnservedResources(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	uc := newCluster("unserved-resources", env.Members[harness.MemberB].Servers[0].URL)
	uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{Name: "namespaces", Rules: []gatewayv1alpha1.DispatchPolicyRule{
		{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"namespace", "pods"}},
	}}}
	// Created through a client that keeps the API's warnings: the singular is
	// warned about at once, as kubectl would print it.
	cfg := env.HubConfig(harness.UserAdmin)
	warnings := &warningCollector{}
	cfg.WarningHandler = warnings
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.GatewayV1alpha1().UpstreamClusters().Create(ctx, uc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = upstreamClusters(t).Delete(context.Background(), uc.Name, metav1.DeleteOptions{}) })
	if want := `spec.dispatchPolicies[0].rules[0].resources[0]: "namespace" is a singular`; !slices.ContainsFunc(warnings.get(), func(w string) bool { return strings.HasPrefix(w, want) }) {
		t.Errorf("warnings %q, want one starting with %q", warnings.get(), want)
	}
	condition := func(status metav1.ConditionStatus, message string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			got, err := upstreamClusters(t).Get(ctx, uc.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			c := meta.FindStatusCondition(got.Status.Conditions, gatewayv1alpha1.ConditionDispatchResourcesServed)
			if c == nil || c.Status != status || !strings.Contains(c.Message, message) || c.ObservedGeneration != got.Generation {
				return errorf("%s condition %+v, want %s naming %q", gatewayv1alpha1.ConditionDispatchResourcesServed, c, status, message)
			}
			return nil
		}
	}
	eventually(t, time.Minute, condition(metav1.ConditionFalse, `dispatch policy "namespaces" rule 0: resource "namespace" of API group ""`))
	waitDescribed(t, uc.Name, "Warning", "UnservedResources", `resource "namespace"`)

	policies := uc.Spec.DispatchPolicies
	policies[0].Rules[0].Resources = []string{"namespaces", "pods"}
	setPolicies(t, uc.Name, policies, nil)
	eventually(t, time.Minute, condition(metav1.ConditionTrue, "serves every"))
}

// warningCollector keeps the warnings a client receives.
type warningCollector struct {
	mu       sync.Mutex
	warnings []string
}

func (c *warningCollector) HandleWarningHeader(_ int, _ string, text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.warnings = append(c.warnings, text)
}

func (c *warningCollector) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.warnings)
}
