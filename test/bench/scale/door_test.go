package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestDoorSection checks that each path's cost is the growth from the
// snapshot before its group to the one after, per watch or connection, in
// the right process, and the door's ratio to the hub's path.
func TestDoorSection(t *testing.T) {
	at := func(gatewayKB, hubKB int64) snapshot {
		return snapshot{RSSKB: gatewayKB, Hub: hubState{RSSKB: hubKB}}
	}
	opened := func(n int) *watchSet { return &watchSet{Opened: n, Took: time.Second} }
	r := &report{
		// 100 watches per path: the gateway grows 10, 20, then 30 KiB per
		// watch; the hub 5 KiB per hub watch.
		Watches: &watchResult{
			Before:      at(100000, 200000),
			GatewayOpen: at(101000, 200000),
			AllOpen:     at(103000, 200500),
			DoorOpen:    at(106000, 200500),
			Gateway:     opened(100), Hub: opened(100), Door: opened(100),
		},
		// 100 connections per path: the door's cost the gateway 40 KiB
		// each, the hub's cost the hub 30 KiB and the gateway 5 KiB, the
		// gateway alone's 25 KiB.
		Conns: &connResult{
			N:       100,
			Before:  at(100000, 200000),
			Door:    connGroup{Opened: 100, After: at(104000, 200000)},
			Hub:     connGroup{Opened: 100, After: at(104500, 203000)},
			Gateway: connGroup{Opened: 100, After: at(107000, 203000)},
		},
	}
	var b strings.Builder
	r.doorSection(func(format string, args ...any) { fmt.Fprintf(&b, format, args...) })
	md := b.String()
	for _, want := range []string{
		"| RSS | 10.0 KiB | 20.0 KiB | 5.0 KiB | 30.0 KiB | ×1.50 |",
		"| RSS | 25.0 KiB | 5.0 KiB | 30.0 KiB | 40.0 KiB | ×1.14 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the member door section lacks the row\n%s\nin\n%s", want, md)
		}
	}
}
