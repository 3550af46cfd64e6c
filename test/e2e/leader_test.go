package e2e

import (
	"context"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kubewharf/kube-gateway/apis/client/clientset/versioned"
	gatewayclient "github.com/kubewharf/kube-gateway/apis/client/clientset/versioned/typed/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// statusLease is the hub Lease whose holder writes UpstreamCluster status.
const statusLease = "kube-gateway-status"

// withAdminHeaders sends what the hub's front proxy sends for admin.
type withAdminHeaders struct{ rt http.RoundTripper }

func (w withAdminHeaders) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("X-Remote-User", harness.UserAdmin)
	req.Header["X-Remote-Group"] = harness.AdminGroups()
	return w.rt.RoundTrip(req)
}

// directClusters is a client for UpstreamClusters of the gateway at url itself,
// not through the hub (whose APIService points at the first gateway).
func directClusters(t *testing.T, url string) gatewayclient.UpstreamClusterInterface {
	t.Helper()
	httpClient := gatewayClient(t, true)
	httpClient.Transport = withAdminHeaders{httpClient.Transport}
	c, err := versioned.NewForConfigAndClient(&rest.Config{Host: url}, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	return c.GatewayV1alpha1().UpstreamClusters()
}

func leaseHolder(ctx context.Context, t *testing.T) (string, error) {
	l, err := hubAdmin(t).CoordinationV1().Leases(harness.GatewayNamespace).Get(ctx, statusLease, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return "", errorf("lease %s has no holder", statusLease)
	}
	return *l.Spec.HolderIdentity, nil
}

// With two replicas one holds the status Lease; when it stops, the other takes
// the Lease and writes status from then on.
func TestStatusLeaderElection(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	var leader string
	eventually(t, 30*time.Second, func(ctx context.Context) (err error) {
		leader, err = leaseHolder(ctx, t)
		return err
	})

	standby, standbyURL, err := env.StartExtraGateway(ctx, "kube-gateway-standby")
	t.Cleanup(func() { _ = standby.Stop() })
	if err != nil {
		t.Fatal(err)
	}
	if holder, err := leaseHolder(ctx, t); err != nil || holder != leader {
		t.Fatalf("a second replica changed the holder: %q, %v; want %q", holder, err, leader)
	}

	// The leader stops (SIGTERM: it gives the Lease up); the standby takes it.
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = env.Gateway.Restart(context.Background())
			waitUsable(t, harness.MemberA)
		}
	})
	if err := env.Gateway.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func(context.Context) error {
		if env.Gateway.Running() {
			return errorf("the first gateway is still running")
		}
		return nil
	})
	var standbyID string
	eventually(t, 30*time.Second, func(ctx context.Context) (err error) {
		standbyID, err = leaseHolder(ctx, t)
		if err == nil && standbyID == leader {
			err = errorf("the stopped replica %q still holds the lease", leader)
		}
		return err
	})

	// Only the standby runs: the status of a new cluster with a closed endpoint
	// can only come from it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "https://" + l.Addr().String()
	_ = l.Close()
	uc := newCluster("leader-check", closed)
	uc.Spec.HealthCheck = fastHealthCheck
	clusters := directClusters(t, standbyURL)
	if _, err := clusters.Create(ctx, uc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clusters.Delete(context.Background(), uc.Name, metav1.DeleteOptions{}) })
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		got, err := clusters.Get(ctx, uc.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, s := range got.Status.Servers {
			if s.Endpoint == closed && s.Healthy != nil && !*s.Healthy {
				return nil
			}
		}
		return errorf("no unhealthy status for %s yet: %+v", closed, got.Status)
	})

	// The first replica comes back as a standby and serves again.
	if err := env.Gateway.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	waitUsable(t, harness.MemberA)
	if holder, err := leaseHolder(ctx, t); err != nil || holder != standbyID {
		t.Fatalf("after the restart the holder is %q, %v; want the standby %q", holder, err, standbyID)
	}
}
