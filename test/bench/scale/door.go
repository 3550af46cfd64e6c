package main

import (
	"fmt"
	"math"
	"time"

	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
)

// The member door section: what member-b's own clients (its admin client
// certificate at the gateway's member door) cost per idle watch and per idle
// client connection, against the gateway alone and the hub's path.

// perOf is the growth from a to b per n of something (NaN without any).
func perOf(a, b float64, n int) float64 {
	if n <= 0 {
		return math.NaN()
	}
	return (b - a) / float64(n)
}

// cost is one path's growth per watch or connection, of one process.
type cost struct {
	RSS, Heap, Stacks, Goroutines float64 // bytes, bytes, bytes, count
	Measured                      bool
}

func gatewayCost(before, after snapshot, n int) cost {
	return cost{
		RSS:        perOf(float64(before.RSSKB)*1024, float64(after.RSSKB)*1024, n),
		Heap:       perOf(before.HeapInuse, after.HeapInuse, n),
		Stacks:     perOf(before.StackInuse, after.StackInuse, n),
		Goroutines: perOf(before.Goroutines, after.Goroutines, n),
		Measured:   n > 0,
	}
}

func hubCost(before, after snapshot, n int) cost {
	b, a := before.Hub, after.Hub
	return cost{
		RSS:        perOf(float64(b.RSSKB)*1024, float64(a.RSSKB)*1024, n),
		Heap:       perOf(b.HeapInuse, a.HeapInuse, n),
		Stacks:     perOf(b.StackInuse, a.StackInuse, n),
		Goroutines: perOf(b.Goroutines, a.Goroutines, n),
		Measured:   n > 0 && b.RSSKB > 0 && a.RSSKB > 0,
	}
}

func (c cost) plus(d cost) cost {
	return cost{RSS: c.RSS + d.RSS, Heap: c.Heap + d.Heap, Stacks: c.Stacks + d.Stacks, Goroutines: c.Goroutines + d.Goroutines, Measured: c.Measured && d.Measured}
}

// costRows prints RSS, heap, stacks and goroutines of each cost in its
// column ("–" where not measured), and last num's over den's.
func costRows(p func(string, ...any), costs []cost, num, den cost) {
	kib := func(x float64) string { return measure.KiB(x) }
	count := func(x float64) string { return fmt.Sprintf("%.2f", x) }
	rows := []struct {
		name string
		get  func(cost) float64
		fmtv func(float64) string
	}{
		{"RSS", func(c cost) float64 { return c.RSS }, kib},
		{"Go heap in use", func(c cost) float64 { return c.Heap }, kib},
		{"Go stacks in use", func(c cost) float64 { return c.Stacks }, kib},
		{"goroutines", func(c cost) float64 { return c.Goroutines }, count},
	}
	for _, r := range rows {
		p("| %s |", r.name)
		for _, c := range costs {
			if !c.Measured || math.IsNaN(r.get(c)) {
				p(" – |")
				continue
			}
			p(" %s |", r.fmtv(r.get(c)))
		}
		p(" %s |\n", ratioOf(num, den, r.get))
	}
}

// ratioOf is num's figure over den's, or "–" when either is not measured or
// den's is not positive (a growth within the noise).
func ratioOf(num, den cost, get func(cost) float64) string {
	n, d := get(num), get(den)
	if !num.Measured || !den.Measured || math.IsNaN(n) || math.IsNaN(d) || d <= 0 {
		return "–"
	}
	return measure.X(n / d)
}

// ceilDiv is ⌈n / d⌉ as text, "?" when d is unknown.
func ceilDiv(n int, d uint32) string {
	if d == 0 {
		return "?"
	}
	return fmt.Sprint(int(math.Ceil(float64(n) / float64(d))))
}

func (r *report) doorSection(p func(string, ...any)) {
	w, c := r.Watches, r.Conns
	if (w == nil || w.Door == nil) && c == nil {
		return
	}
	p("## The member door: a member's own clients\n\n")
	p("Member-b's own admin client certificate (of member-b's CA) at the gateway's member door under member-b's door name, as member-b's own clients would connect; the gateway verifies it and impersonates that identity on member-b over the same connections to member-b as the other paths. ")
	p("Against the gateway alone (the hub's front-proxy certificate and `X-Remote-*` headers, what the hub sends) and the hub's path (the hub admin token at the hub, `upstreamclusters/member-b/proxy`). ")
	p("Costs are the growth between snapshots (two forced collections in each process before each) divided by what was opened; the hub's figures are the hub kube-apiserver's own (VmRSS, and its `/metrics` after collections through its `/debug/pprof`).\n\n")
	var door, hubGW, hubHub cost
	if w != nil && w.Door != nil {
		n, m, d := w.Gateway.Opened, w.Hub.Opened, w.Door.Opened
		gw := gatewayCost(w.Before, w.GatewayOpen, n)
		hubGW, hubHub = gatewayCost(w.GatewayOpen, w.AllOpen, m), hubCost(w.GatewayOpen, w.AllOpen, m)
		door = gatewayCost(w.AllOpen, w.DoorOpen, d)
		p("### Per idle watch\n\n")
		p("The idle watches of the watch phase (ConfigMaps of `%s` on member-b named `%s`, which no object has): %d through the gateway alone, then %d through hub + gateway, then %d through the door, each group while the ones before stay open. ", watchNS, idleName, n, m, d)
		p("Each path's watches share one client, as a client-go client's do: it multiplexes them over one HTTP/2 connection until the server's stream limit and then opens another.\n\n")
		p("| per idle watch | gateway alone (%d): the gateway | hub + gateway (%d): the gateway | hub + gateway: the hub | door (%d): the gateway | door / hub path, the gateway's |\n|---|---:|---:|---:|---:|---:|\n", n, m, d)
		costRows(p, []cost{gw, hubGW, hubHub, door}, door, hubGW)
		a := w.DoorOpen
		p("| stream limit the path's server announces | %d | %d (the hub) | | %d | |\n", w.GatewayStrms, w.HubStreams, w.DoorStreams)
		p("| client connections with every watch open, all told (expected ⌈watches / limit⌉) | %d bench → gateway (%s) | %d bench → hub (%s) | %d hub → gateway | %d bench → door (%s) | |\n",
			a.BenchToGateway, ceilDiv(n, w.GatewayStrms), a.BenchToHub, ceilDiv(m, w.HubStreams), a.HubToGateway, a.BenchToDoor, ceilDiv(d, w.DoorStreams))
		p("| failed to open, ended early | %d, %d | %d, %d | | %d, %d | |\n\n", w.Gateway.Errors, w.EarlyGateway, w.Hub.Errors, w.EarlyHub, w.Door.Errors, w.EarlyDoor)
		p("Connections gateway → member-b with every watch open: %s (⌈%d / %d⌉ = %s expected: the door's watches share them with the others). Time to open the door's: %s (%.0f/s)%s.\n\n",
			ints(a.ToMemberB), n+m+d, w.MaxStreams, ceilDiv(n+m+d, w.MaxStreams), w.Door.Took.Round(10*time.Millisecond), float64(d)/w.Door.Took.Seconds(), firstErr(w.Door.FirstErr))
		if w.DoorHeapTop != "" {
			p("What the gateway's heap holds with the door's watches open beyond what it held before them, by allocation site (`go tool pprof -sample_index=inuse_space -top -base %s %s`):\n\n```\n%s```\n\n", w.DoorHeapBeforeFile, w.DoorHeapFile, measure.TrimPprof(w.DoorHeapTop))
		}
	}
	var cDoor, cHubGW, cHubHub cost
	if c != nil {
		cGW := gatewayCost(c.Hub.After, c.Gateway.After, c.Gateway.Opened)
		cHubGW, cHubHub = gatewayCost(c.Door.After, c.Hub.After, c.Hub.Opened), hubCost(c.Door.After, c.Hub.After, c.Hub.Opened)
		cDoor = gatewayCost(c.Before, c.Door.After, c.Door.Opened)
		p("### Per idle client connection\n\n")
		p("%d client connections per path, each a client of its own (its own transport and TLS connection, as %d separate client processes), each sent one `GET /version` (member-b's, proxied on every path) and then kept idle, HTTP/2 as client-go; the door's first, then the hub's, then the gateway alone's, each group while the ones before stay open, on a gateway that had served nothing else. ", c.N, c.N)
		p("On the hub's path the client's connection ends at the hub, which forwards over its own pooled connections to the gateway; at the door it ends at the gateway. ")
		p("All were held for %s (the servers close a connection idle for 90 s); after the last snapshot each client sent a second GET, which a connection still open carries.\n\n", c.Held.Round(100*time.Millisecond))
		p("| per idle client connection | gateway alone: the gateway | hub path: the gateway | hub path: the hub | door: the gateway | door / hub path, both processes |\n|---|---:|---:|---:|---:|---:|\n")
		costRows(p, []cost{cGW, cHubGW, cHubHub, cDoor}, cDoor, cHubGW.plus(cHubHub))
		p("| client connections after the group, all told | %d bench → gateway | %d bench → hub; %d hub → gateway | | %d bench → door; the gateway accepted %d | |\n",
			c.Gateway.After.BenchToGateway, c.Hub.After.BenchToHub, c.Hub.After.HubToGateway, c.Door.After.BenchToDoor, c.Door.After.IntoDoor)
		p("| opened (failed), in | %d (%d), %s | %d (%d), %s | | %d (%d), %s | |\n",
			c.Gateway.Opened, c.Gateway.Errors, c.Gateway.Took.Round(10*time.Millisecond), c.Hub.Opened, c.Hub.Errors, c.Hub.Took.Round(10*time.Millisecond), c.Door.Opened, c.Door.Errors, c.Door.Took.Round(10*time.Millisecond))
		p("| second GET on the same connection | %d | %d | | %d | |\n\n", c.CarriedGateway, c.CarriedHub, c.CarriedDoor)
		if fe := firstErr(c.Door.FirstErr + c.Hub.FirstErr + c.Gateway.FirstErr); fe != "" {
			p("Failed to open%s.\n\n", fe)
		}
		for _, sn := range []snapshot{c.Before, c.Door.After, c.Hub.After, c.Gateway.After} {
			if sn.Err != "" {
				p("Not measured %s: %s.\n\n", sn.Label, sn.Err)
			}
		}
		if c.HeapDoorTop != "" {
			p("What the gateway's heap holds with the door's idle connections open beyond what it held before them, by allocation site (`go tool pprof -sample_index=inuse_space -top -base %s %s`):\n\n```\n%s```\n\n", c.HeapBeforeFile, c.HeapDoorFile, measure.TrimPprof(c.HeapDoorTop))
		}
	}
	r.doorSizing(p, door, hubGW, hubHub, cDoor, cHubGW, cHubHub)
}

// doorSizing says in one sentence what the door's figures mean for sizing:
// RSS, and in brackets the steadier Go heap and stacks in use.
func (r *report) doorSizing(p func(string, ...any), door, hubGW, hubHub, cDoor, cHubGW, cHubHub cost) {
	mem := func(c cost) string {
		if !c.Measured || math.IsNaN(c.RSS) {
			return "–"
		}
		return fmt.Sprintf("%s (%s)", measure.KiB(c.RSS), measure.KiB(c.Heap+c.Stacks))
	}
	live := func(c cost) float64 { return c.Heap + c.Stacks }
	if !door.Measured && !cDoor.Measured {
		return
	}
	p("**For sizing** (RSS, and in brackets Go heap and stacks in use): ")
	if door.Measured {
		p("a watch through the door costs the gateway %s, one through the hub's path %s and the hub %s, so count a door watch as ", mem(door), mem(hubGW), mem(hubHub))
		if x := live(door) / live(hubGW); hubGW.Measured && x > 1.1 {
			p("%s of a hub watch", measure.X(x))
		} else {
			p("a hub watch")
		}
		p(" in the gateway's memory limit")
	}
	if cDoor.Measured {
		if door.Measured {
			p("; ")
		}
		p("an idle client connection at the door costs the gateway %s, where on the hub's path the hub holds the connection for %s and the gateway pays %s, so give the gateway, per idle connection of a member's own clients, ", mem(cDoor), mem(cHubHub), mem(cHubGW))
		if x := live(cDoor) / live(cHubHub); cHubHub.Measured && x > 1.1 {
			p("%s of what the hub's path costs in all", measure.X(x))
		} else {
			p("what the hub would have held for it")
		}
	}
	p(".\n\n")
}
