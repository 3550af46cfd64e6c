package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// Two gateway replicas divide a token bucket of 20 qps: driven as fast as they
// admit for 20 s, together they admit qps x window (+ burst) within 10 %. The
// emergency brake (max in-flight 0) refuses on both. Once one replica stops,
// the other admits the whole 20 qps.
//
// The replicas are gateways of the test's own, in a replica group of their own
// (--status-lease-name), so that the suite's gateway and other tests' gateways
// are not counted. The suite's environment grants the gateway's identity no
// list, watch or delete on Leases (harness.Config.StatusLeaseOnly: each
// replica then enforces whole limits); the test grants them as the chart
// does, and takes them back at the end.
func TestLimitsSplitAcrossReplicas(t *testing.T) {
	const (
		qps, burst = 20, 4
		window     = 20 * time.Second
		group      = "replicas-e2e-status"
	)
	ctx := testContext(t, 5*time.Minute)
	grantReplicaLeases(ctx, t)

	uc := memberACluster("split-limits")
	tokenBucket := &gatewayv1alpha1.FlowControl{FlowControlSchemas: []gatewayv1alpha1.FlowControlSchema{
		{Name: "twenty-per-second", TokenBucket: &gatewayv1alpha1.TokenBucketFlowControl{QPS: *resource.NewQuantity(int64(qps), resource.DecimalSI), Burst: burst}},
	}}
	policies := []gatewayv1alpha1.DispatchPolicy{{Rules: everything[:1], FlowControlSchemaName: "twenty-per-second"}}
	uc.Spec.FlowControl, uc.Spec.DispatchPolicies = tokenBucket, policies
	createCluster(t, uc)

	var gws [2]extraGatewayClient
	var procs [2]*harness.Process
	for i := range gws {
		p, url, err := env.StartExtraGateway(ctx, fmt.Sprintf("kube-gateway-replica-%d", i), "--status-lease-name="+group)
		t.Cleanup(func() { _ = p.Stop() })
		if err != nil {
			t.Fatal(err)
		}
		procs[i] = p
		gws[i] = extraGatewayClient{t: t, url: url, prefix: harness.ProxyPath(uc.Name), c: gatewayClient(t, true)}
	}
	waitReplicas := func(within time.Duration, want float64, gws ...extraGatewayClient) {
		t.Helper()
		eventually(t, within, func(ctx context.Context) error {
			for i, g := range gws {
				if v, _ := g.metric(ctx, "kube_gateway_replicas", nil); v != want {
					return errorf("replica %d counts %v replicas, want %v", i, v, want)
				}
			}
			return nil
		})
	}
	waitReplicas(30*time.Second, 2, gws[:]...)
	const path = "/api/v1/namespaces/alice/configmaps"
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		for i, g := range gws {
			if code, body := g.proxy(ctx, http.MethodGet, path); code != http.StatusOK && code != http.StatusTooManyRequests {
				return errorf("replica %d: %d %s", i, code, body)
			}
		}
		return nil
	})

	// Both replicas, each offered twice the whole limit.
	counts := drive(ctx, t, window, 2*qps, gws[:]...)
	admitted := counts[0] + counts[1]
	want := qps*window.Seconds() + burst
	t.Logf("2 replicas, %s: admitted %d + %d = %d, want %.0f ± 10%%", window, counts[0], counts[1], admitted, want)
	if d := float64(admitted) - want; d > want/10 || d < -want/10 {
		t.Fatalf("2 replicas admitted %d requests in %s of a %d qps bucket (burst %d), want %.0f ± 10%%", admitted, window, qps, burst, want)
	}

	// The emergency brake refuses on every replica.
	setFlowControl(ctx, t, uc.Name, &gatewayv1alpha1.FlowControl{FlowControlSchemas: []gatewayv1alpha1.FlowControlSchema{
		{Name: "twenty-per-second", MaxRequestsInflight: &gatewayv1alpha1.MaxRequestsInflightFlowControl{Max: 0}},
	}})
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		for i, g := range gws {
			for n := 0; n < 5; n++ {
				if code, err := getCode(ctx, g, path); code != http.StatusTooManyRequests {
					return errorf("replica %d with max in-flight 0: %d %v, want 429", i, code, err)
				}
			}
		}
		return nil
	})
	setFlowControl(ctx, t, uc.Name, tokenBucket)
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		for i, g := range gws {
			if code, body := g.proxy(ctx, http.MethodGet, path); code != http.StatusOK {
				return errorf("replica %d with the token bucket back: %d %s", i, code, body)
			}
		}
		return nil
	})

	// One replica stops (SIGTERM: it deletes its Lease); the other takes the
	// whole limit at once, well before the 15 s the Lease would stay valid.
	if err := procs[1].Stop(); err != nil {
		t.Fatal(err)
	}
	waitReplicas(5*time.Second, 1, gws[0])
	const window1 = 10 * time.Second
	alone := drive(ctx, t, window1, 2*qps, gws[0])[0]
	want = qps*window1.Seconds() + burst
	t.Logf("1 replica, %s: admitted %d, want %.0f ± 10%%", window1, alone, want)
	if d := float64(alone) - want; d > want/10 || d < -want/10 {
		t.Fatalf("the remaining replica admitted %d requests in %s of a %d qps bucket (burst %d), want %.0f ± 10%%", alone, window1, qps, burst, want)
	}
}

// grantReplicaLeases lets the gateway's identity list, watch and delete Leases
// in the gateway namespace until the test ends; then it waits until the suite's
// gateway, which could count replicas meanwhile, counts 1 again.
func grantReplicaLeases(ctx context.Context, t *testing.T) {
	t.Helper()
	const name = "kube-gateway:replica-leases"
	admin := hubAdmin(t)
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: harness.GatewayNamespace},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list", "watch", "delete"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: harness.GatewayNamespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: harness.UserGateway}},
	}
	if _, err := admin.RbacV1().Roles(role.Namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(binding.Namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = admin.RbacV1().RoleBindings(binding.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		_ = admin.RbacV1().Roles(role.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		eventually(t, time.Minute, func(context.Context) error {
			if n := gatewayCounter(t, "kube_gateway_replicas", nil); n != 1 {
				return errorf("the suite's gateway counts %v replicas, want 1", n)
			}
			return nil
		})
	})
}

// drive sends GETs of the cluster's configmaps to every gateway for window, at
// offered requests a second to each, and returns how many each admitted (200).
// A request that got neither 200 nor 429 fails the test.
func drive(ctx context.Context, t *testing.T, window time.Duration, offered int, gws ...extraGatewayClient) []int {
	t.Helper()
	admitted := make([]atomic.Int64, len(gws))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string
	)
	end := time.Now().Add(window)
	for i, g := range gws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ticker := time.NewTicker(time.Second / time.Duration(offered))
			defer ticker.Stop()
			inflight := make(chan struct{}, 2*offered) // bounds the goroutines of a slow gateway
			var reqs sync.WaitGroup
			defer reqs.Wait()
			for now := range ticker.C {
				if !now.Before(end) {
					return
				}
				select {
				case inflight <- struct{}{}:
				default:
					continue // still busy: this offer is skipped
				}
				reqs.Add(1)
				go func() {
					defer reqs.Done()
					defer func() { <-inflight }()
					code, err := getCode(ctx, g, "/api/v1/namespaces/alice/configmaps")
					switch {
					case code == http.StatusOK:
						admitted[i].Add(1)
					case code != http.StatusTooManyRequests:
						mu.Lock()
						failures = append(failures, fmt.Sprintf("replica %d: %d %v", i, code, err))
						mu.Unlock()
					}
				}()
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d requests got neither 200 nor 429, the first: %s", len(failures), failures[0])
	}
	out := make([]int, len(gws))
	for i := range admitted {
		out[i] = int(admitted[i].Load())
	}
	return out
}

// getCode is g.proxy for goroutines other than the test's: it reports errors.
func getCode(ctx context.Context, g extraGatewayClient, path string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.url+g.prefix+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header = harness.AdminFrontProxyHeader()
	resp, err := g.c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// setFlowControl replaces the cluster's flow-control schemas, again on
// conflicts with status writes.
func setFlowControl(ctx context.Context, t *testing.T, cluster string, fc *gatewayv1alpha1.FlowControl) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		uc, err := upstreamClusters(t).Get(ctx, cluster, metav1.GetOptions{})
		if err != nil {
			return err
		}
		uc.Spec.FlowControl = fc
		_, err = upstreamClusters(t).Update(ctx, uc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
