// Package allocbudget holds a hot path's heap allocations to a budget in a
// test: a change that allocates more fails, one that cuts allocations lowers
// the budget. Allocation counts only mean something without the race
// detector (it makes sync.Pool drop a share of what it is given), so the
// tests that use it carry the !race build tag.
package allocbudget

import (
	"runtime"
	"testing"
)

// Check runs f 200 times after one warm-up run and fails t if a run
// allocates more than maxAllocs times or maxBytes bytes on average; what is
// measured is logged, under what's name.
func Check(t *testing.T, what string, f func(), maxAllocs int, maxBytes uint64) {
	t.Helper()
	const runs = 200
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	allocs := testing.AllocsPerRun(runs, f)
	runtime.ReadMemStats(&after)
	// AllocsPerRun runs f once more to warm up.
	bytes := (after.TotalAlloc - before.TotalAlloc) / (runs + 1)
	t.Logf("per %s: %.0f allocations, %d bytes", what, allocs, bytes)
	if allocs > float64(maxAllocs) {
		t.Errorf("%.0f allocations per %s, more than %d", allocs, what, maxAllocs)
	}
	if bytes > maxBytes {
		t.Errorf("%d bytes allocated per %s, more than %d", bytes, what, maxBytes)
	}
}
