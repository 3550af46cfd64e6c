package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// memberACluster is an UpstreamCluster for member-a's servers and credential,
// under another name, so that a test can give it its own policies.
func memberACluster(name string) *gatewayv1alpha1.UpstreamCluster {
	var endpoints []string
	for _, s := range env.Members[harness.MemberA].Servers {
		endpoints = append(endpoints, s.URL)
	}
	uc := newCluster(name, endpoints...)
	uc.Spec.ClientConfig.SecretRef.Name = harness.MemberA
	uc.Spec.ClientConfig.CAData = env.Members[harness.MemberA].CAData
	return uc
}

// proxyClient is a client-go client for user on cluster through the hub, with no
// client-side retries: a 429 must reach the test as it is.
func proxyClient(t *testing.T, user, cluster string) *kubernetes.Clientset {
	t.Helper()
	cfg := env.ProxyConfig(user, cluster)
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rawGet GETs path of cluster through the hub as user, without retries.
func rawGet(ctx context.Context, t *testing.T, user, cluster, path string) (*http.Response, []byte) {
	t.Helper()
	cfg := env.ProxyConfig(user, cluster)
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, body, err := tryGet(ctx, client, cfg.Host+path)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// waitUsable waits until the gateway serves cluster.
func waitUsable(t *testing.T, cluster string) {
	t.Helper()
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		resp, body := rawGet(ctx, t, harness.UserAdmin, cluster, "/version")
		if resp.StatusCode != http.StatusOK {
			return errorf("%s: %s", resp.Status, body)
		}
		return nil
	})
}

// auditEvent is what the tests read of a member's audit log entries.
type auditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	ObjectRef *struct {
		Resource string `json:"resource"`
	} `json:"objectRef"`
	User struct {
		Username string `json:"username"`
	} `json:"user"`
	ImpersonatedUser *struct {
		Username string `json:"username"`
	} `json:"impersonatedUser"`
}

// countAudit counts the events of a replica's own audit log that match.
func countAudit(t *testing.T, s *harness.APIServer, match func(*auditEvent) bool) int {
	t.Helper()
	f, err := os.Open(s.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev auditEvent
		if json.Unmarshal(sc.Bytes(), &ev) == nil && match(&ev) {
			n++
		}
	}
	return n
}

// auditCount counts ResponseComplete events in a replica's own audit log that
// match: the member's evidence of which replica served what, for whom.
func auditCount(t *testing.T, s *harness.APIServer, verb, resource, impersonated string) int {
	t.Helper()
	return countAudit(t, s, func(ev *auditEvent) bool {
		return ev.Stage == "ResponseComplete" && ev.Verb == verb && ev.ObjectRef != nil && ev.ObjectRef.Resource == resource &&
			ev.ImpersonatedUser != nil && ev.ImpersonatedUser.Username == impersonated
	})
}

// A dispatch policy sends alice's `list pods` to member-a's second replica only,
// as both replicas' own audit logs show, while her other requests still go to
// both.
func TestDispatchPolicyChoosesTheReplica(t *testing.T) {
	replicas := env.Members[harness.MemberA].Servers
	uc := memberACluster("dispatch-replica")
	uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{
		Name:           "alice-lists-pods",
		Rules:          []gatewayv1alpha1.DispatchPolicyRule{{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"pods"}, Users: []string{"alice"}}},
		UpstreamSubset: []string{replicas[1].URL},
	}}
	createCluster(t, uc)
	waitUsable(t, uc.Name)

	before := [2]int{auditCount(t, replicas[0], "list", "pods", "alice"), auditCount(t, replicas[1], "list", "pods", "alice")}
	beforeCM := [2]int{auditCount(t, replicas[0], "list", "configmaps", "alice"), auditCount(t, replicas[1], "list", "configmaps", "alice")}
	ctx := testContext(t, time.Minute)
	c := proxyClient(t, harness.UserAlice, uc.Name)
	const n = 20
	for i := 0; i < n; i++ {
		if _, err := c.CoreV1().Pods(harness.AliceNamespace).List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().ConfigMaps(harness.AliceNamespace).List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, func(context.Context) error {
		first := auditCount(t, replicas[0], "list", "pods", "alice") - before[0]
		second := auditCount(t, replicas[1], "list", "pods", "alice") - before[1]
		if first != 0 || second != n {
			return errorf("list pods served by replica 1: %d, replica 2: %d; want 0 and %d", first, second, n)
		}
		cm1 := auditCount(t, replicas[0], "list", "configmaps", "alice") - beforeCM[0]
		cm2 := auditCount(t, replicas[1], "list", "configmaps", "alice") - beforeCM[1]
		if cm1+cm2 != n || cm1 == 0 || cm2 == 0 {
			return errorf("list configmaps (no policy) served by replica 1: %d, replica 2: %d; want both, %d in all", cm1, cm2, n)
		}
		return nil
	})
}

// everything is a pair of rules matching every request.
var everything = []gatewayv1alpha1.DispatchPolicyRule{
	{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
	{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
}

// A token bucket of 5 qps and burst 5 lets about 5 of a burst of 30 through; the
// others get 429 with Retry-After and a Status naming the cluster and schema.
// A second later requests pass again.
func TestTokenBucket(t *testing.T) {
	uc := memberACluster("token-bucket")
	uc.Spec.FlowControl = &gatewayv1alpha1.FlowControl{FlowControlSchemas: []gatewayv1alpha1.FlowControlSchema{
		{Name: "five-per-second", TokenBucket: &gatewayv1alpha1.TokenBucketFlowControl{QPS: resource.MustParse("5"), Burst: 5}},
	}}
	// Resource requests only, so that waitUsable's /version does not spend tokens.
	uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{Rules: everything[:1], FlowControlSchemaName: "five-per-second"}}
	createCluster(t, uc)
	waitUsable(t, uc.Name)

	ctx := testContext(t, time.Minute)
	var mu sync.Mutex
	codes := map[int]int{}
	var rejected []*http.Response
	var rejectedBodies [][]byte
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < 30; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, body := rawGet(ctx, t, harness.UserAlice, uc.Name, "/api/v1/namespaces/alice/configmaps")
			mu.Lock()
			defer mu.Unlock()
			codes[resp.StatusCode]++
			if resp.StatusCode == http.StatusTooManyRequests {
				rejected = append(rejected, resp)
				rejectedBodies = append(rejectedBodies, body)
			}
		}()
	}
	close(start)
	wg.Wait()
	if ok := codes[http.StatusOK]; ok < 5 || ok > 8 || ok+codes[http.StatusTooManyRequests] != 30 {
		t.Fatalf("burst of 30: %v, want about 5 OK and the rest 429", codes)
	}
	var status metav1.Status
	if err := json.Unmarshal(rejectedBodies[0], &status); err != nil {
		t.Fatalf("429 body is not a Status: %q", rejectedBodies[0])
	}
	if rejected[0].Header.Get("Retry-After") == "" || !strings.Contains(status.Message, `"token-bucket"`) || !strings.Contains(status.Message, "five-per-second") {
		t.Fatalf("429 without Retry-After or naming: %v %+v", rejected[0].Header, status)
	}
	eventually(t, 5*time.Second, func(ctx context.Context) error {
		if resp, _ := rawGet(ctx, t, harness.UserAlice, uc.Name, "/api/v1/namespaces/alice/configmaps"); resp.StatusCode != http.StatusOK {
			return errorf("%s", resp.Status)
		}
		return nil
	})
}

// With maxRequestsInflight 2 counting long-running requests, two open watches
// hold both slots: the third request gets 429 until one watch ends.
func TestMaxRequestsInflight(t *testing.T) {
	uc := memberACluster("max-inflight")
	uc.Spec.FlowControl = &gatewayv1alpha1.FlowControl{FlowControlSchemas: []gatewayv1alpha1.FlowControlSchema{
		{Name: "two-at-a-time", MaxRequestsInflight: &gatewayv1alpha1.MaxRequestsInflightFlowControl{Max: 2, CountLongRunning: true}},
	}}
	uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{Rules: everything[:1], FlowControlSchemaName: "two-at-a-time"}}
	createCluster(t, uc)
	waitUsable(t, uc.Name)

	ctx := testContext(t, time.Minute)
	c := proxyClient(t, harness.UserAlice, uc.Name)
	var watches []func()
	for i := 0; i < 2; i++ {
		w, err := c.CoreV1().ConfigMaps(harness.AliceNamespace).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		watches = append(watches, w.Stop)
	}
	resp, body := rawGet(ctx, t, harness.UserAlice, uc.Name, "/api/v1/namespaces/alice/configmaps")
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "two-at-a-time") {
		t.Fatalf("third request with two watches open: %s %s", resp.Status, body)
	}
	watches[0]()
	eventually(t, 10*time.Second, func(ctx context.Context) error {
		if resp, body := rawGet(ctx, t, harness.UserAlice, uc.Name, "/api/v1/namespaces/alice/configmaps"); resp.StatusCode != http.StatusOK {
			return errorf("%s %s", resp.Status, body)
		}
		return nil
	})
	watches[1]()
}

// The emergency brake of docs/dispatch.md: every request is refused except node
// heartbeats (leases in kube-node-lease, nodes/status), then lifted, all without
// restarting anything.
func TestEmergencyBrake(t *testing.T) {
	ctx := testContext(t, time.Minute)
	uc := memberACluster("brake")
	createCluster(t, uc)
	waitUsable(t, uc.Name)
	admin := proxyClient(t, harness.UserAdmin, uc.Name)
	// The stand-in node's heartbeat lease, as a kubelet would hold it.
	heartbeat := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: harness.StandInNode, Namespace: "kube-node-lease"}}
	if _, err := memberA(t).CoordinationV1().Leases("kube-node-lease").Create(ctx, heartbeat, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	brake := []gatewayv1alpha1.DispatchPolicy{
		{
			Name: "node-heartbeats",
			Rules: []gatewayv1alpha1.DispatchPolicyRule{
				{Verbs: []string{"*"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Namespaces: []string{"kube-node-lease"}},
				{Verbs: []string{"*"}, APIGroups: []string{""}, Resources: []string{"nodes/status"}},
			},
			FlowControlSchemaName: "exempt",
		},
		{Name: "brake", Rules: everything, FlowControlSchemaName: "frozen"},
	}
	schemas := &gatewayv1alpha1.FlowControl{FlowControlSchemas: []gatewayv1alpha1.FlowControlSchema{
		{Name: "exempt", Exempt: &gatewayv1alpha1.ExemptFlowControl{}},
		{Name: "frozen", MaxRequestsInflight: &gatewayv1alpha1.MaxRequestsInflightFlowControl{Max: 0}},
	}}
	setPolicies(t, uc.Name, brake, schemas)
	eventually(t, 10*time.Second, func(ctx context.Context) error {
		resp, _ := rawGet(ctx, t, harness.UserAdmin, uc.Name, "/api/v1/namespaces/alice/configmaps")
		if resp.StatusCode != http.StatusTooManyRequests {
			return errorf("with the brake on: %s", resp.Status)
		}
		return nil
	})
	if resp, body := rawGet(ctx, t, harness.UserAdmin, uc.Name, "/version"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("non-resource request with the brake on: %s %s", resp.Status, body)
	}
	// Heartbeats still pass: renew the node's lease and update its status.
	lease, err := admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, harness.StandInNode, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("lease get with the brake on: %v", err)
	}
	now := metav1.NewMicroTime(time.Now())
	lease.Spec.RenewTime = &now
	if _, err := admin.CoordinationV1().Leases("kube-node-lease").Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("lease renewal with the brake on: %v", err)
	}
	if err := updateNodeStatus(ctx, admin); err != nil {
		t.Fatalf("node status with the brake on: %v", err)
	}

	setPolicies(t, uc.Name, nil, nil)
	eventually(t, 10*time.Second, func(ctx context.Context) error {
		if resp, _ := rawGet(ctx, t, harness.UserAdmin, uc.Name, "/api/v1/namespaces/alice/configmaps"); resp.StatusCode != http.StatusOK {
			return errorf("after lifting the brake: %s", resp.Status)
		}
		return nil
	})
}

// updateNodeStatus patches the stand-in node's status as a kubelet heartbeat
// does: a status-only write, which the brake lets through.
func updateNodeStatus(ctx context.Context, c *kubernetes.Clientset) error {
	patch := []byte(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","lastHeartbeatTime":"` +
		time.Now().UTC().Format(time.RFC3339) + `"}]}}`)
	_, err := c.CoreV1().Nodes().Patch(ctx, harness.StandInNode, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// setPolicies replaces the dispatch policies and flow control of cluster.
func setPolicies(t *testing.T, cluster string, policies []gatewayv1alpha1.DispatchPolicy, fc *gatewayv1alpha1.FlowControl) {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	// The gateway's status writes change the object too: retry conflicts.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		uc, err := upstreamClusters(t).Get(ctx, cluster, metav1.GetOptions{})
		if err != nil {
			return err
		}
		uc.Spec.DispatchPolicies, uc.Spec.FlowControl = policies, fc
		_, err = upstreamClusters(t).Update(ctx, uc, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// An invalid policy is refused with 422 and the path of the bad field.
func TestInvalidPolicyIsRejected(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	uc := memberACluster("invalid-policy")
	uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{
		Rules:                 []gatewayv1alpha1.DispatchPolicyRule{{Verbs: []string{"get", "-list"}, APIGroups: []string{""}, Resources: []string{"pods"}}},
		FlowControlSchemaName: "missing",
	}}
	_, err := upstreamClusters(t).Create(ctx, uc, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("got %v, want 422", err)
	}
	fields := map[string]bool{}
	for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
		fields[c.Field] = true
	}
	for _, want := range []string{"spec.dispatchPolicies[0].rules[0].verbs", "spec.dispatchPolicies[0].flowControlSchemaName"} {
		if !fields[want] {
			t.Errorf("422 does not name %s: %v", want, err)
		}
	}
}

// A proxied request carries the hub's audit ID to the member, whose audit log
// names it alike, and its response names that one ID once: the hub's
// aggregator sets Audit-ID and Cache-Control on the response it passes on, so
// the gateway sends neither its own nor the member's.
func TestAuditIDReachesTheMember(t *testing.T) {
	ctx := testContext(t, time.Minute)
	resp, body := rawGet(ctx, t, harness.UserAdmin, harness.MemberB, "/api/v1/namespaces/default/configmaps/audit-id-e2e")
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET of a ConfigMap that does not exist: %s %s", resp.Status, body)
	}
	ids := resp.Header.Values("Audit-Id")
	if len(ids) != 1 {
		t.Fatalf("Audit-Id %q: want the hub's, once", ids)
	}
	if cc := resp.Header.Values("Cache-Control"); len(cc) != 1 {
		t.Errorf("Cache-Control %q: want the hub's, once", cc)
	}
	waitAudited(t, ids[0])

	// Straight to the gateway with the front-proxy certificate and an audit
	// ID, as the hub's aggregator sends them: the answer leaves both headers
	// to the hub, and the member logs that ID.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.GatewayURL+harness.ProxyPath(harness.MemberB)+"/api/v1/namespaces/default/configmaps/audit-id-e2e", nil)
	if err != nil {
		t.Fatal(err)
	}
	sent := "audit-id-e2e-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	req.Header = http.Header{"X-Remote-User": {harness.UserAdmin}, "X-Remote-Group": {"system:masters"}, "Audit-Id": {sent}}
	c := gatewayClient(t, true)
	defer c.CloseIdleConnections()
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET through the gateway alone: %s", resp.Status)
	}
	if ids = resp.Header.Values("Audit-Id"); len(ids) != 0 {
		t.Errorf("as the hub's front proxy: Audit-Id %q, want none (the hub sets its own)", ids)
	}
	if cc := resp.Header.Values("Cache-Control"); len(cc) != 0 {
		t.Errorf("as the hub's front proxy: Cache-Control %q, want none (the hub sets its own)", cc)
	}
	waitAudited(t, sent)
}

// waitAudited waits until member-b's audit log names audit ID id.
func waitAudited(t *testing.T, id string) {
	t.Helper()
	server := env.Members[harness.MemberB].Servers[0]
	eventually(t, 30*time.Second, func(context.Context) error {
		if !auditMentions(t, server, `"auditID":"`+id+`"`) {
			return errorf("member-b has not logged audit ID %s", id)
		}
		return nil
	})
}

// The emergency brake of docs/dispatch.md pastes: its YAML, applied with
// kubectl apply --server-side as the page says (to a cluster of this test's
// own), puts the brake on; a fractional qps applies the same way.
func TestEmergencyBrakeFromTheDocs(t *testing.T) {
	ctx := testContext(t, time.Minute)
	uc := memberACluster("brake-docs")
	createCluster(t, uc)
	waitUsable(t, uc.Name)

	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "dispatch.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(page), "### Emergency brake")
	_, block, ok := strings.Cut(section, "```yaml\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 || !strings.Contains(block, "name: member-a\n") {
		t.Fatalf("docs/dispatch.md: no YAML block naming member-a under \"Emergency brake\"")
	}
	apply := func(manifest string) {
		t.Helper()
		// Until the hub has aggregated the gateway's OpenAPI, kubectl cannot
		// tell that the server validates, and checks the partial object
		// itself against the schema's required fields.
		eventually(t, 30*time.Second, func(ctx context.Context) error {
			cmd := env.KubectlCmd(ctx, "hub-admin", "apply", "--server-side", "-f", "-")
			cmd.Stdin = strings.NewReader(manifest)
			if out, err := cmd.CombinedOutput(); err != nil {
				return errorf("kubectl apply --server-side: %v: %s", err, out)
			}
			return nil
		})
	}
	apply(strings.Replace(block, "name: member-a\n", "name: "+uc.Name+"\n", 1))
	eventually(t, 10*time.Second, func(ctx context.Context) error {
		if resp, _ := rawGet(ctx, t, harness.UserAdmin, uc.Name, "/api/v1/namespaces/alice/configmaps"); resp.StatusCode != http.StatusTooManyRequests {
			return errorf("with the brake of the docs on: %s", resp.Status)
		}
		return nil
	})

	apply(sprintf(`apiVersion: gateway.kubewharf.io/v1alpha1
kind: UpstreamCluster
metadata:
  name: %s
spec:
  flowControl:
    flowControlSchemas:
    - name: slow
      tokenBucket: {qps: 0.2, burst: 1}
`, uc.Name))
	got, err := upstreamClusters(t).Get(ctx, uc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var slow *gatewayv1alpha1.TokenBucketFlowControl
	for _, s := range got.Spec.FlowControl.FlowControlSchemas {
		if s.Name == "slow" {
			slow = s.TokenBucket
		}
	}
	if slow == nil || slow.QPS.MilliValue() != 200 {
		t.Errorf("qps 0.2 read back as %+v, want 200m", slow)
	}
}
