package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kubewharf/kube-gateway/proxy/longrunning"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// idleWatch watches ConfigMaps of namespace alice that do not exist: the watch
// stays open and receives nothing.
const idleWatch = "/api/v1/namespaces/alice/configmaps?watch=true&fieldSelector=metadata.name%3Dnone"

// A fleet controller, one service account, holds as many long-running requests
// open through the gateway as --max-long-running-requests-per-user allows:
// one more gets 429 with Retry-After, through the hub, while its short
// requests and another user's watches go on; once its watches close, the
// slots are free again.
func TestLongRunningRequestsPerUserCap(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	controller := proxyHTTPClient(t, fleetServiceAccount(ctx, t, "fleet-controller"), harness.MemberA)
	alice := proxyHTTPClient(t, "", harness.MemberA)
	eventually(t, 30*time.Second, func(ctx context.Context) error { // RBAC reaches the hub's and member's caches
		if resp, body := controller.get(ctx, t, "/api/v1/namespaces/alice/configmaps"); resp.StatusCode != http.StatusOK {
			return errorf("%s %s", resp.Status, body)
		}
		return nil
	})

	var open []func()
	closeAll := func() {
		for _, c := range open {
			c()
		}
		open = nil
	}
	t.Cleanup(closeAll)
	for i := 0; i < longRunningCap; i++ {
		resp, closeW := controller.open(ctx, t, idleWatch)
		open = append(open, closeW)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("watch %d of %d allowed: %s", i+1, longRunningCap, resp.Status)
		}
	}
	resp, closeW := controller.open(ctx, t, idleWatch)
	if resp.StatusCode != http.StatusTooManyRequests {
		closeW()
		t.Fatalf("watch %d with a cap of %d: %s, want 429", longRunningCap+1, longRunningCap, resp.Status)
	}
	body, _ := io.ReadAll(resp.Body)
	closeW()
	var status metav1.Status
	if err := json.Unmarshal(body, &status); err != nil {
		t.Fatalf("429 body is not a Status: %q", body)
	}
	if status.Reason != metav1.StatusReasonTooManyRequests || !strings.Contains(status.Message, "--"+longrunning.Flag) ||
		!strings.Contains(status.Message, " "+strconv.Itoa(longRunningCap)+" ") {
		t.Fatalf("429 Status does not name the limit and the flag: %+v", status)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Fatalf("429 without Retry-After through the hub: %v", resp.Header)
	}

	// Only long-running requests count; other users have budgets of their own.
	if resp, body := controller.get(ctx, t, "/api/v1/namespaces/alice/configmaps"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a GET of the controller at its cap: %s %s", resp.Status, body)
	}
	resp, closeAlice := alice.open(ctx, t, idleWatch)
	closeAlice()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's watch while the controller is at its cap: %s", resp.Status)
	}
	if resp, body := alice.get(ctx, t, "/api/v1/namespaces/alice/configmaps"); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's GET while the controller is at its cap: %s %s", resp.Status, body)
	}

	// Closed watches give their slots back: all of them open again.
	closeAll()
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		for len(open) < longRunningCap {
			resp, closeW := controller.open(ctx, t, idleWatch)
			if resp.StatusCode != http.StatusOK {
				closeW()
				return errorf("%d of %d watches open again, then %s", len(open), longRunningCap, resp.Status)
			}
			open = append(open, closeW)
		}
		return nil
	})
}

// rawProxyClient sends raw requests to member through the hub with a bearer
// token (alice's when empty), without client-side retries.
type rawProxyClient struct {
	client *http.Client
	base   string
}

func proxyHTTPClient(t *testing.T, token, member string) *rawProxyClient {
	t.Helper()
	cfg := env.ProxyConfig(harness.UserAlice, member)
	if token != "" {
		cfg.BearerToken = token
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &rawProxyClient{client: client, base: cfg.Host}
}

func (c *rawProxyClient) get(ctx context.Context, t *testing.T, path string) (*http.Response, []byte) {
	t.Helper()
	resp, body, err := tryGet(ctx, c.client, c.base+path)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// open starts a request whose response is read later; closing it ends the
// request.
func (c *rawProxyClient) open(ctx context.Context, t *testing.T, path string) (*http.Response, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return resp, func() { cancel(); _ = resp.Body.Close() }
}

// fleetServiceAccount creates hub service account default/name with the right
// to use the proxy, and the right to read namespace alice on member-a (where
// the gateway impersonates it), and returns a token of it.
func fleetServiceAccount(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	hub, member := hubAdmin(t), memberA(t)
	user := "system:serviceaccount:default:" + name
	if _, err := hub.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kube-gateway:proxy"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: name}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := member.RbacV1().RoleBindings(harness.AliceNamespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = member.RbacV1().RoleBindings(harness.AliceNamespace).Delete(ctx, name, metav1.DeleteOptions{})
		_ = hub.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = hub.CoreV1().ServiceAccounts("default").Delete(ctx, name, metav1.DeleteOptions{})
	})
	expiry := int64(3600)
	tr, err := hub.CoreV1().ServiceAccounts("default").CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}
