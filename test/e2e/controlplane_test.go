package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kubewharf/kube-gateway/apis/client/clientset/versioned"
	gatewayclient "github.com/kubewharf/kube-gateway/apis/client/clientset/versioned/typed/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// The scenarios in this file stop parts of the control plane (the gateway's
// etcd, the hub), so each runs in an environment of its own and the shared env
// stays untouched for the other tests.

// privateEnv starts an environment for this test alone, like the shared one
// (with hubArgs added to the hub's flags), and stops it when the test ends. A
// failed test keeps its work dir (logs).
func privateEnv(t *testing.T, hubArgs ...string) *harness.Env {
	t.Helper()
	workDir, err := os.MkdirTemp("", "kube-gateway-e2e-"+strings.ToLower(t.Name())+"-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e, err := harness.Start(ctx, harness.Config{
		WorkDir:     workDir,
		HubArgs:     hubArgs,
		GatewayArgs: []string{"--request-timeout=" + gatewayRequestTimeout.String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stopping the private environment: %v", err)
		}
		if t.Failed() {
			t.Logf("kept the work dir with every process log: %s", workDir)
		} else {
			_ = os.RemoveAll(workDir)
		}
	})
	return e
}

func clustersOf(t *testing.T, e *harness.Env) gatewayclient.UpstreamClusterInterface {
	t.Helper()
	c, err := versioned.NewForConfig(e.HubConfig(harness.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	return c.GatewayV1alpha1().UpstreamClusters()
}

// proxyGet GETs path of cluster through e's hub as admin, bounded by a
// deadline of its own.
func proxyGet(ctx context.Context, e *harness.Env, client *http.Client, cluster, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, body, err := tryGet(ctx, client, e.Hub.Servers[0].URL+harness.ProxyPath(cluster)+path)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s through the hub: %s: %s", path, resp.Status, body)
	}
	return nil
}

// steadyLoad sends GETs through the hub to a member from a few goroutines,
// a few per second each, and records every failure.
type steadyLoad struct {
	requests, failures atomic.Int64
	first              atomic.Value // string
	stop               chan struct{}
	wg                 sync.WaitGroup
}

func startLoad(t *testing.T, e *harness.Env, cluster, path string) *steadyLoad {
	t.Helper()
	client, err := rest.HTTPClientFor(e.HubConfig(harness.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	l := &steadyLoad{stop: make(chan struct{})}
	for i := 0; i < 3; i++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-l.stop:
					return
				case <-tick.C:
				}
				l.requests.Add(1)
				if err := proxyGet(context.Background(), e, client, cluster, path); err != nil {
					if l.failures.Add(1) == 1 {
						l.first.Store(fmt.Sprintf("at %s: %v", time.Now().Format(time.RFC3339), err))
					}
				}
			}
		}()
	}
	// The load runs before anything is broken.
	eventually(t, 30*time.Second, func(context.Context) error {
		if n := l.requests.Load() - l.failures.Load(); n < 10 {
			return errorf("%d requests succeeded so far (%d failed: %v)", n, l.failures.Load(), l.first.Load())
		}
		return nil
	})
	t.Cleanup(l.end)
	return l
}

func (l *steadyLoad) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// requireNoFailure ends the load and fails the test if any request failed.
func (l *steadyLoad) requireNoFailure(t *testing.T) {
	t.Helper()
	l.end()
	if n := l.failures.Load(); n != 0 {
		t.Fatalf("%d of %d proxied requests failed; first %v", n, l.requests.Load(), l.first.Load())
	}
	t.Logf("%d proxied requests, none failed", l.requests.Load())
}

// requireServerStatus wants err to be a 5xx Status from the server, returned
// before the caller's deadline ran out.
func requireServerStatus(t *testing.T, what string, ctx context.Context, err error, took time.Duration) {
	t.Helper()
	if ctx.Err() != nil {
		t.Fatalf("%s: no answer before the client's deadline (%v after %s)", what, err, took.Round(time.Millisecond))
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		t.Fatalf("%s: want a Status error, got %v", what, err)
	}
	s := st.Status()
	if s.Code < 500 {
		t.Fatalf("%s: want a 5xx Status, got %d %s: %s", what, s.Code, s.Reason, s.Message)
	}
	t.Logf("%s while etcd is down: %d %s %q after %s", what, s.Code, s.Reason, s.Message, took.Round(time.Millisecond))
}

// gatewayGetIn GETs path from e's gateway directly: anonymously (health
// endpoints are open to anyone), or as the hub's admin the way the hub calls it
// (front-proxy certificate and X-Remote headers).
func gatewayGetIn(ctx context.Context, t *testing.T, e *harness.Env, path string, asAdmin bool) (int, string, error) {
	t.Helper()
	caPEM, err := os.ReadFile(e.GatewayCAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if asAdmin {
		cert, err := tls.LoadX509KeyPair(e.FrontProxyClientCert())
		if err != nil {
			t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.GatewayURL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if asAdmin {
		req.Header.Set("X-Remote-User", harness.UserAdmin)
		req.Header.Set("X-Remote-Group", "system:masters")
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// etcdErrors sums the gateway's etcd_request_errors_total over all series.
func etcdErrors(ctx context.Context, t *testing.T, e *harness.Env) float64 {
	t.Helper()
	code, body, err := gatewayGetIn(ctx, t, e, "/metrics", true)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	var sum float64
	for _, m := range families["etcd_request_errors_total"].GetMetric() {
		sum += m.GetCounter().GetValue()
	}
	return sum
}

// etcdOutage is how long the gateway's etcd stays down.
const etcdOutage = 60 * time.Second

// The gateway's etcd stops for a minute under steady proxied load: every proxied
// request still succeeds (the compiled clusters are in memory), UpstreamCluster
// writes, and reads that must see etcd, fail with a 5xx Status within the
// gateway's request timeout, resourceVersion=0 reads and watches are served from
// the watch cache, /readyz names etcd, and once etcd is back a new UpstreamCluster is served without a
// gateway restart.
func TestGatewayEtcdOutage(t *testing.T) {
	e := privateEnv(t)
	ctx := testContext(t, 5*time.Minute)
	ucs := clustersOf(t, e)
	gatewayPID := e.Gateway.PID()
	existing, err := ucs.Get(ctx, harness.MemberB, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	load := startLoad(t, e, harness.MemberA, "/api/v1/namespaces/default")
	errorsBefore := etcdErrors(ctx, t, e)

	stopped := time.Now()
	if err := e.GatewayEtcd.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("gateway's etcd (pid %d) stopped", e.GatewayEtcd.PID())

	// Writes: a Status, before a deadline a bit above the gateway's request
	// timeout.
	writeDeadline := gatewayRequestTimeout + 10*time.Second
	wctx, cancel := context.WithTimeout(ctx, writeDeadline)
	began := time.Now()
	uc := newCluster("during-outage", e.Members[harness.MemberB].Servers[0].URL)
	_, err = ucs.Create(wctx, uc, metav1.CreateOptions{})
	requireServerStatus(t, "create", wctx, err, time.Since(began))
	cancel()

	wctx, cancel = context.WithTimeout(ctx, writeDeadline)
	began = time.Now()
	update := existing.DeepCopy()
	update.Labels = map[string]string{"outage": "true"}
	_, err = ucs.Update(wctx, update, metav1.UpdateOptions{})
	requireServerStatus(t, "update", wctx, err, time.Since(began))
	cancel()

	// Reads that name no resourceVersion go to etcd and fail the same way...
	rctx, cancel := context.WithTimeout(ctx, writeDeadline)
	began = time.Now()
	_, err = ucs.Get(rctx, harness.MemberB, metav1.GetOptions{})
	requireServerStatus(t, "get", rctx, err, time.Since(began))
	cancel()
	// ...while resourceVersion=0 reads come from the watch cache, and so do
	// watches from a listed version: what informers on UpstreamClusters do.
	rctx, cancel = context.WithTimeout(ctx, writeDeadline)
	list, err := ucs.List(rctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatalf("list with resourceVersion=0 while etcd is down: %v", err)
	}
	if len(list.Items) != 2 {
		t.Fatalf("list with resourceVersion=0 while etcd is down: %d clusters, want 2", len(list.Items))
	}
	w, err := ucs.Watch(rctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("watch from resourceVersion %s while etcd is down: %v", list.ResourceVersion, err)
	}
	w.Stop()
	cancel()

	// The gateway says why: its /readyz fails on etcd.
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		code, body, err := gatewayGetIn(ctx, t, e, "/readyz?verbose", false)
		if err != nil {
			return err
		}
		if code == http.StatusOK || !strings.Contains(body, "[-]etcd") {
			return errorf("/readyz: %d\n%s", code, body)
		}
		return nil
	})

	// The chart's probes leave etcd out: the pods stay in the hub's Service
	// and keep proxying, and are not restarted into a start-up that needs etcd.
	for _, path := range []string{chartReadinessPath, chartLivenessPath} {
		if code, body, err := gatewayGetIn(ctx, t, e, path, false); err != nil || code != http.StatusOK {
			t.Fatalf("the chart's probe %s while etcd is down: %d %v\n%s", path, code, err, body)
		}
	}

	// ...and so do its metrics.
	if n := etcdErrors(ctx, t, e); n <= errorsBefore {
		t.Fatalf("etcd_request_errors_total: %v, was %v before the outage", n, errorsBefore)
	}

	// The rest of the outage: the load keeps running.
	select {
	case <-time.After(time.Until(stopped.Add(etcdOutage))):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if err := e.GatewayEtcd.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	etcdBack := time.Now()
	t.Logf("gateway's etcd back after %s", time.Since(stopped).Round(time.Second))

	// A new cluster is stored and served by the same gateway process.
	back := newCluster("after-outage", e.Members[harness.MemberB].Servers[0].URL)
	eventually(t, 60*time.Second, func(ctx context.Context) error {
		_, err := ucs.Create(ctx, back, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	})
	client, err := rest.HTTPClientFor(e.HubConfig(harness.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func(ctx context.Context) error {
		return proxyGet(ctx, e, client, back.Name, "/version")
	})
	t.Logf("a cluster created after the outage is served %s after etcd was back", time.Since(etcdBack).Round(100*time.Millisecond))
	if !e.Gateway.Running() || e.Gateway.PID() != gatewayPID {
		t.Fatalf("the gateway restarted (pid %d, was %d)", e.Gateway.PID(), gatewayPID)
	}
	load.requireNoFailure(t)
}

// The hub kube-apiserver restarts (same flags, ports and etcd): watches through
// it end instead of hanging, and the gateway's informers and delegated
// authentication and authorization recover without a gateway restart: proxied
// requests succeed again, and a credential Secret changed right after the hub
// is back takes effect.
func TestHubRestart(t *testing.T) {
	// The hub ends open connections, watches included, 2 s after its
	// in-flight requests have drained, instead of at its request timeout
	// (60 s by default), which would only make the test longer.
	e := privateEnv(t, "--shutdown-send-retry-after=true")
	ctx := testContext(t, 5*time.Minute)
	hub := e.Hub.Servers[0]
	gatewayPID := e.Gateway.PID()
	memberA := e.Members[harness.MemberA]
	memberAClient, err := kubernetes.NewForConfig(memberA.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	newUser, newToken := gatewayIdentity(ctx, t, memberAClient, "gateway-after-hub-restart")

	// Three watches through the hub: one the hub serves, one the gateway
	// serves, one proxied to a member.
	hubCS, err := kubernetes.NewForConfig(e.HubConfig(harness.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	proxied, err := kubernetes.NewForConfig(e.ProxyConfig(harness.UserAdmin, harness.MemberA))
	if err != nil {
		t.Fatal(err)
	}
	watches := map[string]watch.Interface{}
	for what, open := range map[string]func() (watch.Interface, error){
		"hub ConfigMaps": func() (watch.Interface, error) {
			return hubCS.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
		},
		"UpstreamClusters": func() (watch.Interface, error) { return clustersOf(t, e).Watch(ctx, metav1.ListOptions{}) },
		"member-a ConfigMaps, proxied": func() (watch.Interface, error) {
			return proxied.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
		},
	} {
		w, err := open()
		if err != nil {
			t.Fatalf("watch %s: %v", what, err)
		}
		watches[what] = w
	}

	// SIGTERM: the hub shuts down gracefully, as in a rolling restart.
	stopAt := time.Now()
	ended := make(chan string, len(watches))
	for what, w := range watches {
		go func() {
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					t.Logf("%s: error event %v", what, apierrors.FromObject(ev.Object))
				}
			}
			ended <- what
		}()
	}
	if err := hub.Process.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("hub exited %s after SIGTERM", time.Since(stopAt).Round(time.Millisecond))
	bound := time.After(10 * time.Second)
	for range watches {
		select {
		case what := <-ended:
			t.Logf("%s: ended %s after SIGTERM", what, time.Since(stopAt).Round(time.Millisecond))
		case <-bound:
			t.Fatalf("a watch through the hub is still open 10s after the hub exited")
		}
	}
	if err := hub.Process.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("hub back at %s", hub.URL)

	// Right after the hub is back: the member-a credential changes to another
	// valid identity on member-a.
	secrets := hubCS.CoreV1().Secrets(harness.GatewayNamespace)
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		s, err := secrets.Get(ctx, harness.MemberA, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Data["token"] = []byte(newToken)
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		return err
	})

	// Proxied requests succeed again (alice: the gateway authorizes her with
	// the hub), and member-a sees them from the new identity.
	alice, err := rest.HTTPClientFor(e.HubConfig(harness.UserAlice))
	if err != nil {
		t.Fatal(err)
	}
	fromNew := func() int {
		n := 0
		for _, s := range memberA.Servers {
			n += countAudit(t, s, func(ev *auditEvent) bool {
				return ev.User.Username == newUser && ev.ImpersonatedUser != nil && ev.ImpersonatedUser.Username == harness.UserAlice
			})
		}
		return n
	}
	var failed int
	var first, last error
	eventually(t, 2*time.Minute, func(ctx context.Context) error {
		err := proxyGet(ctx, e, alice, harness.MemberA, "/api/v1/namespaces/alice/pods")
		if err == nil && fromNew() == 0 {
			err = errorf("member-a has seen no request from %s yet", newUser)
		}
		if err != nil && ctx.Err() != nil && last != nil {
			return last // the poll's deadline, not news
		}
		if err != nil {
			if failed++; first == nil {
				first = err
			}
		}
		last = err
		return err
	})
	t.Logf("proxied requests succeed again, as %s on member-a (%d failed attempts on the way, first: %v)", newUser, failed, first)
	if !e.Gateway.Running() || e.Gateway.PID() != gatewayPID {
		t.Fatalf("the gateway restarted (pid %d, was %d)", e.Gateway.PID(), gatewayPID)
	}
}
