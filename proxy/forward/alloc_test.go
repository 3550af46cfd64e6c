//go:build !race

// The race detector makes sync.Pool drop a share of what it is given, so
// allocation counts only mean something without it; `make test-unit` runs this
// file in a run of its own.

package forward_test

import (
	"testing"

	"github.com/kubewharf/kube-gateway/test/allocbudget"
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
	allocbudget.Check(t, "proxied GET", serve, maxServeAllocs, maxServeBytes)
}
