package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/kubewharf/kube-gateway/test/bench/internal/floor"
	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// floorResult is what the same idle watches cost the floor proxy (a minimal
// Go reverse proxy, see test/bench/floorproxy): the least any Go HTTP/2 proxy
// holds per open watch on this machine, next to which the gateway's figures
// are read.
type floorResult struct {
	Before, Open procState
	Watches      *watchSet
	ToMemberB    int // established connections floor → member-b with all open
}

// procState is a Go process's memory and goroutines after two forced
// collections.
type procState struct {
	RSSKB                 int64
	HeapInuse, StackInuse float64
	Goroutines            float64
}

// floorPhase opens o.Watches idle watches through the floor proxy in front of
// member-b and measures it before and with all of them open.
func floorPhase(ctx context.Context, s *scene, o options, dir string) (*floorResult, error) {
	bin, err := floor.Build(ctx, dir)
	if err != nil {
		return nil, err
	}
	proxy, target, err := floor.Start(ctx, bin, dir, s.env.Members[harness.MemberB], false)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := proxy.Stop(); err != nil {
			logf("floor: %v", err)
		}
	}()
	res := &floorResult{}
	if res.Before, err = readProc(ctx, proxy); err != nil {
		return nil, err
	}
	logf("floor: opening %d idle watches through the floor proxy", o.Watches)
	var open atomic.Int64
	res.Watches = openWatches(ctx, target, idleWatchPath(), o.Watches, o.OpenConcurrency, &open, discard)
	defer res.Watches.Close()
	logf("floor: %d open in %s (%d errors%s)", res.Watches.Opened, res.Watches.Took.Round(10*time.Millisecond), res.Watches.Errors, firstErr(res.Watches.FirstErr))
	if err := sleep(ctx, 2*time.Second); err != nil {
		return nil, err
	}
	if res.Open, err = readProc(ctx, proxy); err != nil {
		return nil, err
	}
	if conns, err := measure.TCPConns(proxy.PID()); err == nil {
		for _, p := range s.memberBPorts {
			res.ToMemberB += measure.CountConns(conns, p, true)
		}
	}
	logf("floor: all open: RSS %s, %.0f goroutines, %d connections to member-b", measure.MB(float64(res.Open.RSSKB)), res.Open.Goroutines, res.ToMemberB)
	return res, nil
}

var (
	heapInuseLine  = regexp.MustCompile(`(?m)^# HeapInuse = (\d+)$`)
	stackLine      = regexp.MustCompile(`(?m)^# Stack = (\d+) / \d+$`)
	goroutinesLine = regexp.MustCompile(`(?m)^goroutine profile: total (\d+)$`)
)

// readProc collects the floor proxy's garbage twice (as the gateway's
// snapshots do) and reads its RSS, heap, stacks and goroutines from
// /proc and its /debug/pprof.
func readProc(ctx context.Context, p *floor.Proxy) (procState, error) {
	var st procState
	get := func(path string) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.DebugURL+path, nil)
		if err != nil {
			return "", err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return string(body), err
	}
	if err := measure.ForceGC(ctx, http.DefaultClient, nil, p.DebugURL); err != nil {
		return st, err
	}
	heap, err := get("/debug/pprof/heap?debug=1")
	if err != nil {
		return st, err
	}
	goroutines, err := get("/debug/pprof/goroutine?debug=1")
	if err != nil {
		return st, err
	}
	for _, f := range []struct {
		re   *regexp.Regexp
		text string
		into *float64
	}{{heapInuseLine, heap, &st.HeapInuse}, {stackLine, heap, &st.StackInuse}, {goroutinesLine, goroutines, &st.Goroutines}} {
		m := f.re.FindStringSubmatch(f.text)
		if m == nil {
			return st, fmt.Errorf("floor proxy's /debug/pprof: no match for %s", f.re)
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return st, err
		}
		*f.into = v
	}
	st.RSSKB, err = measure.RSSKB(p.PID())
	return st, err
}

// floorDir is where the floor proxy is built and keeps its files.
func floorDir(workDir string) string { return filepath.Join(workDir, "floor") }
