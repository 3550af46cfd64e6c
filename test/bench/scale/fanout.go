package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// fanOutNS is the namespace of member-a and member-b that the fan-out phase
// lists and watches. Every cluster of the burst is member-a, so one change
// on each member is one event per registered cluster in the merged watch.
const fanOutNS = "bench-fanout"

// fanOutBase is a fan-out over every UpstreamCluster, through the hub.
const fanOutBase = ucPath + "/*/proxy/api/v1/namespaces/" + fanOutNS + "/configmaps"

// fanOutResult is one LIST and one WATCH over every registered cluster.
type fanOutResult struct {
	Members   int // UpstreamClusters selected: the burst's and the harness's
	List      []time.Duration
	ListBytes int64
	ListCPU   []float64 // the gateway's CPU seconds per LIST, net of IdleCPU
	// UserList is a LIST as a user the gateway authorizes through the hub
	// (alice, not in system:masters): first with the authorization decisions
	// not cached, then cached.
	UserList []time.Duration
	IdleCPU  float64 // the idle gateway's CPU seconds per second with the clusters
	// WatchOpen is the time until the merged watch answered: every member's
	// watch is open by then. WatchGoroutines, WatchHeap and WatchStacks are
	// the gateway's goroutines, heap and stack bytes more while it is open,
	// per member.
	WatchOpen                               time.Duration
	WatchGoroutines, WatchHeap, WatchStacks float64
	// Events of one ConfigMap created on each member through the watch with
	// bookmarks, and through a second one as kubectl get --watch asks
	// (Tables, no bookmarks: the composite resourceVersion in every event).
	Events, TableEvents changeEvents
	// HeapFile and HeapTop: the heap profile while the watch is open.
	HeapFile, HeapTop string
	// Watched is a steady-state window with the watch open: every cluster
	// has a request in flight on one of its servers, which the gateway then
	// probes over its pooled connection whatever --probe-with-new-connections
	// says.
	Watched idle
	Err     string
}

// changeEvents are the events of one change per member in a merged watch:
// one per cluster is expected.
type changeEvents struct {
	Events    int
	Bookmarks int // bookmarks received meanwhile, each with the composite resourceVersion
	// Took runs from the creates to the last event, CPU is the gateway's CPU
	// seconds meanwhile, net of the idle gateway's.
	Took time.Duration
	CPU  float64
	// CPUFile is the gateway's CPU profile while the events pass, CPUTop
	// pprof's top functions in it.
	CPUFile, CPUTop string
}

// fanOutPhase LISTs and WATCHes a namespace of the members over every
// registered cluster through the hub, after the cluster phase registered
// them.
//
// The gateway's CPU figures are net of idleCPU (seconds per second), what it
// spends meanwhile on the clusters' health probes.
func fanOutPhase(ctx context.Context, s *scene, members, repeats int, idleCPU float64, watched time.Duration, cpuFile, heapFile string) *fanOutResult {
	res := &fanOutResult{Members: members, IdleCPU: idleCPU}
	net := func(ticks int64, hz float64, d time.Duration) float64 {
		return max(0, float64(ticks)/hz-idleCPU*d.Seconds())
	}
	var memberClients []kubernetes.Interface
	for _, m := range []string{harness.MemberA, harness.MemberB} {
		cs, err := kubernetes.NewForConfig(s.env.Members[m].Config(harness.UserAdmin, 0))
		if err == nil {
			_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fanOutNS}}, metav1.CreateOptions{})
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			res.Err = fmt.Sprintf("namespace %s on %s: %v", fanOutNS, m, err)
			return res
		}
		memberClients = append(memberClients, cs)
	}
	hz, _ := measure.ClockTicks()
	for i := 0; i < repeats && ctx.Err() == nil; i++ {
		cpu0, _ := measure.CPUTicks(s.gatewayPID)
		t0 := time.Now()
		r, err := s.hubRoot.Do(ctx, fanOutBase+"?"+strictParam)
		took := time.Since(t0)
		cpu1, _ := measure.CPUTicks(s.gatewayPID)
		if err != nil {
			res.Err = "LIST: " + err.Error()
			return res
		}
		res.List = append(res.List, took)
		res.ListCPU = append(res.ListCPU, net(cpu1-cpu0, hz, took))
		res.ListBytes = r.Bytes
	}

	// The same LIST as a user the gateway authorizes through the hub
	// (SubjectAccessReviews, cached for a while), twice: the first with the
	// decisions not cached, the second with them cached.
	if hc, err := rest.HTTPClientFor(s.env.HubConfig(harness.UserAlice)); err != nil {
		res.Err = "alice's client: " + err.Error()
	} else {
		alice := &measure.Target{Base: s.env.Hub.Servers[0].URL, Client: hc}
		path := ucPath + "/*/proxy/api/v1/namespaces/" + harness.AliceNamespace + "/configmaps" // member-b refuses alice: a warning
		for range 2 {
			t0 := time.Now()
			if _, err := alice.Do(ctx, path); err != nil {
				res.Err = "LIST as alice: " + err.Error()
				break
			}
			res.UserList = append(res.UserList, time.Since(t0))
		}
	}

	before := s.take(ctx, "before the fan-out watch", true)
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	t0 := time.Now()
	// With bookmarks, as client-go's informers watch: events keep their
	// objects' resourceVersions, bookmarks carry the composite.
	body, err := openWatch(wctx, s.hubRoot, fanOutBase+"?watch=1&allowWatchBookmarks=true", "")
	if err != nil {
		res.Err = "WATCH: " + err.Error()
		return res
	}
	defer body.Close()
	res.WatchOpen = time.Since(t0)
	open := s.take(ctx, "with the fan-out watch open", true)
	res.WatchGoroutines = (open.Goroutines - before.Goroutines) / float64(members)
	res.WatchHeap = (open.HeapInuse - before.HeapInuse) / float64(members)
	res.WatchStacks = (open.StackInuse - before.StackInuse) / float64(members)
	if res.HeapTop, err = s.heapProfile(ctx, heapFile, ""); err != nil {
		logf("clusters: fan-out heap profile: %v", err)
	} else {
		res.HeapFile = heapFile
	}
	logf("clusters: %s steady state with the fan-out watch open", watched)
	res.Watched = s.idle(ctx, watched, nil, "")

	var why string
	res.Events, why = s.changeEvents(ctx, body, memberClients, members, net, false, cpuFile)
	if why != "" {
		res.Err = "WATCH: " + why
		return res
	}
	body.Close()

	// As kubectl get --watch asks: Tables, no bookmarks, from its list's
	// resourceVersion (without one, the members would send the first
	// changes as initial events).
	rv, err := listVersion(wctx, s.hubRoot, fanOutBase)
	if err == nil {
		body, err = openWatch(wctx, s.hubRoot, fanOutBase+"?watch=1&resourceVersion="+url.QueryEscape(rv), tableAccept)
	}
	if err != nil {
		res.Err = "WATCH of Tables: " + err.Error()
		return res
	}
	defer body.Close()
	res.TableEvents, why = s.changeEvents(ctx, body, memberClients, members, net, true, strings.TrimSuffix(cpuFile, ".pprof")+"-table.pprof")
	if why != "" {
		res.Err = "WATCH of Tables: " + why
	}
	return res
}

// listVersion is the resourceVersion of a LIST of path.
func listVersion(ctx context.Context, t *measure.Target, path string) (string, error) {
	req, err := t.NewRequest(ctx, path)
	if err != nil {
		return "", err
	}
	resp, err := t.Client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var list metav1.List
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return "", fmt.Errorf("LIST: %s: %w", resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK || list.ResourceVersion == "" {
		return "", fmt.Errorf("LIST: %s without a resourceVersion", resp.Status)
	}
	return list.ResourceVersion, nil
}

const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"

// changeEvents creates a ConfigMap on each member and reads body, an open
// merged watch of Tables or of objects, until every member's event came,
// with a CPU profile of the gateway meanwhile written to cpuFile. why says
// what failed.
func (s *scene) changeEvents(ctx context.Context, body io.Reader, memberClients []kubernetes.Interface, members int,
	net func(ticks int64, hz float64, d time.Duration) float64, table bool, cpuFile string) (res changeEvents, why string) {
	hz, _ := measure.ClockTicks()
	profiled := make(chan error, 1)
	go func() { profiled <- s.cpuProfile(ctx, 3*time.Second, cpuFile) }()
	cpu0, _ := measure.CPUTicks(s.gatewayPID)
	t0 := time.Now()
	for _, cs := range memberClients {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "fanout-"}}
		if _, err := cs.CoreV1().ConfigMaps(fanOutNS).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return res, "creating the ConfigMaps: " + err.Error()
		}
	}
	dec := json.NewDecoder(body)
	seen := map[string]bool{}
	for len(seen) < members {
		var ev struct {
			Type   string
			Object struct {
				metav1.PartialObjectMetadata
				Rows []struct{ Object metav1.PartialObjectMetadata } // of a Table
			}
		}
		if err := dec.Decode(&ev); err != nil {
			why = fmt.Sprintf("%d of %d events: %v", len(seen), members, err)
			break
		}
		switch ev.Type {
		case "ADDED":
			objects := []metav1.PartialObjectMetadata{ev.Object.PartialObjectMetadata}
			if table {
				objects = objects[:0]
				for _, r := range ev.Object.Rows {
					objects = append(objects, r.Object)
				}
			}
			for _, o := range objects {
				seen[o.Annotations["gateway.kubewharf.io/cluster"]] = true
			}
		case "BOOKMARK":
			res.Bookmarks++
		}
	}
	res.Events = len(seen)
	res.Took = time.Since(t0)
	cpu1, _ := measure.CPUTicks(s.gatewayPID)
	res.CPU = net(cpu1-cpu0, hz, res.Took)
	if err := <-profiled; err != nil {
		logf("clusters: fan-out CPU profile: %v", err)
	} else {
		bin, _ := harness.GatewayBinary(s.env.BinDir)
		res.CPUFile, res.CPUTop = cpuFile, measure.Pprof(ctx, bin, cpuFile, "-top", "-nodecount=15")
	}
	return res, why
}

// strictParam makes a fan-out LIST fail when a member fails, so that a
// member left out cannot make it look faster.
const strictParam = "gateway.kubewharf.io/strict=true"

func (r *report) fanOutSection(p func(string, ...any), f *fanOutResult) {
	p("### Fan-out over the %d clusters\n\n", f.Members)
	p("Through the hub, `upstreamclusters/*/proxy/api/v1/namespaces/%s/configmaps`: a LIST (strict, median of %d) and a WATCH with bookmarks (as client-go's informers watch) over every registered cluster; then one ConfigMap created on member-a and one on member-b, which every cluster of the burst (all member-a) and the harness's two see: one ADDED event per cluster in the merged watch. The same again through a WATCH of Tables without bookmarks, as kubectl get --watch asks, whose every event carries the composite resourceVersion.\n\n", fanOutNS, len(f.List))
	n := float64(f.Members)
	p("The gateway's CPU figures are net of what the idle gateway spends meanwhile on the clusters' health probes (%.1f ms/s). ", 1e3*f.IdleCPU)
	p("While the WATCH is open, a steady-state window like the cluster phase's measures the idle gateway again: every cluster then has a request in flight on one of its servers, which the gateway probes over that server's pooled connection even with --probe-with-new-connections.\n\n")
	p("| fan-out over %d clusters | total | per cluster |\n|---|---:|---:|\n", f.Members)
	if len(f.List) > 0 {
		cpu := measure.Median(f.ListCPU)
		p("| LIST time | %s | %s |\n", measure.Dur(medianDur(f.List)), measure.Dur(time.Duration(float64(medianDur(f.List))/n)))
		p("| gateway CPU per LIST | %s | %s |\n", measure.Dur(time.Duration(cpu*1e9)), measure.Dur(time.Duration(cpu*1e9/n)))
		p("| LIST body (as received) | %s | |\n", measure.KiB(float64(f.ListBytes)))
	}
	if len(f.UserList) == 2 {
		p("| LIST as a user authorized through the hub (alice), decisions not cached / cached | %s / %s | %s / %s |\n", measure.Dur(f.UserList[0]), measure.Dur(f.UserList[1]),
			measure.Dur(time.Duration(float64(f.UserList[0])/n)), measure.Dur(time.Duration(float64(f.UserList[1])/n)))
	}
	if f.WatchOpen > 0 {
		p("| WATCH: until every member's watch is open | %s | |\n", measure.Dur(f.WatchOpen))
		p("| gateway goroutines with the WATCH open | | %.2f |\n", f.WatchGoroutines)
		p("| gateway heap / stacks with the WATCH open (after a GC) | | %s / %s |\n", measure.KiB(f.WatchHeap), measure.KiB(f.WatchStacks))
	}
	if w := f.Watched; w.For > 0 {
		p("| %s with the WATCH open and nothing changing: gateway CPU | %.1f ms/s | %.1f µs/s |\n", w.For.Round(time.Second), 1e3*w.GatewayCPU, 1e6*w.GatewayCPU/n)
		p("| the same: member-a CPU (both replicas) | %.1f ms/s | %.1f µs/s |\n", 1e3*w.ServersCPU, 1e6*w.ServersCPU/n)
		p("| the same: gateway probes over pooled / new connections | %.1f / %.1f /s | |\n", w.ProbesPooled, w.ProbesNew)
	}
	for _, e := range []struct {
		what string
		ev   changeEvents
	}{{"the WATCH with bookmarks", f.Events}, {"a WATCH of Tables without bookmarks (kubectl get --watch)", f.TableEvents}} {
		if e.ev.Events == 0 {
			continue
		}
		p("| %s: events of one change per member, received / expected | %d / %d | |\n", e.what, e.ev.Events, f.Members)
		p("| bookmarks with the composite resourceVersion meanwhile | %d | |\n", e.ev.Bookmarks)
		p("| until the last event | %s | |\n", measure.Dur(e.ev.Took))
		p("| gateway CPU for the events | %s | %s per event |\n", measure.Dur(time.Duration(e.ev.CPU*1e9)), measure.Dur(time.Duration(e.ev.CPU*1e9/float64(e.ev.Events))))
	}
	if f.Err != "" {
		p("\nNot measured: %s.\n", f.Err)
	}
	p("\n")
	if f.HeapFile != "" {
		p("The gateway's heap in use with the WATCH open, by allocation site (`%s`; `go tool pprof -sample_index=inuse_space -top`):\n\n```\n%s```\n\n", f.HeapFile, measure.TrimPprof(f.HeapTop))
	}
	for _, e := range []changeEvents{f.Events, f.TableEvents} {
		if e.CPUFile != "" {
			p("The gateway's CPU while the events pass (a profile of 3 s from just before the creates, `%s`; `go tool pprof -top`):\n\n```\n%s```\n\n", e.CPUFile, measure.TrimPprof(e.CPUTop))
		}
	}
}
