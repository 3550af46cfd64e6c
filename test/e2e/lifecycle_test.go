package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/serviceaccount"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewharf/kube-gateway/test/harness"
)

func memberB(t *testing.T) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(env.Members[harness.MemberB].AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func hubAdmin(t *testing.T) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(env.HubConfig(harness.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// gatewayIdentity creates a service account on a member (through c, its
// admin client) that may impersonate, as the gateway's own identity may, and
// returns its user name and a fresh token; both go when the test ends.
func gatewayIdentity(ctx context.Context, t *testing.T, c kubernetes.Interface, name string) (user, token string) {
	t.Helper()
	if _, err := c.CoreV1().ServiceAccounts("kube-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kube-gateway:impersonator"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: name}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // the member may be gone
		defer cancel()
		_ = c.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = c.CoreV1().ServiceAccounts("kube-system").Delete(ctx, name, metav1.DeleteOptions{})
	})
	expiry := int64(3600)
	tr, err := c.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return serviceaccount.MakeUsername("kube-system", name), tr.Status.Token
}

// auditUsers counts the requests a replica's audit log shows as made by user.
func auditUsers(t *testing.T, s *harness.APIServer, user string) int {
	t.Helper()
	return countAudit(t, s, func(ev *auditEvent) bool { return ev.User.Username == user })
}

// The gateway's member token is rotated in its Secret and the old one revoked on
// the member: requests keep succeeding, without a restart.
func TestCredentialRotation(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	_, oldToken := gatewayIdentity(ctx, t, memberB(t), "gateway-rotation-old")
	_, newToken := gatewayIdentity(ctx, t, memberB(t), "gateway-rotation-new")
	secrets := hubAdmin(t).CoreV1().Secrets(harness.GatewayNamespace)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "rotation"},
		Data:       map[string][]byte{"token": []byte(oldToken), "ca.crt": env.Members[harness.MemberB].CAData},
	}
	if _, err := secrets.Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = secrets.Delete(context.Background(), "rotation", metav1.DeleteOptions{}) })
	uc := newCluster("rotation", env.Members[harness.MemberB].Servers[0].URL)
	uc.Spec.ClientConfig.SecretRef.Name = "rotation"
	createCluster(t, uc)
	waitUsable(t, uc.Name)

	// Steady load through the gateway for the whole rotation.
	cfg := env.ProxyConfig(harness.UserAdmin, uc.Name)
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var requests, failures atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			requests.Add(1)
			if resp, body, err := tryGet(ctx, client, cfg.Host+"/api/v1/namespaces/default"); err != nil || resp.StatusCode != http.StatusOK {
				if failures.Add(1) == 1 {
					firstFailure.Store(fmt.Sprintf("%s %s %v", statusOf(resp), body, err))
				}
			}
		}
	}()

	server := env.Members[harness.MemberB].Servers[0]
	newUser := "system:serviceaccount:kube-system:gateway-rotation-new"
	secret.Data["token"] = []byte(newToken)
	if _, err := secrets.Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The member sees the new credential...
	eventually(t, 30*time.Second, func(context.Context) error {
		if auditUsers(t, server, newUser) == 0 {
			return errorf("no request with the new token yet")
		}
		return nil
	})
	// ...then the old one is revoked (its service account deleted).
	if err := memberB(t).CoreV1().ServiceAccounts("kube-system").Delete(ctx, "gateway-rotation-old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := auditUsers(t, server, newUser)
	eventually(t, 30*time.Second, func(context.Context) error {
		if auditUsers(t, server, newUser) < seen+50 {
			return errorf("load after revocation not done yet")
		}
		return nil
	})
	close(stop)
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d of %d requests failed during the rotation; first: %v", n, requests.Load(), firstFailure.Load())
	}
	t.Logf("%d requests across the rotation, none failed", requests.Load())
}

// profileClient is the one client that reads the gateway's goroutine profile:
// a client per read would leave an idle keep-alive connection, and so a
// goroutine, in the gateway every time it counts them.
var profileClient struct {
	sync.Mutex
	*http.Client
}

// goroutines reads the gateway's goroutine count from its pprof endpoint, as
// the hub's admin would.
func goroutines(t *testing.T) int {
	t.Helper()
	_, body := goroutineProfile(t)
	first, _, _ := strings.Cut(body, "\n")
	n, err := strconv.Atoi(strings.TrimPrefix(first, "goroutine profile: total "))
	if err != nil {
		t.Fatalf("goroutine profile header %q", first)
	}
	return n
}

// goroutineProfile returns the gateway's goroutine profile (debug=1).
func goroutineProfile(t *testing.T) (int, string) {
	t.Helper()
	profileClient.Lock()
	if profileClient.Client == nil {
		profileClient.Client = gatewayClient(t, true)
	}
	c := profileClient.Client
	profileClient.Unlock()
	admin := http.Header{"X-Remote-User": {"admin"}, "X-Remote-Group": {"system:masters"}}
	code, body := gatewayGet(t, c, "/debug/pprof/goroutine?debug=1", admin)
	if code != http.StatusOK {
		t.Fatalf("goroutine profile: %d", code)
	}
	return code, body
}

// Deleting UpstreamClusters releases what they held: the goroutines of their
// health checks and connections, and the connections themselves.
func TestDeletedClustersReleaseEverything(t *testing.T) {
	server := env.Members[harness.MemberB].Servers[0]
	baseConns, err := connectionsTo(env.Gateway.PID(), server.Port)
	if err != nil {
		t.Fatal(err)
	}
	baseGoroutines := goroutines(t)
	const clusters = 5
	for i := 0; i < clusters; i++ {
		name := fmt.Sprintf("released-%d", i)
		createCluster(t, newCluster(name, server.URL))
		waitUsable(t, name)
		ctx := testContext(t, time.Minute)
		var wg sync.WaitGroup
		for j := 0; j < 10; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rawGet(ctx, t, harness.UserAdmin, name, "/api/v1/namespaces/default")
			}()
		}
		wg.Wait()
	}
	if conns, _ := connectionsTo(env.Gateway.PID(), server.Port); conns <= baseConns {
		t.Fatalf("the clusters opened no connections of their own (%d, baseline %d): the test proves nothing", conns, baseConns)
	}
	for i := 0; i < clusters; i++ {
		if err := upstreamClusters(t).Delete(context.Background(), fmt.Sprintf("released-%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, func(context.Context) error {
		conns, err := connectionsTo(env.Gateway.PID(), server.Port)
		if err != nil {
			return err
		}
		// A leak of one health checker per cluster would be clusters or more.
		if n := goroutines(t); conns > baseConns || n > baseGoroutines+clusters {
			return errorf("after deleting %d clusters: %d connections (baseline %d), %d goroutines (baseline %d)", clusters, conns, baseConns, n, baseGoroutines)
		}
		return nil
	})
}

// openWatch opens the watch at url with client and header, fails t unless it
// is 200, and reads it to its end in the background: the channel gets the
// error it ended with, nil for a complete response.
func openWatch(ctx context.Context, t *testing.T, client *http.Client, url string, header http.Header) <-chan error {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch %s: %s", url, resp.Status)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		ended <- err
	}()
	return ended
}

// On SIGTERM the gateway ends proxied watches and watches of its own API
// cleanly (a complete response, so clients simply reconnect) and exits within
// a bounded time; restarted, it serves again.
func TestGracefulShutdown(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	// With the default shutdown timeout (--request-timeout, 60 s), longer
	// than the 30 s below, instead of the suite's 5 s: a watch that is only
	// cut when the process exits must show.
	args := env.Gateway.Args
	env.Gateway.Args = append(slices.Clone(args), "--request-timeout=60s")
	restarted := false
	t.Cleanup(func() {
		env.Gateway.Args = args
		if !restarted {
			_ = env.Gateway.Restart(context.Background())
		}
	})
	if err := env.Gateway.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitUsable(t, harness.MemberB)
	cfg := env.ProxyConfig(harness.UserAdmin, harness.MemberB)
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	streamEnded := openWatch(ctx, t, client, cfg.Host+"/api/v1/namespaces/default/configmaps?watch=true", nil)
	// A watch of UpstreamClusters, as the hub's garbage collector and fleet
	// tools' informers hold, straight to the gateway: unless the gateway ends
	// it, it stays open until the shutdown timeout.
	own := gatewayClient(t, true)
	own.Timeout = 0
	ownEnded := openWatch(ctx, t, own, env.GatewayURL+"/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters?watch=true",
		http.Header{"X-Remote-User": {harness.UserAdmin}, "X-Remote-Group": {"system:masters"}})

	stopped := time.Now()
	if err := env.Gateway.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		name  string
		ended <-chan error
	}{{"proxied watch", streamEnded}, {"watch of UpstreamClusters", ownEnded}} {
		select {
		case err := <-w.ended:
			if err != nil {
				t.Fatalf("the %s was cut instead of ended: %v", w.name, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the %s outlived the gateway's shutdown", w.name)
		}
	}
	eventually(t, 30*time.Second, func(context.Context) error {
		if env.Gateway.Running() {
			return errorf("gateway still running %s after SIGTERM", time.Since(stopped).Round(time.Second))
		}
		return nil
	})
	t.Logf("watches ended and gateway exited %s after SIGTERM", time.Since(stopped).Round(100*time.Millisecond))

	env.Gateway.Args = args
	if err := env.Gateway.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	waitUsable(t, harness.MemberA)
	waitUsable(t, harness.MemberB)
}
