package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/harness"
)

const (
	watchNS    = "bench-watch"
	roleLabel  = "kube-gateway-bench/role"
	eventCMs   = 10 // ConfigMaps the updates go round
	watchHours = 3600
)

// idleName is the one ConfigMap name the idle watches select: no such object
// exists, so they stay open and receive nothing. Selecting by name (not by
// label) matters: the member's watch cache indexes watches by namespace and
// name, so an update of another object does not even wake them, and the
// event phase measures delivery rather than the member filtering thousands
// of idle watches per event.
const idleName = "idle-watch-selects-nothing"

// idleWatchPath watches the ConfigMaps of watchNS named idleName.
func idleWatchPath() string {
	q := url.Values{"watch": {"1"}, "fieldSelector": {"metadata.name=" + idleName}, "timeoutSeconds": {fmt.Sprint(watchHours)}}
	return "/api/v1/namespaces/" + watchNS + "/configmaps?" + q.Encode()
}

// eventWatchPath watches the ConfigMaps of watchNS that the updates go to.
func eventWatchPath() string {
	q := url.Values{"watch": {"1"}, "labelSelector": {roleLabel + "=event"}, "timeoutSeconds": {fmt.Sprint(watchHours)}}
	return "/api/v1/namespaces/" + watchNS + "/configmaps?" + q.Encode()
}

// watchSet is a group of open watches.
type watchSet struct {
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	open     atomic.Int64
	early    atomic.Int64 // ended before the bench closed them
	Opened   int
	Errors   int
	FirstErr string
	Took     time.Duration
}

// openWatches opens n watches of path through t, c at a time, each read by
// read until it ends. open, if not nil, counts every watch open.
func openWatches(parent context.Context, t *measure.Target, path string, n, c int, open *atomic.Int64, read func(i int, body io.Reader)) *watchSet {
	ws := &watchSet{}
	ws.ctx, ws.cancel = context.WithCancel(parent)
	var mu sync.Mutex
	start := time.Now()
	concurrently(ws.ctx, n, c, func(i int) {
		body, err := openWatch(ws.ctx, t, path, "")
		if err != nil {
			mu.Lock()
			ws.Errors++
			if ws.FirstErr == "" {
				ws.FirstErr = err.Error()
			}
			mu.Unlock()
			return
		}
		ws.open.Add(1)
		if open != nil {
			open.Add(1)
		}
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			read(i, body)
			body.Close()
			ws.open.Add(-1)
			if open != nil {
				open.Add(-1)
			}
			if ws.ctx.Err() == nil {
				ws.early.Add(1)
			}
		}()
	})
	ws.Took = time.Since(start)
	ws.Opened = int(ws.open.Load())
	return ws
}

// concurrently calls f for 0 to n-1, c calls at a time, and returns when
// every call returned; once ctx is done it starts no more.
func concurrently(ctx context.Context, n, c int, f func(i int)) {
	var next atomic.Int64
	var workers sync.WaitGroup
	for range c {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				f(i)
			}
		}()
	}
	workers.Wait()
}

// openWatch opens a watch of path and returns its body; accept, when set, is
// the request's Accept header.
func openWatch(ctx context.Context, t *measure.Target, path, accept string) (io.ReadCloser, error) {
	req, err := t.NewRequest(ctx, path)
	if err != nil {
		return nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := t.Client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("watch %s: %s: %s", t.Key, resp.Status, b)
	}
	return resp.Body, nil
}

func discard(_ int, body io.Reader) { _, _ = io.Copy(io.Discard, body) }

// Close ends every watch of the set and waits for their readers.
func (ws *watchSet) Close() {
	ws.cancel()
	ws.wg.Wait()
}

// received is one event a sample watch read.
type received struct {
	RV string
	At time.Time
}

// recorder keeps what every sample watch received, one slice per watch
// (written by that watch's reader only), and counts it all.
type recorder struct {
	events [][]received
	total  atomic.Int64
	mu     sync.Mutex
	ends   map[string]int // how the watches ended, before or after the bench closed them
}

func newRecorder(n int) *recorder {
	return &recorder{events: make([][]received, n), ends: map[string]int{}}
}

func (r *recorder) ended(how string) {
	r.mu.Lock()
	r.ends[how]++
	r.mu.Unlock()
}

func (r *recorder) read(i int, body io.Reader) {
	dec := json.NewDecoder(body)
	for {
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			} `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			// EOF: the server ended the response (member-b ends the watches
			// of a client that does not keep up); context canceled: the bench.
			r.ended(err.Error())
			return
		}
		if ev.Type == "ERROR" {
			r.ended("ERROR event")
		}
		r.events[i] = append(r.events[i], received{RV: ev.Object.Metadata.ResourceVersion, At: time.Now()})
		r.total.Add(1)
	}
}

// watchResult is everything the watch phase measured.
type watchResult struct {
	MaxStreams   uint32 // member-b's SETTINGS_MAX_CONCURRENT_STREAMS
	GatewayStrms uint32 // the gateway's own, toward its callers
	HubStreams   uint32 // the hub's, toward its clients
	DoorStreams  uint32 // the member door's, toward member-b's clients
	Before       snapshot
	GatewayOpen  snapshot // N open through the gateway alone
	AllOpen      snapshot // and M through the hub
	DoorOpen     snapshot // and D through member-b's door
	AfterClose   snapshot
	PeakOpenFDs  int
	Gateway, Hub *watchSet
	Door         *watchSet // nil without -door-watches
	EarlyGateway int64     // idle watches that ended before they were closed
	EarlyHub     int64
	EarlyDoor    int64
	SettleTook   time.Duration
	Settled      bool // goroutines and connections to member-b came back within -settle
	Events       eventResult
	Series       []point
	HeapFile     string // the gateway's heap profile with every watch open
	HeapTop      string // its top sites by bytes in use
	Floor        *floorResult
	// Cycles are the open-and-close cycles after the first (-watch-cycles).
	Cycles []cycleResult

	// The gateway's heap profiles before the watches and after closing them,
	// and the top sites of what the second holds more than the first.
	HeapBeforeFile, HeapClosedFile, HeapLeftTop string
	// The gateway's heap profiles before and with the door's watches, and
	// the top sites of their difference: where a door watch's memory goes.
	DoorHeapBeforeFile, DoorHeapFile, DoorHeapTop string
}

// cycleResult is one more open-and-close of the idle watches: whatever
// closing leaves behind would pile up from one to the next.
type cycleResult struct {
	Opened, Errors int
	FirstErr       string
	Settled        bool
	SettleTook     time.Duration
	AfterClose     snapshot
}

// eventResult is the event delivery measurement.
type eventResult struct {
	Published, PublishErrors int
	FirstPublishErr          string
	PublishRate              float64 // achieved
	Samples                  int     // watches per path
	Drain                    time.Time
	DrainTook                time.Duration // from the last update until the sample watches went quiet
	OpenErrors               string
	Gateway, Direct          delivery
}

// delivery is what the sample watches of one path received.
type delivery struct {
	Received  int // events matched to a published update
	Expected  int // published × watches
	Latencies []time.Duration
	Early     int64
	Ends      map[string]int // how the sample watches' streams ended
}

func watchPhase(ctx context.Context, s *scene, o options) (*watchResult, error) {
	res := &watchResult{}
	cs, err := kubernetes.NewForConfig(s.env.Members[harness.MemberB].Config(harness.UserAdmin, 0))
	if err != nil {
		return nil, err
	}
	if err := setupWatchObjects(ctx, cs); err != nil {
		return nil, err
	}
	mb := s.env.Members[harness.MemberB]
	if res.MaxStreams, err = measure.MaxConcurrentStreams(ctx, mb.Servers[0].URL, mb.CAData, nil); err != nil {
		logf("member-b's stream limit: %v", err)
	}
	if res.GatewayStrms, err = s.gatewayMaxStreams(ctx); err != nil {
		logf("the gateway's stream limit: %v", err)
	}
	if res.HubStreams, err = s.hub.MaxConcurrentStreams(ctx); err != nil {
		logf("the hub's stream limit: %v", err)
	}
	if o.DoorWatches > 0 {
		if res.DoorStreams, err = s.door.MaxConcurrentStreams(ctx); err != nil {
			logf("the member door's stream limit: %v", err)
		}
	}

	res.Before = s.take(ctx, "before", true)
	res.HeapBeforeFile = filepath.Join(o.OutDir, "kube-gateway-heap-before-watches.pprof")
	if err := s.saveProfile(ctx, "/debug/pprof/heap", res.HeapBeforeFile); err != nil {
		logf("watches: heap profile: %v", err)
		res.HeapBeforeFile = ""
	}
	logf("watches: before: gateway RSS %s, %0.f goroutines, %v connections to member-b", measure.MB(float64(res.Before.RSSKB)), res.Before.Goroutines, res.Before.ToMemberB)
	var open atomic.Int64
	sr := startSeries(ctx, s, o.SampleInterval, func() int { return int(open.Load()) })
	defer func() {
		if sr != nil {
			sr.Stop()
		}
	}()
	peakFDs := func() {
		if n, _, err := measure.OpenFiles(s.gatewayPID); err == nil {
			res.PeakOpenFDs = max(res.PeakOpenFDs, n)
		}
	}

	sr.setPhase("before")
	if err := sleep(ctx, 2*o.SampleInterval); err != nil {
		return nil, err
	}
	sr.setPhase("open via gateway")
	logf("watches: opening %d idle watches through the gateway alone, %d at a time", o.Watches, o.OpenConcurrency)
	res.Gateway = openWatches(ctx, s.gateway, idleWatchPath(), o.Watches, o.OpenConcurrency, &open, discard)
	logf("watches: %d open in %s (%d errors%s)", res.Gateway.Opened, res.Gateway.Took.Round(10*time.Millisecond), res.Gateway.Errors, firstErr(res.Gateway.FirstErr))
	defer res.Gateway.Close()
	if err := sleep(ctx, 2*time.Second); err != nil {
		return nil, err
	}
	peakFDs()
	res.GatewayOpen = s.take(ctx, "gateway watches open", true)

	sr.setPhase("open via hub")
	logf("watches: opening %d idle watches through hub + gateway", o.HubWatches)
	res.Hub = openWatches(ctx, s.hub, idleWatchPath(), o.HubWatches, o.OpenConcurrency, &open, discard)
	logf("watches: %d open in %s (%d errors%s)", res.Hub.Opened, res.Hub.Took.Round(10*time.Millisecond), res.Hub.Errors, firstErr(res.Hub.FirstErr))
	defer res.Hub.Close()
	if err := sleep(ctx, 2*time.Second); err != nil {
		return nil, err
	}
	peakFDs()
	res.AllOpen = s.take(ctx, "all open", true)
	logf("watches: all open: gateway RSS %s, %.0f goroutines, %v connections to member-b, %d from the hub",
		measure.MB(float64(res.AllOpen.RSSKB)), res.AllOpen.Goroutines, res.AllOpen.ToMemberB, res.AllOpen.HubToGateway)

	if o.DoorWatches > 0 {
		sr.setPhase("open via door")
		res.DoorHeapBeforeFile = filepath.Join(o.OutDir, "kube-gateway-heap-before-door-watches.pprof")
		if err := s.saveProfile(ctx, "/debug/pprof/heap", res.DoorHeapBeforeFile); err != nil {
			logf("watches: heap profile: %v", err)
			res.DoorHeapBeforeFile = ""
		}
		logf("watches: opening %d idle watches through member-b's door", o.DoorWatches)
		res.Door = openWatches(ctx, s.door, idleWatchPath(), o.DoorWatches, o.OpenConcurrency, &open, discard)
		logf("watches: %d open in %s (%d errors%s)", res.Door.Opened, res.Door.Took.Round(10*time.Millisecond), res.Door.Errors, firstErr(res.Door.FirstErr))
		defer res.Door.Close()
		if err := sleep(ctx, 2*time.Second); err != nil {
			return nil, err
		}
		peakFDs()
		res.DoorOpen = s.take(ctx, "door open", true)
		logf("watches: door watches open: gateway RSS %s, %.0f goroutines, %v connections to member-b, %d from the bench to the door",
			measure.MB(float64(res.DoorOpen.RSSKB)), res.DoorOpen.Goroutines, res.DoorOpen.ToMemberB, res.DoorOpen.BenchToDoor)
		if res.DoorHeapBeforeFile != "" {
			res.DoorHeapFile = filepath.Join(o.OutDir, "kube-gateway-heap-door-watches.pprof")
			if res.DoorHeapTop, err = s.heapProfile(ctx, res.DoorHeapFile, res.DoorHeapBeforeFile); err != nil {
				logf("watches: heap profile: %v", err)
				res.DoorHeapFile = ""
			}
		}
	}
	res.HeapFile = filepath.Join(o.OutDir, "kube-gateway-heap-watches.pprof")
	if res.HeapTop, err = s.heapProfile(ctx, res.HeapFile, ""); err != nil {
		logf("watches: heap profile: %v", err)
		res.HeapFile = ""
	}

	sr.setPhase("events")
	if o.SampleWatches > 0 && o.EventRate > 0 {
		ev, err := deliver(ctx, s, cs, o, &open)
		if err != nil {
			return nil, err
		}
		res.Events = *ev
	}
	peakFDs()

	sr.setPhase("closed")
	logf("watches: closing all")
	res.Gateway.Close()
	res.Hub.Close()
	res.EarlyGateway, res.EarlyHub = res.Gateway.early.Load(), res.Hub.early.Load()
	if res.Door != nil {
		res.Door.Close()
		res.EarlyDoor = res.Door.early.Load()
	}
	if res.Settled, res.SettleTook, err = s.settle(ctx, res.Before, o.Settle); err != nil {
		return nil, err
	}
	res.AfterClose = s.take(ctx, "after close", true)
	if res.HeapBeforeFile != "" {
		res.HeapClosedFile = filepath.Join(o.OutDir, "kube-gateway-heap-watches-closed.pprof")
		if res.HeapLeftTop, err = s.heapProfile(ctx, res.HeapClosedFile, res.HeapBeforeFile); err != nil {
			logf("watches: heap profile: %v", err)
			res.HeapClosedFile = ""
		}
	}
	logf("watches: after closing (%s): gateway RSS %s, %.0f goroutines, %v connections to member-b",
		res.SettleTook.Round(100*time.Millisecond), measure.MB(float64(res.AfterClose.RSSKB)), res.AfterClose.Goroutines, res.AfterClose.ToMemberB)
	for c := 2; c <= o.WatchCycles; c++ {
		sr.setPhase(fmt.Sprintf("cycle %d", c))
		logf("watches: cycle %d: opening and closing %d + %d + %d idle watches", c, o.Watches, o.HubWatches, o.DoorWatches)
		g := openWatches(ctx, s.gateway, idleWatchPath(), o.Watches, o.OpenConcurrency, &open, discard)
		h := openWatches(ctx, s.hub, idleWatchPath(), o.HubWatches, o.OpenConcurrency, &open, discard)
		d := openWatches(ctx, s.door, idleWatchPath(), o.DoorWatches, o.OpenConcurrency, &open, discard)
		g.Close()
		h.Close()
		d.Close()
		cr := cycleResult{Opened: g.Opened + h.Opened + d.Opened, Errors: g.Errors + h.Errors + d.Errors, FirstErr: cmp.Or(g.FirstErr, h.FirstErr, d.FirstErr)}
		if cr.Settled, cr.SettleTook, err = s.settle(ctx, res.Before, o.Settle); err != nil {
			return nil, err
		}
		cr.AfterClose = s.take(ctx, fmt.Sprintf("after close, cycle %d", c), true)
		logf("watches: cycle %d closed (%s): gateway RSS %s, live heap %s, %.0f goroutines, %v connections to member-b", c,
			cr.SettleTook.Round(100*time.Millisecond), measure.MB(float64(cr.AfterClose.RSSKB)), mib(cr.AfterClose.HeapAlloc), cr.AfterClose.Goroutines, cr.AfterClose.ToMemberB)
		res.Cycles = append(res.Cycles, cr)
	}
	if err := sleep(ctx, 2*o.SampleInterval); err != nil {
		return nil, err
	}
	res.Series = sr.Stop()
	sr = nil
	return res, nil
}

// settle waits up to d for the gateway to be back to before (settled); the
// gateway ends a closed watch's upstream stream and goroutines
// asynchronously, and keeps the connections to member-b (each with a read
// loop) until their idle timeout.
func (s *scene) settle(ctx context.Context, before snapshot, d time.Duration) (ok bool, took time.Duration, err error) {
	start := time.Now()
	for time.Since(start) < d {
		if s.settled(ctx, before) {
			return true, time.Since(start), nil
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return false, time.Since(start), err
		}
	}
	return false, time.Since(start), nil
}

// settled reports whether the gateway's goroutines are back near before's and
// its connections to member-b and member-a are no more than before's.
func (s *scene) settled(ctx context.Context, before snapshot) bool {
	var sn snapshot
	if err := s.gatewayMetrics(ctx, &sn); err != nil || sn.Goroutines > before.Goroutines*1.1+20 {
		return false
	}
	conns, err := measure.TCPConns(s.gatewayPID)
	if err != nil {
		return false
	}
	count := func(ports []int) int {
		n := 0
		for _, p := range ports {
			n += measure.CountConns(conns, p, true)
		}
		return n
	}
	return count(s.memberBPorts) <= sum(before.ToMemberB) && count(s.memberAPorts) <= sum(before.ToMemberA)
}

func firstErr(e string) string {
	if e == "" {
		return ""
	}
	return ", first: " + e
}

// setupWatchObjects creates namespace watchNS and the ConfigMaps the
// updates go to, on member-b.
func setupWatchObjects(ctx context.Context, cs kubernetes.Interface) error {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: watchNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for i := 0; i < eventCMs; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: eventName(i), Labels: map[string]string{roleLabel: "event"}}, Data: map[string]string{"seq": "0"}}
		if _, err := cs.CoreV1().ConfigMaps(watchNS).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

func eventName(i int) string { return fmt.Sprintf("event-%02d", i) }

// deliver opens the sample watches (through the gateway alone and directly on
// member-b), publishes ConfigMap updates at o.EventRate for o.EventDuration
// and matches every received event to its update by resourceVersion: the
// delay is from the update's response to the event's receipt.
func deliver(ctx context.Context, s *scene, cs kubernetes.Interface, o options, open *atomic.Int64) (*eventResult, error) {
	logf("events: opening %d sample watches through the gateway and %d on member-b", o.SampleWatches, o.SampleWatches)
	res, ds, err := deliverVia(ctx, cs, o, o.SampleWatches, []watchVia{
		{target: s.gateway, path: eventWatchPath(), open: open},
		{target: s.direct, path: eventWatchPath()},
	})
	if err != nil {
		return nil, err
	}
	res.Gateway, res.Direct = ds[0], ds[1]
	logf("events: %d published (%.0f/s); gateway p50 %s p99 %s (%d/%d received); direct p50 %s p99 %s (%d/%d)",
		res.Published, res.PublishRate,
		measure.Dur(measure.Pct(res.Gateway.Latencies, 50)), measure.Dur(measure.Pct(res.Gateway.Latencies, 99)), res.Gateway.Received, res.Gateway.Expected,
		measure.Dur(measure.Pct(res.Direct.Latencies, 50)), measure.Dur(measure.Pct(res.Direct.Latencies, 99)), res.Direct.Received, res.Direct.Expected)
	return res, nil
}

// watchVia is one way the sample watches of deliverVia take: path through
// target; open, if not nil, counts them while they are open.
type watchVia struct {
	target *measure.Target
	path   string
	open   *atomic.Int64
}

// deliverVia opens samples watches along each of vias, publishes ConfigMap
// updates of watchNS on member-b (cs) at o.EventRate for o.EventDuration and
// matches every event each watch received to its update by resourceVersion:
// one delivery per via, in order. The result's Gateway and Direct are left
// to the caller.
func deliverVia(ctx context.Context, cs kubernetes.Interface, o options, samples int, vias []watchVia) (*eventResult, []delivery, error) {
	res := &eventResult{Samples: samples}
	recs := make([]*recorder, len(vias))
	sets := make([]*watchSet, len(vias))
	var openErrs []string
	for i, v := range vias {
		recs[i] = newRecorder(samples)
		sets[i] = openWatches(ctx, v.target, v.path, samples, o.OpenConcurrency, v.open, recs[i].read)
		defer sets[i].Close()
		if sets[i].Errors > 0 {
			openErrs = append(openErrs, fmt.Sprintf("%s %d%s", v.target.Key, sets[i].Errors, firstErr(sets[i].FirstErr)))
		}
	}
	res.OpenErrors = strings.Join(openErrs, "; ")
	// The initial ADDED events of the selected objects arrive first.
	if err := sleep(ctx, 2*time.Second); err != nil {
		return nil, nil, err
	}

	logf("events: publishing %.0f ConfigMap updates/s for %s", o.EventRate, o.EventDuration)
	var (
		mu        sync.Mutex
		published = map[string]time.Time{}
		wg        sync.WaitGroup
	)
	lim := rate.NewLimiter(rate.Limit(o.EventRate), 1)
	start := time.Now()
	for i := 0; time.Since(start) < o.EventDuration; i++ {
		if err := lim.Wait(ctx); err != nil {
			return nil, nil, err
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			patch := fmt.Appendf(nil, `{"data":{"seq":"%d"}}`, i)
			cm, err := cs.CoreV1().ConfigMaps(watchNS).Patch(ctx, eventName(i%eventCMs), types.MergePatchType, patch, metav1.PatchOptions{})
			at := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.PublishErrors++
				if res.FirstPublishErr == "" {
					res.FirstPublishErr = err.Error()
				}
				return
			}
			published[cm.ResourceVersion] = at
		}(i)
	}
	wg.Wait()
	res.Published = len(published)
	res.PublishRate = float64(res.Published) / time.Since(start).Seconds()
	// Stragglers: until no sample watch received anything for 2 s (at most 30 s).
	res.Drain = time.Now()
	total := func() int64 {
		var n int64
		for _, r := range recs {
			n += r.total.Load()
		}
		return n
	}
	for last, quiet := int64(-1), time.Duration(0); quiet < 2*time.Second && time.Since(res.Drain) < 30*time.Second; {
		n := total()
		if n == last {
			quiet += 250 * time.Millisecond
		} else {
			last, quiet = n, 0
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return nil, nil, err
		}
	}
	res.DrainTook = time.Since(res.Drain)
	ds := make([]delivery, len(vias))
	for i, ws := range sets {
		ws.Close()
		rec := recs[i]
		d := delivery{Expected: res.Published * ws.Opened, Early: ws.early.Load(), Ends: rec.ends}
		for _, evs := range rec.events {
			for _, e := range evs {
				if at, ok := published[e.RV]; ok {
					d.Received++
					d.Latencies = append(d.Latencies, e.At.Sub(at))
				}
			}
		}
		measure.SortDurations(d.Latencies)
		ds[i] = d
	}
	return res, ds, nil
}
