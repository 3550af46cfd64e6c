//go:build !race

// The race detector makes sync.Pool drop a share of what it is given, so
// allocation counts only mean something without it; `make test-unit` runs this
// file in a run of its own.

package chain_test

import (
	"testing"

	"github.com/kubewharf/kube-gateway/test/allocbudget"
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
	allocbudget.Check(t, "proxied GET through the chain", serve, maxChainAllocs, maxChainBytes)
}
