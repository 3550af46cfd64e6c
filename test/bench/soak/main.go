// Command soak runs mixed traffic through hub + gateway for a long time while
// the UpstreamCluster is edited and its credential rotated, and reports
// whether anything fails or leaks: requests the client could not retry, the
// gateway's RSS growth after a warm-up, its goroutines and open files, the
// latency of GETs over time. It starts the test/harness environment (real
// etcd, hub, members, gateway) and drives member-a through the hub's proxy
// prefix as the hub admin:
//
//   - GET of one ConfigMap and LIST of 200 ConfigMaps at fixed rates
//     (client-go, which retries what may be retried: 429 and 503 with
//     Retry-After, and idempotent requests on connection resets);
//   - watches of the ConfigMaps, each asking for a timeout of a minute, so
//     that they end and are opened again all the time;
//   - kubectl exec (WebSocket) sessions with a known answer, and a kubectl
//     port-forward session held open for the whole run with a connection
//     echoing through it now and then;
//   - every -edit-every, a change of member-a's dispatch policies (a
//     recompilation); every -rotate-every, the member-a credential Secret
//     switched between two valid credentials.
//
// It writes report.md, series.csv and series.svg (RSS, goroutines, open files
// and GET p99 over time) to -out-dir.
//
//	make soak                            # 30 minutes
//	make soak SOAK_ARGS="-duration 3m"   # the short form
//
// It is a report, not a test: it exits non-zero only when it cannot measure.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kubewharf/kube-gateway/apis/client/clientset/versioned"
	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/harness"
)

type options struct {
	Duration, Warmup, Sample time.Duration
	EditEvery, RotateEvery   time.Duration
	GetRate, ListRate        float64
	Watches                  int
	ExecEvery, PingEvery     time.Duration
	OutDir                   string
}

func main() {
	var o options
	flag.DurationVar(&o.Duration, "duration", 30*time.Minute, "how long the traffic runs")
	flag.DurationVar(&o.Warmup, "warmup", 0, "growth is judged from the end of the warm-up (default: a sixth of -duration, 5 min for 30 min)")
	flag.DurationVar(&o.Sample, "sample", 5*time.Second, "period of the series")
	flag.DurationVar(&o.EditEvery, "edit-every", 2*time.Minute, "period of the UpstreamCluster edits")
	flag.DurationVar(&o.RotateEvery, "rotate-every", 3*time.Minute, "period of the credential rotations")
	flag.Float64Var(&o.GetRate, "get-rate", 20, "GETs per second")
	flag.Float64Var(&o.ListRate, "list-rate", 2, "LISTs of 200 ConfigMaps per second")
	flag.IntVar(&o.Watches, "watches", 20, "watches held open (each re-opened when it ends)")
	flag.DurationVar(&o.ExecEvery, "exec-every", 5*time.Second, "period of the kubectl exec sessions")
	flag.DurationVar(&o.PingEvery, "ping-every", 10*time.Second, "period of the connections through the port-forward session")
	flag.StringVar(&o.OutDir, "out-dir", "_output/soak", "directory for report.md, series.csv and series.svg")
	flag.Parse()
	if o.Warmup == 0 {
		o.Warmup = o.Duration / 6
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		os.Exit(1)
	}
}

const ns = "soak"

// counts is what one kind of traffic gave.
type counts struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	examples   []string
}

func (c *counts) result(err error) {
	if err == nil {
		c.ok.Add(1)
		return
	}
	c.failed.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.examples) < 5 {
		c.examples = append(c.examples, fmt.Sprintf("%s: %v", time.Now().UTC().Format("15:04:05"), err))
	}
}

// soak is the running scenario.
type soak struct {
	env    *harness.Env
	o      options
	member kubernetes.Interface // member-a through hub + gateway, as the hub admin
	kinds  map[string]*counts
	// GET latencies of the current sample window.
	latMu            sync.Mutex
	lat              []time.Duration
	edits, rotations atomic.Int64
}

func run(ctx context.Context, o options) error {
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return err
	}
	started := time.Now()
	workDir, err := os.MkdirTemp("", "kube-gateway-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(workDir)
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	env, err := harness.Start(startCtx, harness.Config{WorkDir: workDir, Log: os.Stderr})
	cancel()
	if err != nil {
		return fmt.Errorf("starting the environment: %w", err)
	}
	defer env.Stop()

	cfg := env.ProxyConfig(harness.UserAdmin, harness.MemberA)
	cfg.QPS, cfg.Burst = -1, 0 // the rate limiters below pace the traffic
	member, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	s := &soak{env: env, o: o, member: member, kinds: map[string]*counts{}}
	for _, k := range []string{"get", "list", "watch", "exec", "port-forward", "edit", "rotate"} {
		s.kinds[k] = &counts{}
	}
	if err := s.setup(ctx); err != nil {
		return err
	}
	rotate, err := s.credentials(ctx)
	if err != nil {
		return err
	}

	runCtx, stopRun := context.WithTimeout(ctx, o.Duration)
	defer stopRun()
	var wg sync.WaitGroup
	wg.Go(func() { s.paced(runCtx, o.GetRate, "get", s.get) })
	wg.Go(func() {
		s.paced(runCtx, o.ListRate, "list", func(ctx context.Context) error {
			_, err := s.member.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			return err
		})
	})
	for range o.Watches {
		wg.Go(func() { s.watch(runCtx) })
	}
	wg.Go(func() { s.every(runCtx, o.ExecEvery, "exec", s.exec) })
	wg.Go(func() { s.portForward(runCtx) })
	wg.Go(func() { s.every(runCtx, o.EditEvery, "edit", s.edit) })
	wg.Go(func() { s.every(runCtx, o.RotateEvery, "rotate", rotate) })
	series := s.sample(runCtx, started)
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return s.report(started, series)
}

// setup creates the namespace and its 200 ConfigMaps on member-a.
func (s *soak) setup(ctx context.Context) error {
	if _, err := s.member.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for i := range 200 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)}, Data: map[string]string{"v": strings.Repeat("x", 512)}}
		if _, err := s.member.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// credentials prepares a second valid credential for member-a (a service
// account that may impersonate, as the gateway's own identity may) and
// returns the rotation: each call switches the member-a Secret on the hub to
// the other credential.
func (s *soak) credentials(ctx context.Context) (func(context.Context) error, error) {
	ma, err := kubernetes.NewForConfig(s.env.Members[harness.MemberA].Config(harness.UserAdmin, 0))
	if err != nil {
		return nil, err
	}
	const sa = "soak-gateway"
	if _, err := ma.CoreV1().ServiceAccounts("kube-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := ma.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kube-gateway:impersonator"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: sa}},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	tr, err := ma.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	hub, err := kubernetes.NewForConfig(s.env.HubConfig(harness.UserAdmin))
	if err != nil {
		return nil, err
	}
	secrets := hub.CoreV1().Secrets(harness.GatewayNamespace)
	original, err := secrets.Get(ctx, harness.MemberA, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	tokens := [][]byte{original.Data["token"], []byte(tr.Status.Token)}
	var n int
	return func(ctx context.Context) error {
		n++
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			sec, err := secrets.Get(ctx, harness.MemberA, metav1.GetOptions{})
			if err != nil {
				return err
			}
			sec.Data["token"] = tokens[n%2]
			_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
			return err
		}); err != nil {
			return err
		}
		s.rotations.Add(1)
		return nil
	}, nil
}

// paced calls fn at perSecond until ctx ends, each call on its own goroutine
// (an open loop: a slow answer does not slow the schedule), and counts.
func (s *soak) paced(ctx context.Context, perSecond float64, kind string, fn func(context.Context) error) {
	lim := rate.NewLimiter(rate.Limit(perSecond), 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	for lim.Wait(ctx) == nil {
		wg.Go(func() {
			err := fn(ctx)
			if ctx.Err() == nil {
				s.kinds[kind].result(err)
			}
		})
	}
}

// every calls fn every period until ctx ends, and counts.
func (s *soak) every(ctx context.Context, period time.Duration, kind string, fn func(context.Context) error) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := fn(ctx)
		if ctx.Err() == nil {
			s.kinds[kind].result(err)
		}
	}
}

func (s *soak) get(ctx context.Context) error {
	start := time.Now()
	_, err := s.member.CoreV1().ConfigMaps(ns).Get(ctx, "cm-000", metav1.GetOptions{})
	if err == nil {
		s.latMu.Lock()
		s.lat = append(s.lat, time.Since(start))
		s.latMu.Unlock()
	}
	return err
}

// watch holds one watch open, opening it again whenever it ends: the member
// ends it after the timeout asked for; anything else that ends it early, or
// fails to open it, counts as a failure.
func (s *soak) watch(ctx context.Context) {
	for ctx.Err() == nil {
		opened := time.Now()
		w, err := s.member.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{TimeoutSeconds: ptr.To[int64](60), AllowWatchBookmarks: true})
		if err != nil {
			if ctx.Err() == nil {
				s.kinds["watch"].result(err)
				time.Sleep(time.Second) // back off before opening again
			}
			continue
		}
		var failure error
		for ev := range w.ResultChan() {
			if ev.Type == "ERROR" {
				failure = fmt.Errorf("watch error event: %v", ev.Object)
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return
		}
		if failure == nil && time.Since(opened) < 50*time.Second {
			failure = fmt.Errorf("watch ended after %s, asked for 60s", time.Since(opened).Round(time.Second))
		}
		s.kinds["watch"].result(failure)
	}
}

// exec runs one kubectl exec (WebSocket) through hub + gateway with a known answer.
func (s *soak) exec(ctx context.Context) error {
	marker := fmt.Sprintf("soak-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, stderr, err := s.env.Kubectl(ctx, harness.UserAdmin+"@"+harness.MemberA, "--namespace="+harness.AliceNamespace,
		"exec", harness.ShellPod, "-c", "main", "--", "echo", marker)
	if err != nil {
		return err
	}
	if out != marker+"\n" {
		return fmt.Errorf("exec printed %q (stderr %q), want %q", out, stderr, marker)
	}
	return nil
}

var forwarding = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)

// portForward holds a kubectl port-forward session (WebSocket) through hub +
// gateway for the whole run and sends a connection through it every
// -ping-every; a session that ends is a failure, and is started again.
func (s *soak) portForward(ctx context.Context) {
	for ctx.Err() == nil {
		err := s.forwardSession(ctx)
		if ctx.Err() == nil {
			s.kinds["port-forward"].result(fmt.Errorf("session ended: %w", err))
			time.Sleep(time.Second)
		}
	}
}

func (s *soak) forwardSession(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := s.env.KubectlCmd(ctx, harness.UserAdmin+"@"+harness.MemberA, "--namespace="+harness.AliceNamespace,
		"port-forward", "--address=127.0.0.1", "pod/"+harness.ShellPod, ":8080")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := forwarding.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case port <- m[1]:
				default:
				}
			}
		}
		close(port)
	}()
	local, ok := <-port
	if !ok {
		return fmt.Errorf("kubectl port-forward did not start: %s", stderr.String())
	}
	t := time.NewTicker(s.o.PingEvery)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		err := ping(local, i)
		if ctx.Err() != nil {
			return nil
		}
		s.kinds["port-forward"].result(err)
		if err != nil {
			return fmt.Errorf("%w (kubectl: %s)", err, strings.TrimSpace(stderr.String()))
		}
	}
}

// ping sends a line through the forwarded port and reads its echo.
func ping(port string, i int) error {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 10*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	msg := []byte(fmt.Sprintf("ping %d\n", i))
	if _, err := conn.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, got); err != nil {
		return err
	}
	if string(got) != string(msg) {
		return fmt.Errorf("echo %q, want %q", got, msg)
	}
	return nil
}

// edit changes member-a's dispatch policies: a policy that sends the soak
// namespace's reads to the same servers appears or goes. Each is a new
// generation that the gateway compiles while traffic flows.
func (s *soak) edit(ctx context.Context) error {
	c, err := versioned.NewForConfig(s.env.HubConfig(harness.UserAdmin))
	if err != nil {
		return err
	}
	ucs := c.GatewayV1alpha1().UpstreamClusters()
	// The gateway's status writes change the object too: a conflict is
	// retried, as any client that updates does.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		uc, err := ucs.Get(ctx, harness.MemberA, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(uc.Spec.DispatchPolicies) == 0 {
			uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{Name: "soak-reads", Strategy: gatewayv1alpha1.LeastRequest,
				Rules: []gatewayv1alpha1.DispatchPolicyRule{{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, Namespaces: []string{ns}}}}}
		} else {
			uc.Spec.DispatchPolicies = nil
		}
		_, err = ucs.Update(ctx, uc, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return err
	}
	s.edits.Add(1)
	return nil
}

// point is one sample of the series.
type point struct {
	T                     time.Duration
	RSSKB                 int64
	Goroutines, OpenFiles int
	GetP99                time.Duration
	Gets                  int
}

// sample reads the gateway every -sample until ctx ends.
func (s *soak) sample(ctx context.Context, started time.Time) []point {
	_, gw, _, err := measure.Targets(s.env, harness.MemberA, 10*time.Second)
	if err != nil {
		logf("gateway client: %v", err)
		return nil
	}
	root := *gw
	root.Base = s.env.GatewayURL
	pid := s.env.Gateway.PID()
	var out []point
	t := time.NewTicker(s.o.Sample)
	defer t.Stop()
	next := s.o.Sample
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		p := point{T: time.Since(started)}
		p.RSSKB, _ = measure.RSSKB(pid)
		p.OpenFiles, _, _ = measure.OpenFiles(pid)
		m, err := root.Scrape(ctx, s.env.GatewayURL+"/metrics")
		if ctx.Err() != nil {
			return out // the run ended during this sample
		}
		if err != nil {
			logf("scraping the gateway: %v", err)
			continue
		}
		g, _ := m.Sum("go_goroutines", nil)
		p.Goroutines = int(g)
		s.latMu.Lock()
		lat := s.lat
		s.lat = nil
		s.latMu.Unlock()
		p.Gets = len(lat)
		p.GetP99 = measure.Pct(measure.SortDurations(lat), 99)
		out = append(out, p)
		if p.T >= next {
			logf("%s: RSS %s, %d goroutines, %d open files, GET p99 %s over %d; failures so far: %s",
				p.T.Round(time.Second), measure.MB(float64(p.RSSKB)), p.Goroutines, p.OpenFiles, measure.Dur(p.GetP99), p.Gets, s.failures())
			next += time.Minute
		}
	}
}

func (s *soak) failures() string {
	var parts []string
	for _, k := range sortedKinds(s.kinds) {
		if n := s.kinds[k].failed.Load(); n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func sortedKinds(m map[string]*counts) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[soak %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

var errNoSamples = errors.New("no samples")
