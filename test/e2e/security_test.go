package e2e

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// X-Remote-* identity headers are honoured only with a client certificate from
// the request-header CA carrying an allowed name. Anything else calling the
// gateway directly reaches no member.
func TestTrustBoundaryAtTheGateway(t *testing.T) {
	untrustedCert, untrustedKey, err := env.IssueClientCert("front-proxy-client", false)
	if err != nil {
		t.Fatal(err)
	}
	wrongNameCert, wrongNameKey, err := env.IssueClientCert("intruder", true)
	if err != nil {
		t.Fatal(err)
	}
	withCert := func(certFile, keyFile string) *http.Client {
		c := gatewayClient(t, false)
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		c.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{cert}
		return c
	}
	forged := http.Header{"X-Remote-User": {"admin"}, "X-Remote-Group": {"system:masters"}, "X-Remote-Uid": {"admin-uid"}}
	cases := []struct {
		name   string
		client *http.Client
		trust  bool
	}{
		{"the hub's front-proxy certificate", gatewayClient(t, true), true},
		{"no client certificate", gatewayClient(t, false), false},
		{"a certificate from another CA", withCert(untrustedCert, untrustedKey), false},
		{"the request-header CA but a name not allowed", withCert(wrongNameCert, wrongNameKey), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A name no other test uses: the member's audit log tells whether
			// the request reached it.
			marker := "trust-" + strings.ReplaceAll(tc.name, " ", "-")
			marker = strings.NewReplacer("'", "", ".", "").Replace(marker)
			code, body := gatewayGet(t, tc.client, harness.ProxyPath(harness.MemberB)+"/api/v1/namespaces/default/configmaps/"+marker, forged)
			// A trusted request after it: once the member logged that one, it
			// would have logged ours too.
			after := strings.Replace(marker, "trust-", "sequel-", 1) // not containing marker
			gatewayGet(t, gatewayClient(t, true), harness.ProxyPath(harness.MemberB)+"/api/v1/namespaces/default/configmaps/"+after, forged)
			server := env.Members[harness.MemberB].Servers[0]
			eventually(t, 10*time.Second, func(context.Context) error {
				if !auditMentions(t, server, after) {
					return errorf("the member has not logged the trusted request yet")
				}
				return nil
			})
			reached := auditMentions(t, server, marker)
			if tc.trust {
				// The member answered (the object does not exist): the headers
				// were honoured, which shows the other cases can tell.
				if code != http.StatusNotFound || !reached {
					t.Fatalf("trusted front proxy: %d %s (member reached: %v)", code, body, reached)
				}
				return
			}
			if code != http.StatusUnauthorized && code != http.StatusForbidden {
				t.Fatalf("forged identity headers: %d %s, want 401 or 403", code, body)
			}
			if reached {
				t.Fatalf("the request reached the member")
			}
		})
	}
}

// auditMentions reports whether a replica's audit log mentions marker.
func auditMentions(t *testing.T, s *harness.APIServer, marker string) bool {
	t.Helper()
	data, err := os.ReadFile(s.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(data), marker)
}

// spec.impersonation maps the hub identity: prefixes for the user and groups,
// groups dropped by name, only the allowed extras forwarded (kubectl auth whoami).
func TestIdentityMapping(t *testing.T) {
	uc := newCluster("mapped", env.Members[harness.MemberB].Servers[0].URL)
	uc.Spec.ClientConfig.CAData = env.Members[harness.MemberB].CAData
	uc.Spec.Impersonation = &gatewayv1alpha1.ImpersonationPolicy{
		UserPrefix:  "hub:",
		GroupPrefix: "hub:",
		Groups:      &gatewayv1alpha1.NameFilter{Deny: []string{"system:masters"}},
		Extras:      &gatewayv1alpha1.NameFilter{Allow: []string{"example.com/team"}},
	}
	createCluster(t, uc)
	waitUsable(t, uc.Name)

	// kubectl auth whoami as alice through the mapped cluster.
	ctx := testContext(t, time.Minute)
	out, _, err := env.Kubectl(ctx, "hub-alice", "--server="+env.Hub.Servers[0].URL+harness.ProxyPath(uc.Name),
		"auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}")
	if err != nil {
		t.Fatal(err)
	}
	if want := `hub:alice ["hub:dev-team","hub:system:authenticated","system:authenticated"]`; out != want {
		t.Fatalf("kubectl auth whoami = %q, want %q", out, want)
	}

	// The hub admin acting as alice with system:masters and two extras.
	cfg := env.ProxyConfig(harness.UserAdmin, uc.Name)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: harness.UserAlice,
		Groups:   []string{"dev-team", "system:masters"},
		Extra:    map[string][]string{"example.com/team": {"blue"}, "example.com/other": {"x"}},
	}
	got, err := whoami(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.Username != "hub:alice" {
		t.Fatalf("member sees user %q", got.Username)
	}
	for _, g := range got.Groups {
		if strings.Contains(g, "system:masters") {
			t.Fatalf("a denied group reached the member: %v", got.Groups)
		}
	}
	if !slices.Contains(got.Groups, "hub:dev-team") {
		t.Fatalf("groups %v lack hub:dev-team", got.Groups)
	}
	if team := got.Extra["example.com/team"]; !slices.Equal([]string(team), []string{"blue"}) || len(got.Extra["example.com/other"]) != 0 {
		t.Fatalf("extras on the member: %v, want only example.com/team", got.Extra)
	}
}

// With --authorize-proxy-subpath the hub's RBAC must allow the inner request
// too: alice, who may use the proxy but holds no hub role on configmaps, is
// refused until the hub grants her `list configmaps` in her namespace.
func TestAuthorizeProxySubpath(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	gw, url, err := env.StartExtraGateway(ctx, "kube-gateway-authz", "--authorize-proxy-subpath")
	t.Cleanup(func() { _ = gw.Stop() })
	if err != nil {
		t.Fatal(err)
	}
	alice := http.Header{"X-Remote-User": {"alice"}, "X-Remote-Group": {"dev-team", "system:authenticated"}, "X-Remote-Uid": {"alice-uid"}}
	get := func(path string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+harness.ProxyPath(harness.MemberA)+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = alice.Clone()
		resp, err := gatewayClient(t, true).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/api/v1/namespaces/alice/configmaps"); code != http.StatusForbidden || !strings.Contains(body, "the hub does not allow") {
		t.Fatalf("without a hub role: %d %s, want the gateway's 403", code, body)
	}

	hub := hubAdmin(t)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "list-configmaps", Namespace: harness.AliceNamespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-list-configmaps", Namespace: harness.AliceNamespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "alice"}}}
	if _, err := hub.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: harness.AliceNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := hub.RbacV1().Roles(harness.AliceNamespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.RbacV1().RoleBindings(harness.AliceNamespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = hub.RbacV1().RoleBindings(harness.AliceNamespace).Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		_ = hub.RbacV1().Roles(harness.AliceNamespace).Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	// The gateway caches the hub's answers for a short while.
	eventually(t, 30*time.Second, func(context.Context) error {
		if code, body := get("/api/v1/namespaces/alice/configmaps"); code != http.StatusOK {
			return errorf("with the hub role: %d %s", code, body)
		}
		return nil
	})
	// The real verb is checked: watch is not list.
	if code, _ := get("/api/v1/namespaces/alice/configmaps?watch=true&timeoutSeconds=1"); code != http.StatusForbidden {
		t.Fatalf("watch with only list granted on the hub: %d, want 403", code)
	}
}
