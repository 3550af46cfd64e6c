package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// scene is the environment as the bench sees it: a way in to every server
// and the processes and ports it reads.
type scene struct {
	env *harness.Env
	// Proxy paths to member-b (watches, the GETs): direct, through the
	// gateway alone, through hub + gateway. Watches use clients without a
	// request timeout.
	direct, gateway, hub *measure.Target
	// door is member-b's own admin client certificate at member-b's member
	// door (measure.DoorTargets), without a request timeout; it serves only
	// when the environment opened the doors (harness.Config.MemberDoors).
	door *measure.Target
	// The same clients at the servers' roots: the gateway's /metrics and
	// /debug/pprof, the hub's APIs, member-a's /metrics per replica.
	gatewayRoot, hubRoot *measure.Target
	memberA              []*measure.Target
	gatewayPID, hubPID   int
	gatewayPort          int
	hubPort, doorPort    int
	memberBPorts         []int
	memberAPorts         []int
	// fleet is the servers of the cluster phase's UpstreamClusters, once
	// it set them up.
	fleet *fleet
}

func newScene(env *harness.Env) (*scene, error) {
	s := &scene{env: env, gatewayPID: env.Gateway.PID(), hubPID: env.Hub.Servers[0].Process.PID()}
	var err error
	if s.direct, s.gateway, s.hub, err = measure.Targets(env, harness.MemberB, 0); err != nil {
		return nil, err
	}
	root := func(t *measure.Target, base string) *measure.Target {
		c := *t
		c.Base = base
		return &c
	}
	if s.door, _, err = measure.DoorTargets(env, harness.MemberB, 0); err != nil {
		return nil, err
	}
	s.gatewayRoot = root(s.gateway, env.GatewayURL)
	s.hubRoot = root(s.hub, env.Hub.Servers[0].URL)
	ma, _, _, err := measure.Targets(env, harness.MemberA, 0)
	if err != nil {
		return nil, err
	}
	for _, srv := range env.Members[harness.MemberA].Servers {
		s.memberA = append(s.memberA, root(ma, srv.URL))
		s.memberAPorts = append(s.memberAPorts, srv.Port)
	}
	for _, srv := range env.Members[harness.MemberB].Servers {
		s.memberBPorts = append(s.memberBPorts, srv.Port)
	}
	u, err := url.Parse(env.GatewayURL)
	if err != nil {
		return nil, err
	}
	if s.gatewayPort, err = strconv.Atoi(u.Port()); err != nil {
		return nil, fmt.Errorf("gateway URL %s: %w", env.GatewayURL, err)
	}
	s.hubPort = env.Hub.Servers[0].Port
	_, door, err := net.SplitHostPort(env.MemberDoorAddress)
	if err != nil {
		return nil, fmt.Errorf("member door address %q: %w", env.MemberDoorAddress, err)
	}
	if s.doorPort, err = strconv.Atoi(door); err != nil {
		return nil, fmt.Errorf("member door address %q: %w", env.MemberDoorAddress, err)
	}
	return s, nil
}

// gatewayMaxStreams is the HTTP/2 stream limit the gateway announces to its
// callers (the bench, the hub).
func (s *scene) gatewayMaxStreams(ctx context.Context) (uint32, error) {
	ca, err := os.ReadFile(s.env.GatewayCAFile)
	if err != nil {
		return 0, err
	}
	certFile, keyFile := s.env.FrontProxyClientCert()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return 0, err
	}
	return measure.MaxConcurrentStreams(ctx, s.env.GatewayURL, ca, &cert)
}

func (s *scene) gatewayFDLimit() uint64 {
	_, limit, _ := measure.OpenFiles(s.gatewayPID)
	return limit
}

// snapshot is the gateway's state at one moment.
type snapshot struct {
	Label      string
	At         time.Time
	RSSKB      int64
	HeapInuse  float64 // go_memstats_heap_inuse_bytes
	HeapAlloc  float64 // go_memstats_heap_alloc_bytes: after a forced collection, what is live
	StackInuse float64 // go_memstats_stack_inuse_bytes
	Goroutines float64 // go_goroutines
	OpenFiles  int
	// Established TCP connections: from the gateway to each member-b and
	// member-a server (by port), from the hub to the gateway, from the bench
	// to the gateway, the hub and the member door, and all the gateway
	// accepted on its port and on its door.
	ToMemberB, ToMemberA []int
	// ToFleet are those to the cluster phase's servers, by slot (see
	// fleet), and FleetRSSKB their processes' RSS, once they exist.
	ToFleet        []int
	FleetRSSKB     int64
	HubToGateway   int
	BenchToGateway int
	BenchToHub     int
	BenchToDoor    int
	IntoGateway    int
	IntoDoor       int
	// Hub is the hub's own state, read only with a forced collection.
	Hub hubState
	Err string // what could not be read
}

// hubState is the hub kube-apiserver's memory and goroutines: what the hub's
// path costs the hub.
type hubState struct {
	RSSKB      int64
	HeapInuse  float64
	StackInuse float64
	Goroutines float64
}

// takeHub reads the hub's state after two forced collections (its
// /debug/pprof, on by default, and its /metrics, as the hub admin).
func (s *scene) takeHub(ctx context.Context) (hubState, error) {
	var h hubState
	base := s.env.Hub.Servers[0].URL
	if err := measure.ForceGC(ctx, s.hubRoot.Client, s.hubRoot.Header, base); err != nil {
		return h, fmt.Errorf("hub: %w", err)
	}
	var err error
	if h.RSSKB, err = measure.RSSKB(s.hubPID); err != nil {
		return h, fmt.Errorf("hub: %w", err)
	}
	m, err := s.hubRoot.Scrape(ctx, base+"/metrics")
	if err != nil {
		return h, fmt.Errorf("hub: %w", err)
	}
	h.HeapInuse, _ = m.Sum("go_memstats_heap_inuse_bytes", nil)
	h.StackInuse, _ = m.Sum("go_memstats_stack_inuse_bytes", nil)
	h.Goroutines, _ = m.Sum("go_goroutines", nil)
	return h, nil
}

// gatewayMetrics reads the gateway's Go runtime figures from its /metrics.
func (s *scene) gatewayMetrics(ctx context.Context, sn *snapshot) error {
	m, err := s.gatewayRoot.Scrape(ctx, s.env.GatewayURL+"/metrics")
	if err != nil {
		return err
	}
	sn.HeapInuse, _ = m.Sum("go_memstats_heap_inuse_bytes", nil)
	sn.HeapAlloc, _ = m.Sum("go_memstats_heap_alloc_bytes", nil)
	sn.StackInuse, _ = m.Sum("go_memstats_stack_inuse_bytes", nil)
	sn.Goroutines, _ = m.Sum("go_goroutines", nil)
	return nil
}

// forceGC makes the gateway collect garbage twice (measure.ForceGC), so
// that the heap it reports next is what is live.
func (s *scene) forceGC(ctx context.Context) error {
	return measure.ForceGC(ctx, s.gatewayRoot.Client, s.gatewayRoot.Header, s.env.GatewayURL)
}

// heapProfile saves the gateway's heap profile (what is in use as of its last
// collection) to file and returns pprof's top sites by bytes in use: beyond
// what the profile in base holds, unless base is "".
func (s *scene) heapProfile(ctx context.Context, file, base string) (string, error) {
	if err := s.saveProfile(ctx, "/debug/pprof/heap", file); err != nil {
		return "", err
	}
	bin, _ := harness.GatewayBinary(s.env.BinDir)
	args := []string{"-sample_index=inuse_space", "-top", "-nodecount=12"}
	if base != "" {
		args = append(args, "-base", base)
	}
	return measure.Pprof(ctx, bin, file, args...), nil
}

// cpuProfile saves the gateway's CPU profile of the next d (less a second, so
// that it ends within a window of d) to file.
func (s *scene) cpuProfile(ctx context.Context, d time.Duration, file string) error {
	secs := int((d - time.Second).Seconds())
	if secs < 1 {
		secs = 1
	}
	return s.saveProfile(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), file)
}

// saveProfile saves what the gateway's path answers to file.
func (s *scene) saveProfile(ctx context.Context, path, file string) error {
	req, err := s.gatewayRoot.NewRequest(ctx, path)
	if err != nil {
		return err
	}
	resp, err := s.gatewayRoot.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return os.WriteFile(file, data, 0o644)
}

// take reads a snapshot; gc forces a collection first (the series does not).
func (s *scene) take(ctx context.Context, label string, gc bool) snapshot {
	sn := snapshot{Label: label, At: time.Now()}
	var errs []string
	if gc {
		if err := s.forceGC(ctx); err != nil {
			errs = append(errs, err.Error())
		}
		var err error
		if sn.Hub, err = s.takeHub(ctx); err != nil {
			errs = append(errs, err.Error())
		}
	}
	var err error
	if sn.RSSKB, err = measure.RSSKB(s.gatewayPID); err != nil {
		errs = append(errs, err.Error())
	}
	if err := s.gatewayMetrics(ctx, &sn); err != nil {
		errs = append(errs, err.Error())
	}
	sn.OpenFiles, _, _ = measure.OpenFiles(s.gatewayPID)
	if s.fleet != nil {
		sn.FleetRSSKB = s.fleet.rssKB()
	}
	if conns, err := measure.TCPConns(s.gatewayPID); err != nil {
		errs = append(errs, err.Error())
	} else {
		for _, p := range s.memberBPorts {
			sn.ToMemberB = append(sn.ToMemberB, measure.CountConns(conns, p, true))
		}
		for _, p := range s.memberAPorts {
			sn.ToMemberA = append(sn.ToMemberA, measure.CountConns(conns, p, true))
		}
		if s.fleet != nil {
			sn.ToFleet = s.fleet.conns(conns)
		}
		sn.IntoGateway = measure.CountConns(conns, s.gatewayPort, false)
		sn.IntoDoor = measure.CountConns(conns, s.doorPort, false)
	}
	if conns, err := measure.TCPConns(s.hubPID); err != nil {
		errs = append(errs, err.Error())
	} else {
		sn.HubToGateway = measure.CountConns(conns, s.gatewayPort, true)
	}
	if conns, err := measure.TCPConns(0); err != nil {
		errs = append(errs, err.Error())
	} else {
		sn.BenchToGateway = measure.CountConns(conns, s.gatewayPort, true)
		sn.BenchToHub = measure.CountConns(conns, s.hubPort, true)
		sn.BenchToDoor = measure.CountConns(conns, s.doorPort, true)
	}
	if len(errs) > 0 {
		sn.Err = fmt.Sprint(errs)
	}
	return sn
}

// point is one sample of a time series.
type point struct {
	T     time.Duration // since the series began
	Phase string
	snapshot
	Count int // what the phase counts: open watches, Ready clusters
}

// series samples the gateway every interval until stopped; count says what
// the current phase counts.
type series struct {
	mu     sync.Mutex
	phase  string
	points []point
	stop   chan struct{}
	done   chan struct{}
}

func startSeries(ctx context.Context, s *scene, interval time.Duration, count func() int) *series {
	sr := &series{stop: make(chan struct{}), done: make(chan struct{})}
	began := time.Now()
	go func() {
		defer close(sr.done)
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for {
			sn := s.take(ctx, "", false)
			sr.mu.Lock()
			sr.points = append(sr.points, point{T: time.Since(began), Phase: sr.phase, snapshot: sn, Count: count()})
			sr.mu.Unlock()
			select {
			case <-sr.stop:
				return
			case <-ctx.Done():
				return
			case <-tk.C:
			}
		}
	}()
	return sr
}

func (sr *series) setPhase(p string) {
	sr.mu.Lock()
	sr.phase = p
	sr.mu.Unlock()
}

// Stop ends the series and returns its points.
func (sr *series) Stop() []point {
	close(sr.stop)
	<-sr.done
	return sr.points
}
