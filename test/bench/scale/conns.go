package main

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
)

// versionPath is what each idle client asks once: the member's /version,
// proxied to member-b on every path.
const versionPath = "/version"

// connResult is what idle client connections cost: n to member-b's door,
// then n to the hub (for member-b's proxy path) and n to the gateway alone,
// each group opened while the others stay open.
type connResult struct {
	N      int
	Before snapshot
	// Groups in the order they were opened: door, hub, gateway alone.
	Door, Hub, Gateway connGroup
	// Held is from the first connection's request to the last snapshot:
	// the servers close a connection idle for 90 s.
	Held time.Duration
	// Carried counts the connections that served a second request on the
	// same connection after the last snapshot, per group: fewer than opened
	// means a server had closed some before.
	CarriedDoor, CarriedHub, CarriedGateway int
	// The gateway's heap profiles before the connections and with the
	// door's open, and the top sites of their difference.
	HeapBeforeFile, HeapDoorFile, HeapDoorTop string
}

// connGroup is one group of idle client connections.
type connGroup struct {
	Opened, Errors int
	FirstErr       string
	Took           time.Duration
	After          snapshot // with this group and the ones before open
	clients        []*measure.Target
}

// connPhase opens o.DoorConns idle client connections on each path, one
// request each, and snapshots the gateway and the hub after each group.
func connPhase(ctx context.Context, s *scene, o options) (*connResult, error) {
	res := &connResult{N: o.DoorConns}
	res.Before = s.take(ctx, "before connections", true)
	if res.Before.Err != "" {
		logf("connections: snapshot: %s", res.Before.Err)
	}
	res.HeapBeforeFile = filepath.Join(o.OutDir, "kube-gateway-heap-before-conns.pprof")
	if err := s.saveProfile(ctx, "/debug/pprof/heap", res.HeapBeforeFile); err != nil {
		logf("connections: heap profile: %v", err)
		res.HeapBeforeFile = ""
	}
	logf("connections: before: gateway RSS %s, %.0f goroutines; hub RSS %s, %.0f goroutines",
		measure.MB(float64(res.Before.RSSKB)), res.Before.Goroutines, measure.MB(float64(res.Before.Hub.RSSKB)), res.Before.Hub.Goroutines)
	start := time.Now()
	groups := []struct {
		name string
		t    *measure.Target
		g    *connGroup
	}{
		{"member-b's door", s.door, &res.Door},
		{"the hub", s.hub, &res.Hub},
		{"the gateway alone", s.gateway, &res.Gateway},
	}
	defer func() {
		for _, gr := range groups {
			closeIdle(gr.g.clients)
		}
	}()
	for _, gr := range groups {
		logf("connections: opening %d idle client connections to %s, %d at a time", o.DoorConns, gr.name, o.OpenConcurrency)
		*gr.g = openIdleConns(ctx, gr.t, o.DoorConns, o.OpenConcurrency)
		if err := sleep(ctx, 2*time.Second); err != nil {
			return nil, err
		}
		gr.g.After = s.take(ctx, "connections to "+gr.name, true)
		a := gr.g.After
		if gr.g == &res.Door && res.HeapBeforeFile != "" {
			res.HeapDoorFile = filepath.Join(o.OutDir, "kube-gateway-heap-door-conns.pprof")
			var err error
			if res.HeapDoorTop, err = s.heapProfile(ctx, res.HeapDoorFile, res.HeapBeforeFile); err != nil {
				logf("connections: heap profile: %v", err)
				res.HeapDoorFile = ""
			}
		}
		logf("connections: %d open to %s in %s (%d errors%s): gateway RSS %s, %.0f goroutines; hub RSS %s, %.0f goroutines; bench → door/hub/gateway %d/%d/%d",
			gr.g.Opened, gr.name, gr.g.Took.Round(10*time.Millisecond), gr.g.Errors, firstErr(gr.g.FirstErr),
			measure.MB(float64(a.RSSKB)), a.Goroutines, measure.MB(float64(a.Hub.RSSKB)), a.Hub.Goroutines, a.BenchToDoor, a.BenchToHub, a.BenchToGateway)
	}
	res.Held = time.Since(start)
	res.CarriedDoor = carried(ctx, res.Door.clients, o.OpenConcurrency)
	res.CarriedHub = carried(ctx, res.Hub.clients, o.OpenConcurrency)
	res.CarriedGateway = carried(ctx, res.Gateway.clients, o.OpenConcurrency)
	logf("connections: held %s; a second request on the same connection: door %d, hub %d, gateway alone %d",
		res.Held.Round(100*time.Millisecond), res.CarriedDoor, res.CarriedHub, res.CarriedGateway)
	return res, nil
}

// openIdleConns opens n client connections to t, c at a time: each a client
// of its own (a clone of t's transport, so that none shares another's
// connection, as n separate client processes) that sends one GET and then
// keeps its connection idle.
func openIdleConns(ctx context.Context, t *measure.Target, n, c int) connGroup {
	tr, ok := t.Client.Transport.(*http.Transport)
	if !ok {
		return connGroup{Errors: n, FirstErr: "target " + t.Key + " has no *http.Transport"}
	}
	clients := make([]*measure.Target, n)
	var (
		mu sync.Mutex
		g  connGroup
	)
	start := time.Now()
	concurrently(ctx, n, c, func(i int) {
		ct := *t
		ct.Client = &http.Client{Transport: tr.Clone()}
		if _, err := ct.Do(ctx, versionPath); err != nil {
			ct.Client.CloseIdleConnections()
			mu.Lock()
			g.Errors++
			if g.FirstErr == "" {
				g.FirstErr = err.Error()
			}
			mu.Unlock()
			return
		}
		clients[i] = &ct
	})
	g.Took = time.Since(start)
	for _, ct := range clients {
		if ct != nil {
			g.clients = append(g.clients, ct)
		}
	}
	g.Opened = len(g.clients)
	return g
}

// carried sends each client's second GET and counts those served on the
// connection the first one opened.
func carried(ctx context.Context, clients []*measure.Target, c int) int {
	var n atomic.Int64
	concurrently(ctx, len(clients), c, func(i int) {
		var reused bool
		tctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) { reused = ci.Reused }})
		if _, err := clients[i].Do(tctx, versionPath); err == nil && reused {
			n.Add(1)
		}
	})
	return int(n.Load())
}

func closeIdle(clients []*measure.Target) {
	for _, ct := range clients {
		ct.Client.CloseIdleConnections()
	}
}
