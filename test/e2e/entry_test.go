package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewharf/kube-gateway/test/harness"
)

// The way in. By default the gateway serves gateway.kubewharf.io only to what
// comes through the hub (its front proxy), where the hub's priority and
// fairness and audit apply; hub credentials sent straight to the gateway get
// 401 naming --direct-access. With --direct-access the gateway checks them
// with the hub itself and audits them with its own policy.

const directAccessFlag = "--direct-access"

// gatewayDo sends a GET to the gateway at base and returns the status code
// and body.
func gatewayDo(ctx context.Context, t *testing.T, c *http.Client, base, path string, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func bearer(user string) http.Header {
	return http.Header{"Authorization": {"Bearer " + env.Hub.Tokens[user]}}
}

// wantRefused fails unless code and body are the entry decision's 401: a
// Status whose message names the flag that allows direct access.
func wantRefused(t *testing.T, what string, code int, body string) {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("%s: %d, body not a Status: %v: %s", what, code, err, body)
	}
	if code != http.StatusUnauthorized || st.Kind != "Status" || st.Code != http.StatusUnauthorized ||
		st.Reason != metav1.StatusReasonUnauthorized || !strings.Contains(st.Message, directAccessFlag) {
		t.Fatalf("%s: %d %s, want 401 with a Status naming %s", what, code, body, directAccessFlag)
	}
}

// marker returns a ConfigMap path on member-a in namespace alice whose name no
// other request uses, to find it in the member's audit logs.
func marker(t *testing.T, what string) (path, name string) {
	name = strings.ToLower(strings.NewReplacer(" ", "-", "/", "-", "_", "-").Replace(t.Name() + "-" + what))
	return harness.ProxyPath(harness.MemberA) + "/api/v1/namespaces/alice/configmaps/" + name, name
}

// reachedMemberA reports whether a replica of member-a logged name.
func reachedMemberA(t *testing.T, name string) bool {
	t.Helper()
	for _, s := range env.Members[harness.MemberA].Servers {
		if auditMentions(t, s, name) {
			return true
		}
	}
	return false
}

// waitReachedMemberA waits until a replica of member-a logged name.
func waitReachedMemberA(t *testing.T, name string) {
	t.Helper()
	eventually(t, 15*time.Second, func(context.Context) error {
		if !reachedMemberA(t, name) {
			return errorf("member-a has not logged %s", name)
		}
		return nil
	})
}

// By default a hub user's token sent straight to the gateway is refused with
// 401 (proxy, UpstreamCluster API, discovery of the group) and reaches no
// member, while the same user through the hub is served. Health and metrics
// keep their rules.
func TestDirectAccessIsOffByDefault(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	plain := gatewayClient(t, false)
	refusedPath, refusedName := marker(t, "refused")
	for _, tc := range []struct {
		what   string
		path   string
		header http.Header
	}{
		{"alice's token, proxy", refusedPath, bearer(harness.UserAlice)},
		{"admin's token, proxy", harness.ProxyPath(harness.MemberA) + "/version", bearer(harness.UserAdmin)},
		{"admin's token, UpstreamCluster list", "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters", bearer(harness.UserAdmin)},
		{"admin's token, UpstreamCluster get", "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/" + harness.MemberA, bearer(harness.UserAdmin)},
		{"admin's token, group discovery", "/apis/gateway.kubewharf.io/v1alpha1", bearer(harness.UserAdmin)},
		{"admin's token, doubled slash", "//apis/gateway.kubewharf.io/v1alpha1/upstreamclusters", bearer(harness.UserAdmin)},
		{"no credentials, proxy", harness.ProxyPath(harness.MemberA) + "/version", nil},
	} {
		code, body := gatewayDo(ctx, t, plain, env.GatewayURL, tc.path, tc.header)
		wantRefused(t, tc.what, code, body)
	}

	// A client certificate that is not the front proxy's is refused the same
	// way, identity headers or not.
	certFile, keyFile, err := env.IssueClientCert("alice", false)
	if err != nil {
		t.Fatal(err)
	}
	withCert := gatewayClient(t, false)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	withCert.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{cert}
	code, body := gatewayDo(ctx, t, withCert, env.GatewayURL, harness.ProxyPath(harness.MemberA)+"/version",
		http.Header{"X-Remote-User": {"alice"}})
	wantRefused(t, "another client certificate", code, body)

	// The same user through the hub is served: alice edits namespace alice on
	// member-a. Once the member logged that, it would have logged the refused one.
	servedPath, servedName := marker(t, "served")
	hub, err := rest.HTTPClientFor(env.HubConfig(harness.UserAlice))
	if err != nil {
		t.Fatal(err)
	}
	code, body = gatewayDo(ctx, t, hub, env.Hub.Servers[0].URL, servedPath, nil)
	if code != http.StatusNotFound || !strings.Contains(body, `configmaps \"`+servedName+`\" not found`) {
		t.Fatalf("alice through the hub: %d %s, want the member's 404", code, body)
	}
	waitReachedMemberA(t, servedName)
	if reachedMemberA(t, refusedName) {
		t.Fatal("the refused request reached member-a")
	}

	// Health is for anyone; metrics for whom the hub authorizes, with any
	// credential the gateway authenticates, as before.
	for _, path := range []string{"/livez", "/readyz", "/healthz"} {
		if code, body := gatewayDo(ctx, t, plain, env.GatewayURL, path, nil); code != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
	}
	if code, _ := gatewayDo(ctx, t, plain, env.GatewayURL, "/metrics", nil); code != http.StatusForbidden {
		t.Errorf("anonymous GET /metrics: %d, want 403", code)
	}
	if code, _ := gatewayDo(ctx, t, plain, env.GatewayURL, "/metrics", bearer(harness.UserAdmin)); code != http.StatusOK {
		t.Errorf("GET /metrics with the hub admin's token: %d, want 200", code)
	}
}

// With --direct-access a hub token sent straight to the gateway is served as
// that user: the hub authorizes upstreamclusters/proxy (bob is refused), the
// member's RBAC applies (alice may not read member-b), anonymous requests are
// still refused, the gateway's own audit policy records the requests, and the
// front proxy's requests are served as before. `kube-gateway kubeconfig
// --direct` writes a kubeconfig that kubectl uses to get there.
func TestDirectAccess(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	dir := t.TempDir()
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(gatewayAuditPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	auditLog := filepath.Join(dir, "audit.log")
	gw, url, err := env.StartExtraGateway(ctx, "kube-gateway-direct", directAccessFlag,
		"--audit-policy-file="+policy, "--audit-log-path="+auditLog)
	t.Cleanup(func() { _ = gw.Stop() })
	if err != nil {
		t.Fatal(err)
	}
	plain := gatewayClient(t, false)

	// alice, as herself, on member-a.
	alice := &rest.Config{Host: url + harness.ProxyPath(harness.MemberA), BearerToken: env.Hub.Tokens[harness.UserAlice],
		TLSClientConfig: rest.TLSClientConfig{CAFile: env.GatewayCAFile}}
	got, err := whoami(t, alice)
	if err != nil {
		t.Fatalf("alice's token straight to the gateway: %v", err)
	}
	if got.Username != "alice" || got.UID != "alice-uid" || strings.Join(got.Groups, ",") != "dev-team,system:authenticated" {
		t.Fatalf("member-a sees %+v, want alice", got)
	}
	aliceClient, err := kubernetes.NewForConfig(alice)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := aliceClient.CoreV1().ConfigMaps(harness.AliceNamespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("alice lists ConfigMaps in her namespace on member-a: %v", err)
	}

	// The member's RBAC: alice has no rights on member-b.
	code, body := gatewayDo(ctx, t, plain, url, harness.ProxyPath(harness.MemberB)+"/api/v1/namespaces/alice/configmaps", bearer(harness.UserAlice))
	if code != http.StatusForbidden || !strings.Contains(body, `User \"alice\" cannot list resource \"configmaps\"`) {
		t.Fatalf("alice on member-b: %d %s, want member-b's 403", code, body)
	}
	// The hub's RBAC on upstreamclusters/proxy: bob may not use the proxy.
	bobPath, bobName := marker(t, "bob")
	code, body = gatewayDo(ctx, t, plain, url, bobPath, bearer(harness.UserBob))
	if code != http.StatusForbidden || !strings.Contains(body, `cannot get resource \"upstreamclusters/proxy\"`) {
		t.Fatalf("bob: %d %s, want the gateway's 403 for upstreamclusters/proxy", code, body)
	}
	// Anonymous and unknown tokens stay out.
	anonPath, anonName := marker(t, "anonymous")
	code, body = gatewayDo(ctx, t, plain, url, anonPath, nil)
	if code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Fatalf("anonymous: %d %s, want 401 or 403", code, body)
	}
	badPath, badName := marker(t, "bad-token")
	code, body = gatewayDo(ctx, t, plain, url, badPath, http.Header{"Authorization": {"Bearer not-a-hub-token"}})
	if code != http.StatusUnauthorized {
		t.Fatalf("unknown token: %d %s, want 401", code, body)
	}
	// The UpstreamCluster API as the hub admin.
	code, body = gatewayDo(ctx, t, plain, url, "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/"+harness.MemberA, bearer(harness.UserAdmin))
	if code != http.StatusOK || !strings.Contains(body, `"kind":"UpstreamCluster"`) {
		t.Fatalf("admin gets UpstreamCluster member-a: %d %s", code, body)
	}

	// The front proxy's requests, as the hub sends them.
	frontPath, frontName := marker(t, "front-proxy")
	code, body = gatewayDo(ctx, t, gatewayClient(t, true), url, frontPath,
		http.Header{"X-Remote-User": {"alice"}, "X-Remote-Group": {"dev-team", "system:authenticated"}, "X-Remote-Uid": {"alice-uid"}})
	if code != http.StatusNotFound || !strings.Contains(body, frontName) {
		t.Fatalf("alice through the front proxy: %d %s, want the member's 404", code, body)
	}
	waitReachedMemberA(t, frontName)
	for _, name := range []string{bobName, anonName, badName} {
		if reachedMemberA(t, name) {
			t.Fatalf("%s reached member-a", name)
		}
	}

	// The gateway's own audit log has alice's direct request, as alice.
	eventually(t, 15*time.Second, func(context.Context) error {
		data, err := os.ReadFile(auditLog)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, `"username":"alice"`) && strings.Contains(line, harness.ProxyPath(harness.MemberA)+"/apis/authentication.k8s.io/v1/selfsubjectreviews") {
				return nil
			}
		}
		return errorf("the gateway's audit log has no event of alice's direct request")
	})

	// kubectl with the kubeconfig that `kube-gateway kubeconfig --direct` prints.
	bin, ok := harness.GatewayBinary(env.BinDir)
	if !ok {
		t.Fatalf("no kube-gateway in %s", env.BinDir)
	}
	cmd := exec.CommandContext(ctx, bin, "kubeconfig", "--kubeconfig", env.Kubeconfig("hub-alice"), "--cluster", harness.MemberA,
		"--direct", "--direct-server", url, "--direct-ca-file", env.GatewayCAFile)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kube-gateway kubeconfig --direct: %v: %s", err, stderr.String())
	}
	kubeconfig := filepath.Join(dir, "alice-direct.kubeconfig")
	if err := os.WriteFile(kubeconfig, out, 0o600); err != nil {
		t.Fatal(err)
	}
	who, _, err := env.Kubectl(ctx, kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
	if err != nil {
		t.Fatal(err)
	}
	if who != "alice" {
		t.Fatalf("kubectl auth whoami with the direct kubeconfig: %q, want alice", who)
	}
	server, _, err := env.Kubectl(ctx, kubeconfig, "config", "view", "-o", "jsonpath={.clusters[0].cluster.server}")
	if err != nil {
		t.Fatal(err)
	}
	if want := url + harness.ProxyPath(harness.MemberA); server != want {
		t.Fatalf("direct kubeconfig server %q, want %q", server, want)
	}
}

// gatewayAuditPolicy records requests for the gateway's API group with their
// user; nothing else.
const gatewayAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources:
  - group: gateway.kubewharf.io
- level: None
`
