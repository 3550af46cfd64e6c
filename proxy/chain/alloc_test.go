//go:build !race

// The race detector makes sync.Pool drop a share of what it is given, so
// allocation counts only mean something without it; `make test-unit` runs this
// file in a run of its own.

package chain_test

import (
	"runtime"
	"testing"
)

// The allocation budget of one proxied GET through the short chain,
// BenchmarkChain's, the request's construction included: 41 allocations and
// 4,840 bytes when it was set (go1.26, k8s.io/apiserver v0.37). A change of the
// chain or of the filters it takes that allocates more fails here.
const (
	maxChainAllocs = 45
	maxChainBytes  = 5 << 10
)

func TestChainAllocatesWithinBudget(t *testing.T) {
	serve := proxiedGET(t)
	serve()
	const runs = 200
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	allocs := testing.AllocsPerRun(runs, serve)
	runtime.ReadMemStats(&after)
	// AllocsPerRun runs serve once more to warm up.
	bytes := (after.TotalAlloc - before.TotalAlloc) / (runs + 1)
	t.Logf("per proxied GET through the chain: %.0f allocations, %d bytes", allocs, bytes)
	if allocs > maxChainAllocs {
		t.Errorf("%.0f allocations per proxied GET through the chain, more than %d", allocs, maxChainAllocs)
	}
	if bytes > maxChainBytes {
		t.Errorf("%d bytes allocated per proxied GET through the chain, more than %d", bytes, maxChainBytes)
	}
}
