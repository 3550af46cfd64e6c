// Command bench-scale measures what the gateway costs per open watch and per
// registered UpstreamCluster, on the real apiservers of test/harness (etcd,
// hub, member-a with two replicas, member-b, the gateway), in one run:
//
//   - Watches: N idle watches of ConfigMaps in one namespace of member-b
//     through the gateway alone (the hub's front-proxy certificate and
//     X-Remote-* headers, as make bench), then M through hub + gateway: the
//     gateway's RSS, Go heap and stacks, goroutines, open files and TCP
//     connections to member-b before, with them open and after closing them;
//     then D through member-b's member door (member-b's own admin client
//     certificate); then ConfigMap updates at a fixed rate and the delay
//     until sample watches through the gateway and directly on member-b
//     receive them.
//   - Connections (first, on fresh processes): C idle client connections,
//     each a client of its own with one GET, to member-b's door, then C to
//     the hub (member-b's proxy path), then C to the gateway alone: the
//     gateway's and the hub's memory and goroutines per connection.
//   - Sessions: S idle exec sessions (cat, over WebSocket) through the
//     gateway alone to the stand-in kubelet's pod on member-a: the gateway's
//     memory, goroutines and connections per session, each session checked
//     to carry a line both ways before and after the snapshot.
//   - Clusters: K UpstreamClusters applied in one burst, each with two
//     servers: stand-in member servers (standin.go) by default, member-a's
//     two replicas with -cluster-servers=member-a; with -replicas, on more
//     gateway replicas that share the health checks. Time until all are
//     Ready, RSS, goroutines and connections per cluster, health probes the
//     servers see, the gateway's idle CPU and status writes at steady state,
//     proxy latency with K clusters against without, and LIST + WATCH of the
//     K objects through the hub against as many ConfigMaps of the same size.
//   - Fleet cache (last): F UpstreamClusters, all member-b, and a
//     CachedResource of its ConfigMaps: time until every cache is synced,
//     the gateway's memory per cached object, a fan-out LIST from the caches
//     against a direct LIST of as many objects and against the live fan-out,
//     member-b's LISTs per cached list, event delay through one cache (cache.go).
//
// It writes report.md, the time series as CSV and their plots as PNG to
// -out-dir and prints the report. docs/benchmark.md explains the method.
//
//	make bench-scale                        # BENCH_SCALE_ARGS="-watches 2000" to pass flags
//	go run ./test/bench/scale -watches 500 -hub-watches 100 -door-watches 100 -door-conns 100 -clusters 50   # a smoke run
//
// It is a report, not a test: it exits non-zero only when it cannot measure.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kubewharf/kube-gateway/proxy/longrunning"
	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/harness"
)

type options struct {
	Watches         int           // idle watches through the gateway alone
	HubWatches      int           // idle watches through hub + gateway
	DoorWatches     int           // idle watches through member-b's door
	DoorConns       int           // idle client connections per path: door, hub, gateway alone
	Floor           bool          // the same idle watches through the floor proxy
	SampleWatches   int           // watches that record every event, per path
	OpenConcurrency int           // concurrent watch openers
	EventRate       float64       // ConfigMap updates per second
	EventDuration   time.Duration // how long updates are published
	Settle          time.Duration // longest wait for the gateway to release closed watches and their connections
	WatchCycles     int           // open-and-close cycles of the idle watches
	Sessions        int           // idle exec sessions through the gateway alone
	Clusters        int           // UpstreamClusters registered in the burst
	ClusterServers  string        // serversStandIns or serversMemberA
	StandIns        int           // stand-in server processes, one per server of a cluster
	StandInPorts    int           // listeners of each stand-in
	Replicas        int           // gateway replicas during the cluster phase
	Burst           int           // concurrent applies of the burst
	ReadyTimeout    time.Duration
	ClusterIdle     time.Duration // steady-state window with K clusters
	Gets            int           // c=1 GETs per target (direct, gateway) with 2 and with K+2 clusters
	ListRepeats     int           // LISTs and WATCHes per kind
	RemoteClusters  int           // UpstreamClusters behind relays with RemoteLatency
	RemoteLatency   time.Duration
	SampleInterval  time.Duration // of the time series
	OutDir          string
	Keep            bool
	GatewayEnv      []string
	GatewayArgs     []string
	cacheOptions    // the fleet cache phase (cache.go)
}

var logf = measure.Logger("bench-scale").Printf

func main() {
	if len(os.Args) > 1 && os.Args[1] == standInCommand {
		if err := standInMain(os.Args[2:]); err != nil {
			logf("%v", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.IntVar(&o.Watches, "watches", 10000, "idle watches opened through the gateway alone (0: no watch phase)")
	flag.BoolVar(&o.Floor, "floor", true, "also open -watches idle watches through test/bench/floorproxy, a minimal Go reverse proxy, and measure what they cost it (the floor)")
	flag.IntVar(&o.HubWatches, "hub-watches", 2000, "idle watches opened through hub + gateway, while the others stay open")
	flag.IntVar(&o.DoorWatches, "door-watches", 2000, "idle watches opened through member-b's member door with member-b's own admin client certificate, while the others stay open (0: none)")
	flag.IntVar(&o.DoorConns, "door-conns", 1000, "idle client connections (each a client of its own: one GET /version, then idle) opened to member-b's member door, then as many to the hub and to the gateway alone, before the watch phase (0: no connection phase)")
	flag.IntVar(&o.SampleWatches, "sample-watches", 50, "watches through the gateway, and as many directly on member-b, that record every published event (the bench decodes 2 × this × -event-rate events/s; 200 overloads a shared 2-core machine)")
	flag.IntVar(&o.OpenConcurrency, "open-concurrency", 50, "concurrent watch openers")
	flag.Float64Var(&o.EventRate, "event-rate", 100, "ConfigMap updates per second published to the watched namespace")
	flag.DurationVar(&o.EventDuration, "event-duration", 30*time.Second, "how long updates are published")
	flag.IntVar(&o.WatchCycles, "watch-cycles", 2, "times the idle watches are opened and closed (events are published in the first): what closing leaves behind would pile up from one to the next")
	flag.DurationVar(&o.Settle, "settle", 2*time.Minute, "longest wait after closing the watches for the gateway's goroutines and its connections to member-b to come back down (idle connections close after 90 s)")
	flag.IntVar(&o.Sessions, "sessions", 1000, "idle exec sessions (cat, over WebSocket as kubectl) opened through the gateway alone to the stand-in kubelet's pod on member-a (0: no session phase)")
	flag.IntVar(&o.Clusters, "clusters", 1000, "UpstreamClusters applied in one burst (0: no cluster phase)")
	flag.StringVar(&o.ClusterServers, "cluster-servers", serversStandIns, "the servers of the burst's UpstreamClusters: "+serversStandIns+" (stand-in member servers on loopback that answer health probes and discovery as a kube-apiserver does, processes of their own; the fan-out and remote phases need member-a and are skipped) or "+serversMemberA+" (member-a's two real replicas, which then serve every probe)")
	flag.IntVar(&o.StandIns, "stand-ins", 2, "stand-in server processes, on 127.0.100.1, 127.0.100.2, ...: the servers of each UpstreamCluster, one in each")
	flag.IntVar(&o.StandInPorts, "stand-in-ports", 4, "listeners of each stand-in, each on a port of its own (cluster i uses port i mod this)")
	flag.IntVar(&o.Replicas, "replicas", 1, "gateway replicas during the cluster phase: the harness's, and this many less one more with the same flags on the same etcd and hub (not behind the hub), started before the burst; they share the health checks (--share-health-checks, on by default)")
	flag.IntVar(&o.Burst, "burst-concurrency", 32, "concurrent server-side applies of the burst")
	flag.DurationVar(&o.ReadyTimeout, "ready-timeout", 5*time.Minute, "longest wait for every applied UpstreamCluster to be Ready")
	flag.DurationVar(&o.ClusterIdle, "cluster-idle", 30*time.Second, "steady-state window with the clusters registered (CPU, probes, status writes)")
	flag.IntVar(&o.Gets, "gets", 500, "c=1 GETs directly to member-b and as many through the gateway alone, in alternating rounds, with the harness's clusters and again with K more")
	flag.IntVar(&o.RemoteClusters, "remote-clusters", 200, "UpstreamClusters whose servers are member-a's behind relays that add -remote-latency, listed with a fan-out after the cluster phase (0: none)")
	flag.DurationVar(&o.RemoteLatency, "remote-latency", 20*time.Millisecond, "delay the relays of -remote-clusters add to everything the servers send")
	flag.IntVar(&o.ListRepeats, "list-repeats", 3, "LISTs and WATCHes through the hub per kind (UpstreamClusters, ConfigMaps)")
	flag.DurationVar(&o.SampleInterval, "sample-interval", time.Second, "period of the time series (RSS, goroutines, connections)")
	flag.StringVar(&o.OutDir, "out-dir", "_output/bench-scale", "directory for report.md, the CSV series and the PNG plots")
	flag.BoolVar(&o.Keep, "keep", false, "keep the environment's work dir (logs) after a successful run")
	o.cacheOptions.register(flag.CommandLine)
	measure.GatewayFlags(flag.CommandLine, &o.GatewayEnv, &o.GatewayArgs)
	flag.Parse()
	if o.ClusterServers != serversStandIns && o.ClusterServers != serversMemberA {
		logf("-cluster-servers %q: %s or %s", o.ClusterServers, serversStandIns, serversMemberA)
		os.Exit(2)
	}
	// The bench measures the cost of each watch, far past any one user's
	// share: its watches, all of one user, lift the per-user cap (a later
	// -gateway-arg can set one again).
	o.GatewayArgs = append([]string{"--" + longrunning.Flag + "=0"}, o.GatewayArgs...)
	os.Exit(runMain(o))
}

func runMain(o options) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		logf("%v", err)
		return 1
	}
	rep := &report{Opts: o, Started: time.Now(), Machine: measure.ThisMachine()}
	rep.Hz, _ = measure.ClockTicks()
	// Every watch the bench holds is a stream, not a socket, but the direct
	// and hub clients, the scrapes and the series add up: take the hard limit.
	rep.FDLimitBefore, rep.FDLimit = raiseFDLimit()
	logf("file descriptor limit of the bench: %d (was %d)", rep.FDLimit, rep.FDLimitBefore)

	workDir, err := os.MkdirTemp("", "kube-gateway-bench-scale-")
	if err != nil {
		logf("%v", err)
		return 1
	}
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	doors := o.DoorWatches > 0 || o.DoorConns > 0
	env, err := harness.Start(startCtx, harness.Config{WorkDir: workDir, Log: os.Stderr, GatewayEnv: o.GatewayEnv, GatewayArgs: o.GatewayArgs, MemberDoors: doors})
	cancel()
	if err != nil {
		logf("starting the environment: %v (work dir %s kept)", err, workDir)
		return 1
	}
	defer env.Stop() // also on a panic; Stop is idempotent
	rep.EnvStartup = time.Since(rep.Started)
	logf("environment ready in %s (work dir %s)", rep.EnvStartup.Round(time.Second), workDir)

	err = run(ctx, env, o, rep)
	if serr := env.Stop(); serr != nil {
		logf("stopping the environment: %v", serr)
	}
	if err != nil {
		logf("bench-scale failed: %v (work dir with every process log kept: %s)", err, workDir)
		return 1
	}
	if w := rep.Watches; w != nil {
		if err := writeSeries(o.OutDir, "watches", "watches open through the gateway", w.Series, func(s snapshot) []int { return s.ToMemberB }); err != nil {
			logf("writing the watch series: %v", err)
		}
	}
	if c := rep.Clusters; c != nil {
		if err := writeSeries(o.OutDir, "clusters", "Ready clusters", c.Series, func(s snapshot) []int { return s.ToFleet }); err != nil {
			logf("writing the cluster series: %v", err)
		}
	}
	rep.Total = time.Since(rep.Started)
	md := rep.markdown()
	fmt.Print(md)
	out := filepath.Join(o.OutDir, "report.md")
	if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
		logf("writing %s: %v", out, err)
		return 1
	}
	logf("report written to %s", out)
	if o.Keep {
		logf("work dir kept: %s", workDir)
	} else {
		_ = os.RemoveAll(workDir)
	}
	return 0
}

// raiseFDLimit sets this process's RLIMIT_NOFILE as high as it may: the hard
// limit up to the kernel's ceiling (fs.nr_open) when it is allowed to (root),
// and the soft one to the hard one. The processes it starts inherit it: a
// gateway with 10,000 clusters holds a connection per server.
func raiseFDLimit() (before, after uint64) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, 0
	}
	before = l.Cur
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if max, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && max > l.Max {
			raised := syscall.Rlimit{Cur: max, Max: max}
			if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
				return before, max
			}
		}
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return before, before
	}
	return before, l.Cur
}

func run(ctx context.Context, env *harness.Env, o options, rep *report) error {
	s, err := newScene(env)
	if err != nil {
		return err
	}
	rep.GatewayFDLimit = s.gatewayFDLimit()
	// A phase that grew the gateway's heap leaves memory that the Go runtime
	// returns to the system only slowly, which would hide the next phase's
	// RSS growth: the watch and cluster phases start from a fresh process.
	used := false
	if o.DoorConns > 0 {
		cr, err := connPhase(ctx, s, o)
		if err != nil {
			return fmt.Errorf("connections: %w", err)
		}
		rep.Conns = cr
		used = true
	}
	if o.Watches > 0 || o.HubWatches > 0 || o.DoorWatches > 0 {
		if used {
			if s, err = restartGateway(ctx, env, o.DoorWatches > 0); err != nil {
				return err
			}
			rep.RestartedForWatches = true
		}
		used = true
		w, err := watchPhase(ctx, s, o)
		if err != nil {
			return fmt.Errorf("watches: %w", err)
		}
		rep.Watches = w
		if o.Floor && o.Watches > 0 {
			if w.Floor, err = floorPhase(ctx, s, o, floorDir(env.WorkDir)); err != nil {
				return fmt.Errorf("floor: %w", err)
			}
		}
	}
	if o.Sessions > 0 {
		used = true
		sr, err := sessionPhase(ctx, s, o)
		if err != nil {
			return fmt.Errorf("sessions: %w", err)
		}
		rep.Sessions = sr
	}
	if o.Clusters > 0 {
		if used {
			if s, err = restartGateway(ctx, env, false); err != nil {
				return err
			}
			rep.Restarted = true
		}
		c, err := clusterPhase(ctx, s, o)
		if err != nil {
			return fmt.Errorf("clusters: %w", err)
		}
		rep.Clusters = c
		used = true
	}
	if o.CacheClusters > 0 {
		if used {
			if s, err = restartGateway(ctx, env, false); err != nil {
				return err
			}
			rep.RestartedForCache = true
		}
		c, err := cachePhase(ctx, s, o)
		if err != nil {
			return fmt.Errorf("fleet cache: %w", err)
		}
		rep.Cache = c
	}
	return nil
}

// restartGateway restarts the gateway process (same flags, port and data) and
// waits until it proxies to member-b and the hub serves its API again, and
// with door until member-b's door serves too.
func restartGateway(ctx context.Context, env *harness.Env, door bool) (*scene, error) {
	logf("restarting the gateway: the next phase starts from a fresh process")
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := env.Gateway.Restart(rctx); err != nil {
		return nil, fmt.Errorf("restarting the gateway: %w", err)
	}
	s, err := newScene(env)
	if err != nil {
		return nil, err
	}
	for {
		_, gerr := s.gateway.Do(rctx, "/version")
		_, herr := s.hubRoot.Do(rctx, ucPath+"?limit=1")
		var derr error
		if door {
			_, derr = s.door.Do(rctx, "/version")
		}
		if gerr == nil && herr == nil && derr == nil {
			return s, nil
		}
		if err := sleep(rctx, 500*time.Millisecond); err != nil {
			return nil, fmt.Errorf("the restarted gateway does not serve: %v; through the hub: %v; at the door: %v", gerr, herr, derr)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
