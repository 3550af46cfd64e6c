//go:build !race

// The race detector makes sync.Pool drop a share of what it is given, so
// allocation counts only mean something without it; `make test-unit` runs this
// file in a run of its own.

package forward_test

import (
	"runtime"
	"testing"
)

// The allocation budget of one proxied GET, BenchmarkServe's, in-process
// member included: 145 allocations and 18.8 KiB when it was set (go1.26). A
// change that allocates more on the hot path fails here; one that cuts
// allocations lowers the budget. An unpooled copy buffer alone is 32 KiB.
const (
	maxServeAllocs = 155
	maxServeBytes  = 20 << 10
)

// TestServeAllocatesWithinBudget keeps the hot path's allocations, which the
// gateway's CPU per request follows (docs/benchmark.md), from growing
// unnoticed.
func TestServeAllocatesWithinBudget(t *testing.T) {
	serve := smallGET(t, hubUser())
	serve() // the connection to the member
	const runs = 200
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	allocs := testing.AllocsPerRun(runs, serve)
	runtime.ReadMemStats(&after)
	// AllocsPerRun runs serve once more to warm up.
	bytes := (after.TotalAlloc - before.TotalAlloc) / (runs + 1)
	t.Logf("per proxied GET: %.0f allocations, %d bytes", allocs, bytes)
	if allocs > maxServeAllocs {
		t.Errorf("%.0f allocations per proxied GET, more than %d", allocs, maxServeAllocs)
	}
	if bytes > maxServeBytes {
		t.Errorf("%d bytes allocated per proxied GET, more than %d", bytes, maxServeBytes)
	}
}
