package e2e

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

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
