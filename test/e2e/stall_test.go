package e2e

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// stallFor is how long the member's etcd stays frozen.
const stallFor = 30 * time.Second

// A member whose etcd stalls (SIGSTOP) fails its readiness probe, but its
// apiserver still answers from memory: through the gateway, /version,
// discovery and a resourceVersion=0 LIST (served from the watch cache) are
// answered all along, while the UpstreamCluster says Ready=False; once the
// etcd runs again, the member is Ready again.
func TestMemberEtcdStall(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	const cluster = "member-stall"
	m := startMember(ctx, t, cluster)
	ready := func(ctx context.Context) (*metav1.Condition, error) {
		uc, err := upstreamClusters(t).Get(ctx, cluster, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		c := meta.FindStatusCondition(uc.Status.Conditions, gatewayv1alpha1.ConditionReady)
		if c == nil {
			return nil, errorf("no Ready condition yet: %+v", uc.Status)
		}
		return c, nil
	}
	waitReady := func(want metav1.ConditionStatus, within time.Duration) {
		t.Helper()
		eventually(t, within, func(ctx context.Context) error {
			c, err := ready(ctx)
			if err != nil {
				return err
			}
			if c.Status != want {
				return errorf("Ready=%s (%s: %s), want %s", c.Status, c.Reason, c.Message, want)
			}
			t.Logf("Ready=%s (%s: %s)", c.Status, c.Reason, c.Message)
			return nil
		})
	}
	waitReady(metav1.ConditionTrue, 30*time.Second)

	// Reads the apiserver answers without etcd, each sent once (no
	// client-side retries), through hub and gateway.
	client, err := rest.HTTPClientFor(env.ProxyConfig(harness.UserAdmin, cluster))
	if err != nil {
		t.Fatal(err)
	}
	base := env.Hub.Servers[0].URL + harness.ProxyPath(cluster)
	reads := []string{"/version", "/api", "/apis", "/api/v1/namespaces?resourceVersion=0"}
	readAll := func() {
		t.Helper()
		for _, path := range reads {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			req, _ := http.NewRequestWithContext(rctx, http.MethodGet, base+path, nil)
			resp, err := client.Do(req)
			if err != nil {
				cancel()
				t.Fatalf("GET %s with the member's etcd frozen: %v", path, err)
			}
			resp.Body.Close()
			cancel()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s with the member's etcd frozen: %s", path, resp.Status)
			}
		}
	}
	readAll() // the watch cache of namespaces is warm

	// The member's etcd freezes; it runs again at the end whatever happens.
	t.Cleanup(func() { _ = m.Etcd.Signal(syscall.SIGCONT) })
	if err := m.Etcd.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	var sawNotReady bool
	readsNotReady := 0 // rounds of reads answered while the cluster said Ready=False
	for time.Since(frozen) < stallFor {
		readAll()
		if sawNotReady {
			readsNotReady++
		} else if c, err := ready(ctx); err == nil && c.Status == metav1.ConditionFalse {
			sawNotReady = true
			t.Logf("%.0fs into the stall: Ready=%s (%s: %s)", time.Since(frozen).Seconds(), c.Status, c.Reason, c.Message)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(500 * time.Millisecond): // pacing the reads over the stall
		}
	}
	if !sawNotReady {
		c, err := ready(ctx)
		t.Errorf("the member's etcd was frozen for %s and the cluster never said Ready=False (last: %+v, %v)", stallFor, c, err)
	} else if readsNotReady == 0 {
		t.Errorf("no reads were sent while the cluster said Ready=False")
	} else {
		t.Logf("%d rounds of %v answered while Ready=False", readsNotReady, reads)
	}

	if err := m.Etcd.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitReady(metav1.ConditionTrue, 60*time.Second)
	readAll()
}

// startMember starts member cluster name with its own etcd, registered as
// an UpstreamCluster of the same name; all of it goes when the test ends.
func startMember(ctx context.Context, t *testing.T, name string) *harness.Cluster {
	t.Helper()
	m, err := env.StartMember(ctx, name)
	t.Cleanup(func() {
		_ = upstreamClusters(t).Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = hubAdmin(t).CoreV1().Secrets(harness.GatewayNamespace).Delete(context.Background(), name, metav1.DeleteOptions{})
		if m != nil {
			if err := m.Stop(); err != nil {
				t.Error(err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
