package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewharf/kube-gateway/test/harness"
)

// Server metrics of a konnectivity server: dials it opened (to an agent) and
// tunnelled connections open now.
const (
	serverDials       = "konnectivity_network_proxy_server_dial_duration_seconds_count"
	serverEstablished = "konnectivity_network_proxy_server_established_connections"
)

// Two konnectivity servers (--server-count=2), the member's agent connected to
// each, the cluster naming both in spec.clientConfig.konnectivity.addresses.
// The server that carries the gateway's connections is killed under steady
// GETs: no GET fails (the gateway retries one whose connection broke), the
// watch and the exec session that went through it end and open again
// through the other server. The killed server comes back: the agent
// reconnects to it, and it carries the gateway's connections again when the
// other one goes, all with the same gateway process.
func TestKonnectivityServerFailover(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	const cluster = "member-a-tunnel-ha"
	k, err := env.StartKonnectivityServers(ctx, harness.MemberA, cluster, 2)
	t.Cleanup(func() {
		_ = upstreamClusters(t).Delete(context.Background(), cluster, metav1.DeleteOptions{})
		_ = hubAdmin(t).CoreV1().Secrets(harness.GatewayNamespace).Delete(context.Background(), cluster+"-konnectivity", metav1.DeleteOptions{})
		if k != nil {
			if err := k.Close(); err != nil {
				t.Error(err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	gatewayPID := env.Gateway.PID()
	serverMetric := func(i int, name string) float64 {
		t.Helper()
		v, err := k.ServerMetricOf(ctx, i, name)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// The gateway dials through the first server while it takes the dials.
	if n := serverMetric(0, serverDials); n < 1 {
		t.Fatalf("the cluster answered, but the first konnectivity server opened %v dials", n)
	}
	if n := serverMetric(1, serverDials); n != 0 {
		t.Errorf("the second konnectivity server opened %v dials while the first worked, want 0", n)
	}

	alice, err := kubernetes.NewForConfig(env.ProxyConfig(harness.UserAlice, cluster))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := kubernetes.NewForConfig(env.Members[harness.MemberA].AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	createConfigMap := func(name string) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := admin.CoreV1().ConfigMaps(tunnelNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.CoreV1().ConfigMaps(tunnelNamespace).Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	watchSees := func(w watch.Interface, name string) {
		t.Helper()
		createConfigMap(name)
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("the watch ended before it saw %s", name)
				}
				if cm, isCM := ev.Object.(*corev1.ConfigMap); ev.Type == watch.Added && isCM && cm.Name == name {
					return
				}
			case <-ctx.Done():
				t.Fatalf("the watch saw no ADDED %s", name)
			}
		}
	}
	openWatch := func() watch.Interface {
		t.Helper()
		w, err := alice.CoreV1().ConfigMaps(tunnelNamespace).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		return w
	}

	// A watch and an exec session, through the first server.
	w := openWatch()
	watchSees(w, "ha-before")
	session := startCatSession(ctx, t, "alice@"+cluster)
	session.echo(t, "before")
	if n := serverMetric(0, serverEstablished); n < 2 {
		t.Fatalf("the first konnectivity server has %v tunnelled connections, want the gateway's pooled one and the exec session's", n)
	}

	// Steady GETs, each counted once: a client without client-go's retries.
	httpClient, err := rest.HTTPClientFor(env.ProxyConfig(harness.UserAlice, cluster))
	if err != nil {
		t.Fatal(err)
	}
	getURL := env.Hub.Servers[0].URL + harness.ProxyPath(cluster) + "/api/v1/namespaces/" + tunnelNamespace + "/configmaps/ha-before"
	gets := startSteadyGets(ctx, httpClient, getURL)
	eventually(t, 30*time.Second, func(context.Context) error {
		if ok, _ := gets.counts(); ok < 20 {
			return errorf("%d GETs answered, want 20 before the fault", ok)
		}
		return nil
	})
	retriesBefore := tunnelRetries(t, cluster, k)
	okBefore, _ := gets.counts()

	// The first server dies.
	if err := k.Servers[0].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func(context.Context) error {
		if k.Servers[0].Running() {
			return errorf("konnectivity server 0 still running")
		}
		return nil
	})
	// The watch and the session through it end, and open again through the
	// other server.
	select {
	case _, ok := <-w.ResultChan():
		for ok {
			_, ok = <-w.ResultChan()
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watch through the killed konnectivity server did not end")
	}
	if err := session.wait(t, 30*time.Second); err == nil {
		t.Error("the exec session through the killed konnectivity server ended without an error")
	} else {
		t.Logf("the exec session through the killed konnectivity server ended: %v", err)
	}
	watchSees(openWatch(), "ha-after")
	again := startCatSession(ctx, t, "alice@"+cluster)
	again.echo(t, "after")
	if n := serverMetric(1, serverEstablished); n < 2 {
		t.Errorf("the second konnectivity server has %v tunnelled connections, want the gateway's pooled one and the exec session's", n)
	}
	// GETs keep going through the second server for a while.
	eventually(t, 30*time.Second, func(context.Context) error {
		if ok, _ := gets.counts(); ok < okBefore+200 {
			return errorf("%d GETs answered since the kill, want 200", ok-okBefore)
		}
		return nil
	})
	ok, failed := gets.stop()
	t.Logf("steady GETs: %d answered, %d failed; the gateway retried %v", ok, len(failed), tunnelRetries(t, cluster, k)-retriesBefore)
	for _, f := range failed {
		t.Errorf("GET failed: %s", f)
	}

	// The first server comes back: the agent connects to it again, and it
	// takes the gateway's dials when the second one goes.
	if err := k.Servers[0].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func(ctx context.Context) error { return k.AgentConnected(ctx, 0) })
	again.close()
	if err := k.Servers[1].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		_, err := alice.CoreV1().ConfigMaps(tunnelNamespace).Get(ctx, "ha-after", metav1.GetOptions{})
		return err
	})
	if pid := env.Gateway.PID(); pid != gatewayPID {
		t.Errorf("gateway pid %d, was %d: it restarted", pid, gatewayPID)
	}
}

// tunnelRetries is the gateway's count of retried requests of cluster, over
// its endpoints.
func tunnelRetries(t *testing.T, cluster string, k *harness.Konnectivity) float64 {
	var n float64
	for _, ep := range k.Endpoints {
		n += gatewayCounter(t, "kube_gateway_proxy_retries_total", map[string]string{"cluster": cluster, "endpoint": ep})
	}
	return n
}

// steadyGets sends GETs, one after another from each of a few workers (so
// that some are in flight when a fault comes), until stopped, and counts the
// answers: 200, or a failure described.
type steadyGets struct {
	mu     sync.Mutex
	ok     int
	failed []string
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startSteadyGets(ctx context.Context, c *http.Client, url string) *steadyGets {
	const workers = 4
	ctx, cancel := context.WithCancel(ctx)
	g := &steadyGets{cancel: cancel}
	for range workers {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			pace := time.NewTicker(20 * time.Millisecond)
			defer pace.Stop()
			for ; ctx.Err() == nil; <-pace.C {
				g.get(ctx, c, url)
			}
		}()
	}
	return g
}

func (g *steadyGets) get(ctx context.Context, c *http.Client, url string) {
	failure := ""
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			failure = fmt.Sprintf("%s: %s", resp.Status, body)
		}
	} else {
		failure = err.Error()
	}
	if ctx.Err() != nil {
		return // stopped: not an answer
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if failure == "" {
		g.ok++
	} else {
		g.failed = append(g.failed, time.Now().Format(time.StampMilli)+" "+failure)
	}
}

func (g *steadyGets) counts() (ok, failed int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ok, len(g.failed)
}

func (g *steadyGets) stop() (ok int, failed []string) {
	g.cancel()
	g.wg.Wait()
	return g.ok, g.failed
}

// catSession is kubectl exec -i running cat in the shell pod: a line written
// comes back while the session lives.
type catSession struct {
	stdin  io.WriteCloser
	stdout *bufio.Reader
	done   chan error
}

func startCatSession(ctx context.Context, t *testing.T, kubeconfig string) *catSession {
	t.Helper()
	cmd := env.KubectlCmd(ctx, kubeconfig, "--namespace="+tunnelNamespace, "exec", "-i", harness.ShellPod, "-c", "main", "--", "cat")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &catSession{stdin: stdin, stdout: bufio.NewReader(stdout), done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() {
		s.close()
		_ = cmd.Process.Kill()
		<-s.done
	})
	return s
}

// echo writes a line and reads it back.
func (s *catSession) echo(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(s.stdin, line+"\n"); err != nil {
		t.Fatal(err)
	}
	got, err := s.stdout.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("exec cat: read %q, %v; want %q", got, err, line)
	}
}

// wait returns how kubectl ended; the test fails when it is still running
// after timeout.
func (s *catSession) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		return err
	case <-time.After(timeout):
		t.Fatalf("kubectl exec still running %s after its konnectivity server died", timeout)
		return nil
	}
}

func (s *catSession) close() { _ = s.stdin.Close() }
