package main

import (
	"bufio"
	"context"
	"sort"
	"strings"
	"time"

	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
)

// group is a cost center of the profile. Every sample goes to exactly one
// group: the first group, in the order of profileGroups, that one of the
// sample's frames matches (a frame matches when it contains one of Match and
// none of Exclude). The order puts leaf-side work (GC, system calls, crypto,
// HTTP/2, the reverse proxy) before the handlers that wrap it, so a wrapper
// such as a filter of the generic chain keeps only its own work, and the
// groups add up to 100%.
type group struct {
	Name    string
	Match   []string
	Exclude []string
	Seconds float64
	Pct     float64
}

func profileGroups() []group {
	return []group{
		{Name: "garbage collection (background mark, assists, sweep)", Match: []string{"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep", "runtime.bgscavenge", "runtime.gcStart", "runtime.markroot"}},
		{Name: "goroutine stack growth (newstack, copystack)", Match: []string{"runtime.newstack", "runtime.copystack", "runtime.morestack"}},
		{Name: "system calls (socket read/write, epoll, futex)", Match: []string{"syscall.Syscall", "syscall.RawSyscall", "internal/runtime/syscall.", "runtime.netpoll", "runtime.futex", "runtime.epoll"}},
		{Name: "scheduler (findRunnable, park, wake)", Match: []string{"runtime.schedule", "runtime.findRunnable", "runtime.park_m", "runtime.ready", "runtime.wakep", "runtime.goready", "runtime.mcall"}},
		{Name: "x509 chain verification of the caller's client certificate", Match: []string{"crypto/x509.(*Certificate).Verify"}},
		{Name: "TLS record encryption / decryption", Match: []string{"crypto/tls."}},
		{Name: "HTTP/2 client toward the member (RoundTrip, read loop, frames)", Match: []string{"http2.(*ClientConn)", "http2ClientConn", "http2.(*clientStream)", "http2clientStream", "http2.(*clientConnReadLoop)", "http2clientConnReadLoop", "http2.(*Transport)", "http2Transport"}},
		{Name: "HTTP/2 server toward the caller (frames, response writer)", Match: []string{"http2.(*serverConn)", "http2serverConn", "http2.(*responseWriter", "http2responseWriter", "http2.(*requestBody)", "http2.(*Framer)", "http2.(*writeResHeaders)", "http2.(*Server)", "http2.(*ServeConnOpts)"}, Exclude: []string{"runHandler"}},
		{Name: "reverse proxy (UpgradeAwareHandler, httputil.ReverseProxy)", Match: []string{"k8s.io/apimachinery/pkg/util/proxy.", "net/http/httputil."}},
		{Name: "authentication (request-header, x509 authenticator, groups)", Match: []string{"k8s.io/apiserver/pkg/authentication/"}},
		{Name: "authorization (delegated SubjectAccessReview, cached)", Match: []string{"k8s.io/apiserver/pkg/authorization/", "k8s.io/apiserver/plugin/pkg/authorizer/"}},
		{Name: "metrics (prometheus, component-base, filter latency)", Match: []string{"github.com/prometheus/", "k8s.io/component-base/metrics", "k8s.io/apiserver/pkg/endpoints/metrics.", "k8s.io/apiserver/pkg/endpoints/filterlatency."}, Exclude: []string{"RecordLongRunning", "InstrumentRouteFunc", "trackStarted.func1", "trackCompleted.func1"}},
		{Name: "logging (klog, httplog)", Match: []string{"k8s.io/klog/", "k8s.io/apiserver/pkg/server/httplog."}, Exclude: []string{"WithLogging", "withLogging"}},
		// The short chain's entry (proxy/chain) wraps the apiserver's filters, whose
		// closures are inlined into chain.New: those frames are the filters' work.
		{Name: "kube-gateway proxy code (request, dispatch, flow control, balance, forward)", Match: []string{"github.com/kubewharf/kube-gateway/proxy/", "github.com/kubewharf/kube-gateway/registry/"}, Exclude: []string{"github.com/kubewharf/kube-gateway/proxy/chain.New"}},
		{Name: "go-restful routing and the Connect handler", Match: []string{"github.com/emicklei/go-restful", "k8s.io/apiserver/pkg/endpoints/handlers.", "k8s.io/apiserver/pkg/endpoints.(*APIInstaller)"}},
		{Name: "tracing middleware (otelhttp)", Match: []string{"go.opentelemetry.io/"}},
		{Name: "generic apiserver filter chain, own work (request info, audit, impersonation filter, timeouts, ...)", Match: []string{"k8s.io/apiserver/", "github.com/kubewharf/kube-gateway/cmd/", "github.com/kubewharf/kube-gateway/proxy/chain.New"}},
		{Name: "net/http server (conn, headers)", Match: []string{"net/http."}},
		{Name: "memory allocation elsewhere (mallocgc)", Match: []string{"runtime.mallocgc"}},
		{Name: "background: etcd client, informers, health probes, gRPC", Match: []string{"go.etcd.io/", "k8s.io/client-go/", "google.golang.org/grpc"}},
	}
}

// analyzeProfile runs `go tool pprof` on the saved profile: top 15 by
// cumulative time, top 15 by flat time, and the groups above (from -traces).
func analyzeProfile(ctx context.Context, bin, file string) (topCum, topFlat string, groups []group, total float64) {
	topCum = measure.Pprof(ctx, bin, file, "-top", "-cum", "-nodecount=15")
	topFlat = measure.Pprof(ctx, bin, file, "-top", "-nodecount=15")
	groups, total = groupTraces(measure.Pprof(ctx, bin, file, "-traces"))
	return topCum, topFlat, groups, total
}

// analyzeAllocs returns the top 15 allocation sites by bytes of an allocs
// profile and the bytes allocated in all (the "of N total" of pprof's header).
func analyzeAllocs(ctx context.Context, bin, file string) (top string, total float64) {
	top = measure.Pprof(ctx, bin, file, "-sample_index=alloc_space", "-top", "-nodecount=15")
	return top, measure.PprofTotal(top)
}

// groupTraces parses `go tool pprof -traces` output: blocks separated by
// "-----------+----" lines, the first line of a block holds the sample value
// and the leaf frame, the following lines the callers.
func groupTraces(traces string) ([]group, float64) {
	gs := profileGroups()
	var total, other float64
	var value float64
	var frames []string
	flush := func() {
		if value == 0 {
			frames = nil
			return
		}
		total += value
		hit := -1
	frames:
		for _, f := range frames {
			for i := range gs {
				if hit >= 0 && i >= hit {
					break
				}
				if gs[i].matches(f) {
					hit = i
					if i == 0 {
						break frames
					}
					break
				}
			}
		}
		if hit >= 0 {
			gs[hit].Seconds += value
		} else {
			other += value
		}
		value, frames = 0, nil
	}
	sc := bufio.NewScanner(strings.NewReader(traces))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	inBlock := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "-----------+") {
			flush()
			inBlock = true
			continue
		}
		if !inBlock {
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if value == 0 && len(frames) == 0 {
			if d, err := time.ParseDuration(f[0]); err == nil && len(f) >= 2 {
				value = d.Seconds()
				frames = append(frames, strings.Join(f[1:], " "))
				continue
			}
		}
		frames = append(frames, strings.Join(f, " "))
	}
	flush()
	gs = append(gs, group{Name: "other", Seconds: other})
	for i := range gs {
		if total > 0 {
			gs[i].Pct = 100 * gs[i].Seconds / total
		}
	}
	sort.SliceStable(gs, func(i, j int) bool { return gs[i].Seconds > gs[j].Seconds })
	return gs, total
}

func (g group) matches(frame string) bool {
	for _, x := range g.Exclude {
		if strings.Contains(frame, x) {
			return false
		}
	}
	for _, m := range g.Match {
		if strings.Contains(frame, m) {
			return true
		}
	}
	return false
}
