package e2e

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewharf/kube-gateway/test/harness"
)

// whoami asks the member, through the hub and the gateway, who it thinks the
// caller is.
func whoami(t *testing.T, cfg *rest.Config) (authenticationv1.UserInfo, error) {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t, 30*time.Second)
	r, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}
	return r.Status.UserInfo, nil
}

// The member sees the hub user as is: name, UID and groups (kubectl auth whoami).
func TestMemberSeesTheHubUser(t *testing.T) {
	ctx := testContext(t, time.Minute)
	for _, member := range []string{harness.MemberA, harness.MemberB} {
		out, _, err := env.Kubectl(ctx, "alice@"+member, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.uid} {.status.userInfo.groups}")
		if err != nil {
			t.Fatal(err)
		}
		if want := `alice alice-uid ["dev-team","system:authenticated"]`; out != want {
			t.Fatalf("%s: kubectl auth whoami through the gateway = %q, want %q", member, out, want)
		}
	}
}

// Extras and groups of the hub identity reach the member: here the hub admin
// impersonates alice on the hub with an extra, a UID and groups.
func TestHubImpersonationWithExtrasReachesTheMember(t *testing.T) {
	cfg := env.ProxyConfig(harness.UserAdmin, harness.MemberA)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: harness.UserAlice,
		UID:      "alice-uid-2",
		Groups:   []string{"dev-team", "on-call"},
		Extra:    map[string][]string{"example.com/team": {"blue", "green"}},
	}
	got, err := whoami(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.Username != "alice" || got.UID != "alice-uid-2" {
		t.Fatalf("member sees %q uid %q", got.Username, got.UID)
	}
	for _, g := range []string{"dev-team", "on-call", "system:authenticated"} {
		if !slices.Contains(got.Groups, g) {
			t.Fatalf("member misses group %q: %v", g, got.Groups)
		}
	}
	if team := got.Extra["example.com/team"]; !slices.Equal([]string(team), []string{"blue", "green"}) {
		t.Fatalf("member sees extra example.com/team = %v, want [blue green] (all extras: %v)", team, got.Extra)
	}
}

// The member's RBAC decides, and its answer reaches the client unchanged: alice
// may list pods in her namespace on member-a and gets the member's own 403 on
// member-b.
func TestMemberRBACDecides(t *testing.T) {
	ctx := testContext(t, time.Minute)
	if _, _, err := env.Kubectl(ctx, "alice@member-a", "get", "pods", "--namespace=alice"); err != nil {
		t.Fatalf("alice on member-a: %v", err)
	}
	_, stderr, err := env.Kubectl(ctx, "alice@member-b", "get", "pods", "--namespace=alice")
	if err == nil {
		t.Fatal("alice listed pods on member-b, where she has no rights")
	}
	if want := `pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "alice"`; !strings.Contains(stderr, want) {
		t.Fatalf("member-b's 403 did not reach the client unchanged: %s", stderr)
	}

	c, err := kubernetes.NewForConfig(env.ProxyConfig(harness.UserAlice, harness.MemberB))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CoreV1().Pods("alice").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("client-go sees %v, want the member's Forbidden", err)
	}
	if status := err.(apierrors.APIStatus).Status(); status.Details == nil || status.Details.Kind != "pods" {
		t.Fatalf("the member's Status was not passed through: %+v", status)
	}
}

// A hub user without RBAC on upstreamclusters/proxy is stopped by the hub.
func TestHubRBACGuardsTheProxy(t *testing.T) {
	ctx := testContext(t, time.Minute)
	_, stderr, err := env.Kubectl(ctx, "hub-bob", "get", "--raw", harness.ProxyPath(harness.MemberA)+"/version")
	if err == nil {
		t.Fatal("bob reached member-a without permission on upstreamclusters/proxy")
	}
	if want := `User "bob" cannot get resource "upstreamclusters/proxy" in API group "gateway.kubewharf.io"`; !strings.Contains(stderr, want) {
		t.Fatalf("unexpected refusal: %s", stderr)
	}
}

// Identity headers a client adds itself buy nothing: X-Remote-* are dropped by
// the hub, and Impersonate-* without the hub's permission is refused by the hub.
func TestClientIdentityHeadersBuyNothing(t *testing.T) {
	forged := env.ProxyConfig(harness.UserAlice, harness.MemberA)
	forged.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			req = req.Clone(req.Context())
			req.Header.Set("X-Remote-User", "admin")
			req.Header.Add("X-Remote-Group", "system:masters")
			req.Header.Set("X-Remote-Uid", "admin-uid")
			return rt.RoundTrip(req)
		})
	}
	got, err := whoami(t, forged)
	if err != nil {
		t.Fatal(err)
	}
	if got.Username != "alice" || got.UID != "alice-uid" || slices.Contains(got.Groups, "system:masters") {
		t.Fatalf("forged X-Remote-* headers changed the identity on the member: %+v", got)
	}

	impersonating := env.ProxyConfig(harness.UserAlice, harness.MemberA)
	impersonating.Impersonate = rest.ImpersonationConfig{UserName: "admin", Groups: []string{"system:masters"}}
	_, err = whoami(t, impersonating)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "impersonate") {
		t.Fatalf("Impersonate-User without hub permission: %v, want the hub's Forbidden", err)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
