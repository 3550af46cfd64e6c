// Command bench compares three ways to reach the same member apiserver object
// (and a fourth, the floor: a minimal Go reverse proxy), on one machine, in
// one run, interleaved and repeated:
//
//	direct    client -> member-b kube-apiserver (member admin token)
//	gateway   client -> kube-gateway -> member-b (the hub's front-proxy client
//	          certificate and X-Remote-User/Group, as the hub's aggregator sends)
//	hub       client -> hub kube-apiserver -> kube-gateway -> member-b (hub admin token)
//	floor     client -> test/bench/floorproxy -> member-b (a minimal Go reverse
//	          proxy that adds the member admin token; -floor=false drops it)
//	direct-mode  client -> kube-gateway -> member-b (hub admin token sent straight
//	          to a gateway started with --direct-access; only with -direct-mode)
//	konnectivity client -> kube-gateway -> konnectivity server -> agent -> member-b
//	          (as gateway, through a tunnel; only with -konnectivity)
//
// It starts the test environment of test/harness (etcd, hub, members, gateway)
// in a temporary directory, creates ConfigMap bench/target and 10,000
// ConfigMaps in bench-list on member-b, then measures GET-by-name latency and
// throughput at concurrency 1 and 16, the CPU time of every process per
// request, the same CPU and latency at one fixed request rate for every target
// (an open loop: CPU per request does not depend on each target's own
// throughput), full LISTs of 10,000 objects (time, first byte, the gateway's RSS
// growth and allocations), and CPU profiles of the gateway under load. It
// prints a markdown report and writes it, with the profiles, to -out-dir.
// docs/benchmark.md explains the method and reads a run.
//
//	make bench                                   # BENCH_ARGS="-rounds 3" to pass flags
//	go run ./test/bench -out-dir _output/bench [-rounds 5] [-requests 1500] [-duration 6s] [-rate 200] [-direct-mode]
//
// It is a report, not a test: it exits non-zero only when it cannot measure.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewharf/kube-gateway/test/bench/internal/floor"
	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/harness"
)

type options struct {
	Rounds            int
	Requests          int           // per target per round at concurrency 1
	Concurrency       int           // the throughput run
	Duration          time.Duration // per target per round at Concurrency
	Rate              float64       // GETs per second of the fixed-rate run, the same for every target
	RateDuration      time.Duration // per target per round at Rate
	RateInflight      int           // most requests outstanding in the fixed-rate run
	ListObjects       int
	ListPerRound      int
	Workers           int // creating the LIST objects
	ProfileSeconds    int
	TraceSeconds      int // the execution traces of the c=1 tail
	Idle              time.Duration
	OutDir            string
	Out               string
	Keep              bool
	GatewayEnv        []string
	GatewayArgs       []string
	Floor             bool // the floor target (test/bench/floorproxy)
	FloorImpersonates bool // the floor impersonates the gateway target's identity with the gateway's member token
	DirectMode        bool // the gateway runs with --direct-access; the direct-mode target
	Konnectivity      bool // the konnectivity target: member-b through a konnectivity server and agent
	MemberDoor        bool // the member door targets: member-b's own certificate and token
}

const (
	member        = harness.MemberB
	tunnelCluster = member + "-tunnel" // member through the konnectivity tunnel
	targetNS      = "bench"
	targetName    = "target"
	listNS        = "bench-list"
)

var (
	getPath  = "/api/v1/namespaces/" + targetNS + "/configmaps/" + targetName
	listPath = "/api/v1/namespaces/" + listNS + "/configmaps"
)

func main() {
	var o options
	flag.IntVar(&o.Rounds, "rounds", 5, "rounds; each runs every target once per measurement, in a rotating order")
	flag.IntVar(&o.Requests, "requests", 1500, "GETs per target per round at concurrency 1")
	flag.IntVar(&o.Concurrency, "concurrency", 16, "workers of the throughput run")
	flag.DurationVar(&o.Duration, "duration", 6*time.Second, "length of the throughput run per target per round")
	flag.Float64Var(&o.Rate, "rate", 200, "GETs per second of the fixed-rate (open-loop) run, the same for every target; keep it below what the slowest target (hub + gateway) sustains at -concurrency; 0 skips the run")
	flag.DurationVar(&o.RateDuration, "rate-duration", 10*time.Second, "length of the fixed-rate run per target per round")
	flag.IntVar(&o.RateInflight, "rate-inflight", 512, "most requests outstanding in the fixed-rate run; when reached the schedule waits and the achieved rate falls short")
	flag.IntVar(&o.ListObjects, "list-objects", 10000, "ConfigMaps in namespace "+listNS)
	flag.IntVar(&o.ListPerRound, "lists", 3, "full LISTs per target per round")
	flag.IntVar(&o.Workers, "workers", 32, "concurrent creators of the LIST objects")
	flag.IntVar(&o.ProfileSeconds, "profile-seconds", 10, "length of the gateway CPU profile (0: none)")
	flag.IntVar(&o.TraceSeconds, "trace-seconds", 5, "length of the execution traces of the gateway and the floor proxy at c=1, read for where the slowest requests spend their time (0: none)")
	flag.DurationVar(&o.Idle, "idle", 10*time.Second, "idle period that measures background CPU before the rounds")
	flag.StringVar(&o.OutDir, "out-dir", "_output/bench", "directory for the report, the profile and the work dir's logs on failure")
	flag.StringVar(&o.Out, "out", "", "also write the markdown report to this file (default <out-dir>/report.md)")
	flag.BoolVar(&o.Keep, "keep", false, "keep the environment's work dir (logs) after a successful run")
	flag.BoolVar(&o.Floor, "floor", true, "also measure GETs through test/bench/floorproxy, a minimal Go reverse proxy (the floor of proxying cost)")
	flag.BoolVar(&o.FloorImpersonates, "floor-impersonates", false, "the floor proxy sends the gateway's member token and impersonates the identity the gateway impersonates (admin, system:masters), so that the member authorizes the same impersonation for both")
	flag.BoolVar(&o.DirectMode, "direct-mode", false, "start the gateway with --direct-access (for every target) and also measure GETs with the hub admin token sent straight to the gateway, without the hub")
	flag.BoolVar(&o.MemberDoor, "member-door", true, "also measure GETs through the gateway's member door with member-b's own admin certificate and with its own admin token (a TokenReview on member-b, cached)")
	flag.BoolVar(&o.Konnectivity, "konnectivity", false, "also measure GETs through the gateway to member-b registered through a konnectivity server and agent (make tools builds them)")
	measure.GatewayFlags(flag.CommandLine, &o.GatewayEnv, &o.GatewayArgs)
	flag.Parse()
	if o.DirectMode && !slices.Contains(o.GatewayArgs, directAccessArg) {
		// The report's header lists the gateway's added flags.
		o.GatewayArgs = append(o.GatewayArgs, directAccessArg)
	}
	os.Exit(runMain(o))
}

var logf = measure.Logger("bench").Printf

func runMain(o options) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		logf("%v", err)
		return 1
	}
	if o.Out == "" {
		o.Out = filepath.Join(o.OutDir, "report.md")
	}
	workDir, err := os.MkdirTemp("", "kube-gateway-bench-")
	if err != nil {
		logf("%v", err)
		return 1
	}
	began := time.Now()
	var floorBin string
	if o.Floor {
		// Built before the environment starts: a build error ends the run at once.
		if floorBin, err = floor.Build(ctx, filepath.Join(workDir, "floor")); err != nil {
			logf("%v", err)
			_ = os.RemoveAll(workDir)
			return 1
		}
	}
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	env, err := harness.Start(startCtx, harness.Config{WorkDir: workDir, Log: os.Stderr, GatewayEnv: o.GatewayEnv, GatewayArgs: o.GatewayArgs, MemberDoors: o.MemberDoor})
	cancel()
	if err != nil {
		logf("starting the environment: %v (work dir %s kept)", err, workDir)
		return 1
	}
	defer env.Stop() // also on a panic; Stop is idempotent
	envUp := time.Since(began)
	logf("environment ready in %s (work dir %s)", envUp.Round(time.Second), workDir)

	rep, err := bench(ctx, env, o, floorBin)
	if serr := env.Stop(); serr != nil {
		logf("stopping the environment: %v", serr)
	}
	if err != nil {
		logf("benchmark failed: %v (work dir with every process log kept: %s)", err, workDir)
		return 1
	}
	rep.EnvStartup = envUp
	rep.Total = time.Since(began)
	md := rep.markdown()
	fmt.Print(md)
	if err := os.WriteFile(o.Out, []byte(md), 0o644); err != nil {
		logf("writing %s: %v", o.Out, err)
		return 1
	}
	logf("report written to %s", o.Out)
	if o.Keep {
		logf("work dir kept: %s", workDir)
	} else {
		_ = os.RemoveAll(workDir)
	}
	return 0
}

// bench sets up the objects, builds the three targets (four with the floor
// proxy, floorBin) and measures.
func bench(ctx context.Context, env *harness.Env, o options, floorBin string) (*report, error) {
	rep := &report{Opts: o, Started: time.Now()}
	rep.Hz, rep.HzHow = measure.ClockTicks()
	rep.Machine = measure.ThisMachine()

	// Objects on member-b, directly.
	mcfg := env.Members[member].Config(harness.UserAdmin, 0)
	cs, err := kubernetes.NewForConfig(mcfg)
	if err != nil {
		return nil, err
	}
	if err := setupObjects(ctx, cs, o, rep); err != nil {
		return nil, err
	}

	// The same objects on member-a, in a namespace of their own, for the
	// fan-out LIST over both members holding them (see fanout.go).
	csA, err := kubernetes.NewForConfig(env.Members[memberA].Config(harness.UserAdmin, 0))
	if err != nil {
		return nil, err
	}
	var tookA time.Duration
	if err := setupListObjects(ctx, csA, memberA, copyNS, o, &tookA); err != nil {
		return nil, err
	}

	targets, gw, err := makeTargets(env, o.DirectMode)
	if err != nil {
		return nil, err
	}
	directA, fan, err := fanOutTargets(env, targets[2], 2*time.Minute)
	if err != nil {
		return nil, err
	}
	if o.MemberDoor {
		cert, token, err := measure.DoorTargets(env, member, 2*time.Minute)
		if err != nil {
			return nil, err
		}
		targets = append(targets, cert, token)
	}
	var tunnel *harness.Konnectivity
	if o.Konnectivity {
		if tunnel, err = env.StartKonnectivity(ctx, member, tunnelCluster); err != nil {
			return nil, fmt.Errorf("konnectivity: %w", err)
		}
		defer func() {
			if err := tunnel.Close(); err != nil {
				logf("stopping the konnectivity server and agent: %v", err)
			}
		}()
		t, err := measure.TunnelTarget(env, tunnelCluster, 2*time.Minute)
		if err != nil {
			return nil, err
		}
		targets = append(targets, t)
	}
	var floorProxy *floor.Proxy
	var floorTarget *measure.Target
	if o.Floor {
		fp, ft, err := floor.Start(ctx, floorBin, filepath.Join(env.WorkDir, "floor"), env.Members[member], o.FloorImpersonates)
		if err != nil {
			return nil, fmt.Errorf("floor proxy: %w", err)
		}
		defer func() {
			if err := fp.Stop(); err != nil {
				logf("stopping the floor proxy: %v", err)
			}
		}()
		floorProxy, floorTarget = fp, ft
		targets = append(targets, ft)
	}
	rep.Targets = targets
	if err := sameObject(ctx, targets); err != nil {
		return nil, err
	}

	procs := []measure.Proc{
		{Name: "kube-gateway", PID: env.Gateway.PID()},
		{Name: member + "-1", PID: env.Members[member].Servers[0].Process.PID()},
		{Name: hubProc, PID: env.Hub.Servers[0].Process.PID()},
		{Name: "etcd", PID: env.Etcd.PID()},
		{Name: "bench client", PID: 0}, // this process
	}
	if floorProxy != nil {
		procs = append(procs, measure.Proc{Name: floor.Proc, PID: floorProxy.PID()})
	}
	if tunnel != nil {
		procs = append(procs, measure.Proc{Name: "konnectivity-server", PID: tunnel.Servers[0].PID()},
			measure.Proc{Name: "konnectivity-agent", PID: tunnel.Agent.PID()})
	}
	rep.Procs = procs
	gwPID := procs[0].PID
	// Whose allocations a target's fixed-rate run measures: the gateway's
	// for the targets that cross it, the floor proxy's for the floor.
	allocs := func(key string) allocCounter {
		switch {
		case crossesGateway(key):
			return gatewayAllocs(gw)
		case key == floor.Key && floorProxy != nil:
			return floorAllocs(floorProxy)
		}
		return nil
	}

	// Background CPU of every process while nothing is sent.
	logf("idle %s: background CPU", o.Idle)
	a := measure.SnapCPU(procs)
	t0 := time.Now()
	if err := sleep(ctx, o.Idle); err != nil {
		return nil, err
	}
	rep.IdleCPU = measure.SnapCPU(procs).Delta(a, rep.Hz)
	rep.IdleFor = time.Since(t0)

	// Warm-up: connections, caches (the gateway's SubjectAccessReview cache,
	// the hub's, and in direct mode the gateway's TokenReview cache), the Go
	// heaps, the LIST path.
	logf("warm-up")
	for _, t := range targets {
		if r := t.Load(ctx, getPath, 1, 300, 0); r.Errors > 0 {
			return nil, fmt.Errorf("warm-up %s: %d errors, first: %v", t.Key, r.Errors, r.FirstErr)
		}
		if r := t.Load(ctx, getPath, o.Concurrency, 0, 2*time.Second); r.Errors > 0 {
			return nil, fmt.Errorf("warm-up %s: %d errors, first: %v", t.Key, r.Errors, r.FirstErr)
		}
		if getsOnly(t.Key) {
			continue // the LIST measurements leave the floor and direct mode out
		}
		for _, enc := range encodings {
			// The first LISTs a process ever serves show what a cold heap
			// has to grow by.
			lr, err := measureList(ctx, t, procs, rep.Hz, gwPID, enc, gw)
			if err != nil {
				return nil, fmt.Errorf("warm-up LIST %s: %w", t.Key, err)
			}
			if t.Key != "direct" {
				rep.FirstLists = append(rep.FirstLists, firstList{Target: t.Key, Run: lr})
			}
		}
	}

	for r := 0; r < o.Rounds; r++ {
		rd := roundData{C1: map[string]loadRun{}, CN: map[string]loadRun{}, Rate: map[string]loadRun{}, List: map[string][]listRun{}}
		order := rotate(targets, r)
		var names []string
		for _, t := range order {
			names = append(names, t.Key)
		}
		rd.Order = names
		logf("round %d/%d, order %v", r+1, o.Rounds, names)
		for _, t := range order {
			rd.C1[t.Key] = measureLoad(ctx, t, procs, rep.Hz, 1, o.Requests, 0)
		}
		for _, t := range order {
			rd.CN[t.Key] = measureLoad(ctx, t, procs, rep.Hz, o.Concurrency, 0, o.Duration)
		}
		if o.Rate > 0 {
			for _, t := range order {
				rd.Rate[t.Key] = measureRate(ctx, t, procs, rep.Hz, o, allocs)
			}
		}
		for i := 0; i < o.ListPerRound; i++ {
			for _, enc := range encodings {
				for _, t := range order {
					if getsOnly(t.Key) {
						continue
					}
					lr, err := measureList(ctx, t, procs, rep.Hz, gwPID, enc, gw)
					if err != nil {
						return nil, fmt.Errorf("LIST %s (%s): %w", t.Key, enc, err)
					}
					rd.List[t.Key] = append(rd.List[t.Key], lr)
				}
			}
		}
		for i := 0; i < o.ListPerRound; i++ {
			run, err := measureFanOut(ctx, directA, targets[0], targets[2], fan)
			if err != nil {
				return nil, err
			}
			rd.FanOut = append(rd.FanOut, run)
			logf("  fan-out LIST, member-b's objects: directly %s, hub path %s, fan-out %s (first byte %s; x%.2f of the hub path)",
				measure.Dur(run.OneDirect), measure.Dur(run.OneHub), measure.Dur(run.OneFanOut), measure.Dur(run.OneFirstByte), run.OneFanOut.Seconds()/run.OneHub.Seconds())
			logf("  fan-out LIST, both members': member-a %s + member-b %s directly; fan-out %s (x%.2f of a + b)",
				measure.Dur(run.DirectA), measure.Dur(run.DirectB), measure.Dur(run.FanOut), run.FanOut.Seconds()/(run.DirectA+run.DirectB).Seconds())
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for _, t := range order {
			c1, cn, fr := rd.C1[t.Key], rd.CN[t.Key], rd.Rate[t.Key]
			if t.Key == floor.Key {
				logf("  %-8s c=1 p50 %-9s p99 %-9s | c=%d %6.0f req/s | floor proxy CPU %s/req | at %.0f/s: %.0f/s, p99 %s, floor proxy CPU %s/req",
					t.Key, measure.Dur(c1.P50), measure.Dur(c1.P99), o.Concurrency, cn.RPS,
					measure.US(cn.cpuPerReq(floor.Proc)), o.Rate, fr.RPS, measure.Dur(fr.P99), measure.US(fr.cpuPerReq(floor.Proc)))
				continue
			}
			if t.Key == measure.DirectModeKey {
				logf("  %-8s c=1 p50 %-9s p99 %-9s | c=%d %6.0f req/s | gateway CPU %s/req, hub %s/req | at %.0f/s: %.0f/s, p99 %s, gateway CPU %s/req, hub %s/req",
					t.Key, measure.Dur(c1.P50), measure.Dur(c1.P99), o.Concurrency, cn.RPS,
					measure.US(cn.cpuPerReq("kube-gateway")), measure.US(cn.cpuPerReq(hubProc)), o.Rate, fr.RPS, measure.Dur(fr.P99),
					measure.US(fr.cpuPerReq("kube-gateway")), measure.US(fr.cpuPerReq(hubProc)))
				continue
			}
			logf("  %-8s c=1 p50 %-9s p99 %-9s | c=%d %6.0f req/s | gateway CPU %s/req | at %.0f/s: %.0f/s, p99 %s, gateway CPU %s/req | LIST %s",
				t.Key, measure.Dur(c1.P50), measure.Dur(c1.P99), o.Concurrency, cn.RPS,
				measure.US(cn.cpuPerReq("kube-gateway")), o.Rate, fr.RPS, measure.Dur(fr.P99), measure.US(fr.cpuPerReq("kube-gateway")),
				measure.Sec(listSec(rd, t.Key, "gzip")))
		}
		rep.Rounds = append(rep.Rounds, rd)
	}
	if o.MemberDoor {
		m, err := gw.Scrape(ctx, env.GatewayURL+"/metrics")
		if err != nil {
			return nil, fmt.Errorf("the door's TokenReviews: %w", err)
		}
		for _, result := range []string{"authenticated", "rejected", "error"} {
			v, _ := m.Sum("kube_gateway_member_door_tokenreviews_total", map[string]string{"cluster": member, "result": result})
			rep.DoorTokenReviews += v
		}
	}

	if o.ProfileSeconds > 0 {
		// The throughput load first (what the brief asks for), then c=1, where
		// the latency targets are.
		for _, c := range []int{o.Concurrency, 1} {
			if err := profile(ctx, env, gw, procs, o, rep, c); err != nil {
				return nil, fmt.Errorf("profile at c=%d: %w", c, err)
			}
		}
		if err := profileFanOut(ctx, env, gw, fan, o, rep); err != nil {
			return nil, fmt.Errorf("fan-out profile: %w", err)
		}
		if floorProxy != nil {
			if err := profileFloor(ctx, floorProxy, floorBin, floorTarget, procs, o, rep, o.Concurrency); err != nil {
				return nil, fmt.Errorf("floor profile at c=%d: %w", o.Concurrency, err)
			}
		}
	}
	if o.TraceSeconds > 0 {
		if err := traceTail(ctx, gw, gw.Client, gw.Header, env.GatewayURL+"/debug/pprof/trace", procs, o, rep); err != nil {
			return nil, fmt.Errorf("trace of the gateway: %w", err)
		}
		if floorProxy != nil {
			if err := traceTail(ctx, floorTarget, http.DefaultClient, nil, floorProxy.DebugURL+"/debug/pprof/trace", procs, o, rep); err != nil {
				return nil, fmt.Errorf("trace of the floor proxy: %w", err)
			}
		}
	}
	return rep, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func rotate(ts []*measure.Target, r int) []*measure.Target {
	out := make([]*measure.Target, len(ts))
	for i := range ts {
		out[i] = ts[(i+r)%len(ts)]
	}
	return out
}

// setupObjects creates namespace bench (and its default ServiceAccount, unless
// the controller manager made it first), ConfigMap bench/target, namespace bench-list and
// o.ListObjects small ConfigMaps in it with o.Workers concurrent creators.
func setupObjects(ctx context.Context, cs kubernetes.Interface, o options, rep *report) error {
	for _, ns := range []string{targetNS, listNS} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("serviceaccount %s/default: %w", ns, err)
		}
	}
	if _, err := cs.CoreV1().ConfigMaps(targetNS).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: targetName, Labels: map[string]string{"app": "kube-gateway-bench"}},
		Data:       map[string]string{"greeting": "hello from member-b", "size": "small"},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("configmap %s/%s: %w", targetNS, targetName, err)
	}

	return setupListObjects(ctx, cs, member, listNS, o, &rep.SetupList)
}

// setupListObjects creates namespace ns on cluster name and o.ListObjects
// small ConfigMaps in it with o.Workers concurrent creators; took is how long
// the ConfigMaps took.
func setupListObjects(ctx context.Context, cs kubernetes.Interface, name, ns string, o options, took *time.Duration) error {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s on %s: %w", ns, name, err)
	}
	logf("creating %d ConfigMaps in %s on %s with %d workers", o.ListObjects, ns, name, o.Workers)
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, o.Workers)
	value := fmt.Sprintf("%064d", 0) // 64 bytes of data per object
	for w := 0; w < o.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(o.ListObjects) || ctx.Err() != nil {
					return
				}
				cm := &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i), Labels: map[string]string{"app": "kube-gateway-bench"}},
					Data:       map[string]string{"index": strconv.FormatInt(i, 10), "value": value},
				}
				var err error
				for attempt := 0; attempt < 5; attempt++ {
					_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
					if err == nil || apierrors.IsAlreadyExists(err) {
						err = nil
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if err != nil {
					errs[w] = fmt.Errorf("configmap %s: %w", cm.Name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	*took = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	logf("created %d ConfigMaps on %s in %s (%.0f/s)", o.ListObjects, name, took.Round(10*time.Millisecond), float64(o.ListObjects)/took.Seconds())
	return nil
}

// makeTargets builds the three ways to member-b (four with directMode), each
// with its own client. It also returns the gateway target for /debug/pprof
// and /metrics.
func makeTargets(env *harness.Env, directMode bool) ([]*measure.Target, *measure.Target, error) {
	direct, gw, hub, err := measure.Targets(env, member, 2*time.Minute)
	if err != nil {
		return nil, nil, err
	}
	ts := []*measure.Target{direct, gw, hub}
	if directMode {
		dm, err := measure.DirectModeTarget(env, member, 2*time.Minute)
		if err != nil {
			return nil, nil, err
		}
		ts = append(ts, dm)
	}
	return ts, gw, nil
}

// getsOnly reports whether target key takes part in the GET measurements
// only (no LIST): the floor, direct mode and the konnectivity tunnel.
func getsOnly(key string) bool {
	return key == floor.Key || key == measure.DirectModeKey || key == measure.TunnelKey || key == measure.DoorCertKey || key == measure.DoorTokenKey
}

// crossesGateway reports whether the requests of target key go through the
// gateway (its allocations are then measured).
func crossesGateway(key string) bool {
	return key == "gateway" || key == "hub" || key == measure.DirectModeKey || key == measure.TunnelKey || key == measure.DoorCertKey || key == measure.DoorTokenKey
}

// sameObject checks that the targets return the very same bytes for the
// object (the same member-b ConfigMap).
func sameObject(ctx context.Context, ts []*measure.Target) error {
	var first []byte
	for _, t := range ts {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, t.Base+getPath, nil)
		for k, v := range t.Header {
			req.Header[k] = v
		}
		req.Header.Set("Accept", "application/json")
		resp, err := t.Client.Do(req)
		if err != nil {
			return fmt.Errorf("%s: %w", t.Key, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", t.Key, err)
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: GET %s: %s: %s", t.Key, getPath, resp.Status, body)
		}
		t.Proto = resp.Proto
		if first == nil {
			first = body
		} else if string(body) != string(first) {
			return fmt.Errorf("%s returned a different object than direct:\n%s\nvs\n%s", t.Key, body, first)
		}
	}
	return nil
}

// loadRun is one measured load run with the CPU each process spent.
type loadRun struct {
	Requests int
	Errors   int
	FirstErr string
	Elapsed  time.Duration
	P50, P99 time.Duration
	RPS      float64
	CPU      map[string]float64 // seconds, per process

	// The fixed-rate run only.
	Rate   float64       // asked for, per second
	MaxLag time.Duration // the longest a request waited for a free slot past its schedule
	// AllocPerReq is the heap the proxy allocated per request (bytes): the
	// gateway for the targets that cross it, the floor proxy for the floor
	// (AllocKnown).
	AllocPerReq float64
	AllocKnown  bool
	// Kernel is, per request, the read and write system calls and the
	// context switches of each process whose counts could be read.
	Kernel map[string][3]float64
}

func (l loadRun) cpuPerReq(proc string) float64 {
	if l.Requests == 0 {
		return 0
	}
	return l.CPU[proc] / float64(l.Requests)
}

func measureLoad(ctx context.Context, t *measure.Target, procs []measure.Proc, hz float64, c, n int, d time.Duration) loadRun {
	a := measure.SnapCPU(procs)
	r := t.Load(ctx, getPath, c, n, d)
	b := measure.SnapCPU(procs)
	l := loadRun{Requests: r.Requests, Errors: r.Errors, Elapsed: r.Elapsed, P50: r.Pct(50), P99: r.Pct(99), RPS: r.RPS(), CPU: b.Delta(a, hz)}
	if r.FirstErr != nil {
		l.FirstErr = r.FirstErr.Error()
	}
	return l
}

// measureRate runs the fixed-rate GET load against t and reads the CPU of
// every process and, when allocs has a counter for t, the heap bytes the
// proxy of t allocated per request.
func measureRate(ctx context.Context, t *measure.Target, procs []measure.Proc, hz float64, o options, allocs func(key string) allocCounter) loadRun {
	var am *allocMeter
	if c := allocs(t.Key); c != nil {
		am = startAlloc(ctx, c)
	}
	a, ak := measure.SnapCPU(procs), measure.SnapKernel(procs)
	r := t.LoadRate(ctx, getPath, o.Rate, o.RateDuration, o.RateInflight)
	b, bk := measure.SnapCPU(procs), measure.SnapKernel(procs)
	l := loadRun{Requests: r.Requests, Errors: r.Errors, Elapsed: r.Elapsed, P50: r.Pct(50), P99: r.Pct(99), RPS: r.RPS(), CPU: b.Delta(a, hz),
		Rate: r.Rate, MaxLag: r.MaxLag, Kernel: map[string][3]float64{}}
	for name, after := range bk {
		if before, ok := ak[name]; ok && r.Requests > 0 {
			n := float64(r.Requests)
			l.Kernel[name] = [3]float64{float64(after.Reads-before.Reads) / n, float64(after.Writes-before.Writes) / n, float64(after.Switches-before.Switches) / n}
		}
	}
	if r.FirstErr != nil {
		l.FirstErr = r.FirstErr.Error()
	}
	if am != nil && r.Requests > 0 {
		if v, ok := am.stop(ctx); ok {
			l.AllocPerReq, l.AllocKnown = v/float64(r.Requests), true
		}
	}
	return l
}

// allocCounter reads a process's cumulative count of allocated heap bytes.
type allocCounter func(context.Context) (float64, error)

// allocMeter measures the heap bytes a process allocates during a
// measurement from its cumulative counter: read twice before and once after,
// (after - mid) - (mid - before), so that what one scrape itself allocates
// cancels out.
type allocMeter struct {
	read        allocCounter
	before, mid float64
	err         error
}

func startAlloc(ctx context.Context, read allocCounter) *allocMeter {
	m := &allocMeter{read: read}
	if m.before, m.err = read(ctx); m.err == nil {
		m.mid, m.err = read(ctx)
	}
	return m
}

// stop returns the bytes allocated since start; ok is false when the
// counter could not be read.
func (m *allocMeter) stop(ctx context.Context) (bytes float64, ok bool) {
	if m.err != nil {
		return 0, false
	}
	after, err := m.read(ctx)
	if err != nil {
		return 0, false
	}
	return (after - m.mid) - (m.mid - m.before), true
}

// encodings of the LIST: as client-go asks (gzip accepted; the member
// compresses large bodies) and uncompressed, which pushes the full body
// through every hop and makes buffering visible.
var encodings = []string{"gzip", "identity"}

type firstList struct {
	Target string
	Run    listRun
}

// listRun is one full LIST.
type listRun struct {
	Enc          string // requested: gzip (Go's default) or identity
	FirstByte    time.Duration
	Elapsed      time.Duration
	Bytes        int64
	Gzip         bool
	CPU          map[string]float64
	RSSBefore    int64 // gateway VmRSS kB
	RSSPeak      int64
	RSSGrowth    int64
	HWMBefore    int64
	HWMAfter     int64
	RSSSamples   int
	SampledRSSOf string
	AllocBytes   float64 // heap bytes the gateway allocated for the LIST
	AllocKnown   bool
}

func measureList(ctx context.Context, t *measure.Target, procs []measure.Proc, hz float64, gwPID int, enc string, gw *measure.Target) (listRun, error) {
	// Bytes the gateway allocated for the LIST and its RSS during it.
	var am *allocMeter
	var s *measure.RSSSampler
	if t.Key != "direct" {
		am = startAlloc(ctx, gatewayAllocs(gw))
		s = measure.StartRSS(ctx, gwPID, 10*time.Millisecond)
	}
	a := measure.SnapCPU(procs)
	t0 := time.Now()
	res, err := t.DoEnc(ctx, listPath, enc == "identity", true)
	el := time.Since(t0)
	b := measure.SnapCPU(procs)
	lr := listRun{Enc: enc, FirstByte: res.FirstByte, Elapsed: el, Bytes: res.Bytes, Gzip: res.Uncompressed || res.Encoding == "gzip", CPU: b.Delta(a, hz)}
	if s != nil {
		s.Stop()
		lr.RSSBefore, lr.RSSPeak, lr.RSSGrowth = s.Before, s.Peak, s.Growth()
		lr.HWMBefore, lr.HWMAfter, lr.RSSSamples = s.HWMBefore, s.HWMAfter, s.Samples
		lr.SampledRSSOf = "kube-gateway"
		if err == nil {
			lr.AllocBytes, lr.AllocKnown = am.stop(ctx)
		}
	}
	return lr, err
}

// gatewayAllocs reads the gateway's cumulative count of allocated heap bytes
// from its /metrics.
func gatewayAllocs(gw *measure.Target) allocCounter {
	url := strings.TrimSuffix(gw.Base, harness.ProxyPath(member)) + "/metrics"
	return func(ctx context.Context) (float64, error) {
		m, err := gw.Scrape(ctx, url)
		if err != nil {
			return 0, err
		}
		return m.AllocBytes()
	}
}

// floorAllocs reads the floor proxy's cumulative count of allocated heap
// bytes from the /metrics of its debug listener.
func floorAllocs(fp *floor.Proxy) allocCounter {
	debug := &measure.Target{Client: http.DefaultClient}
	return func(ctx context.Context) (float64, error) {
		m, err := debug.Scrape(ctx, fp.DebugURL+"/metrics")
		if err != nil {
			return 0, err
		}
		return m.AllocBytes()
	}
}

// profileResult is a CPU profile of the gateway under one load.
type profileResult struct {
	Concurrency int
	Run         loadRun
	File        string
	TopCum      string
	TopFlat     string
	Groups      []group
	Total       float64 // seconds of samples

	// The heap allocation profile of the same period (allocs?seconds=N).
	AllocFile     string
	AllocTop      string  // top 15 by bytes allocated
	AllocBytes    float64 // allocated during the profile, from its total
	AllocRequests int64   // requests completed during the profile, estimated from the run's rate
}

// profile runs the gateway-alone load at concurrency c for ProfileSeconds+3 s
// and takes a CPU profile of the gateway during it.
func profile(ctx context.Context, env *harness.Env, gw *measure.Target, procs []measure.Proc, o options, rep *report, c int) error {
	logf("profiling the gateway for %ds under the c=%d gateway-alone load", o.ProfileSeconds, c)
	// Allocations reach the heap profile one collection late: without
	// collections now, the allocation profile would also count the end of
	// what ran before (a fan-out LIST of the last round, say).
	if err := measure.ForceGC(ctx, gw.Client, gw.Header, env.GatewayURL); err != nil {
		return err
	}
	// The CPU and the allocation profile cover the same seconds of the load.
	base := env.GatewayURL + "/debug/pprof/"
	cpuDone, allocDone := make(chan fetched, 1), make(chan fetched, 1)
	go fetchPprof(ctx, gw.Client, gw.Header, base+"profile", o.ProfileSeconds, cpuDone)
	go fetchPprof(ctx, gw.Client, gw.Header, base+"allocs", o.ProfileSeconds, allocDone)
	run := measureLoad(ctx, gw, procs, rep.Hz, c, 0, time.Duration(o.ProfileSeconds+3)*time.Second)
	p, a := <-cpuDone, <-allocDone
	if p.err != nil {
		return p.err
	}
	if a.err != nil {
		return a.err
	}
	pr := profileResult{Concurrency: c, Run: run, File: filepath.Join(o.OutDir, fmt.Sprintf("kube-gateway-cpu-c%d.pprof", c)),
		AllocFile: filepath.Join(o.OutDir, fmt.Sprintf("kube-gateway-allocs-c%d.pprof", c))}
	if err := os.WriteFile(pr.File, p.data, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(pr.AllocFile, a.data, 0o644); err != nil {
		return err
	}
	bin, _ := harness.GatewayBinary(env.BinDir)
	rep.ProfileBinary = bin
	pr.TopCum, pr.TopFlat, pr.Groups, pr.Total = analyzeProfile(ctx, bin, pr.File)
	pr.AllocTop, pr.AllocBytes = analyzeAllocs(ctx, bin, pr.AllocFile)
	pr.AllocRequests = int64(run.RPS * float64(o.ProfileSeconds))
	rep.Profiles = append(rep.Profiles, pr)
	return nil
}

// profileFloor runs the floor's load at concurrency c for ProfileSeconds+3 s
// and takes a CPU profile of the floor proxy during it (from its debug
// listener), so that the report can set the gateway's cost centers against
// the floor's.
func profileFloor(ctx context.Context, fp *floor.Proxy, bin string, ft *measure.Target, procs []measure.Proc, o options, rep *report, c int) error {
	logf("profiling the floor proxy for %ds under its c=%d load", o.ProfileSeconds, c)
	done := make(chan fetched, 1)
	go fetchPprof(ctx, http.DefaultClient, nil, fp.DebugURL+"/debug/pprof/profile", o.ProfileSeconds, done)
	run := measureLoad(ctx, ft, procs, rep.Hz, c, 0, time.Duration(o.ProfileSeconds+3)*time.Second)
	p := <-done
	if p.err != nil {
		return p.err
	}
	pr := profileResult{Concurrency: c, Run: run, File: filepath.Join(o.OutDir, fmt.Sprintf("floorproxy-cpu-c%d.pprof", c))}
	if err := os.WriteFile(pr.File, p.data, 0o644); err != nil {
		return err
	}
	pr.TopCum, pr.TopFlat, pr.Groups, pr.Total = analyzeProfile(ctx, bin, pr.File)
	rep.FloorProfile = &pr
	return nil
}

type fetched struct {
	data []byte
	err  error
}

// fetchPprof waits a second into the load, then gets a profile of seconds
// from url (a /debug/pprof/ endpoint) with client and header.
func fetchPprof(ctx context.Context, client *http.Client, header http.Header, url string, seconds int, done chan<- fetched) {
	if err := sleep(ctx, time.Second); err != nil {
		done <- fetched{err: err}
		return
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s?seconds=%d", url, seconds), nil)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		done <- fetched{err: err}
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	done <- fetched{data: body, err: err}
}
