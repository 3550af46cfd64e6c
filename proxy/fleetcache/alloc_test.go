//go:build !race

// The race detector changes what allocates, so allocation counts only mean
// something without it; `make test-unit` runs this file in a run of its own.

package fleetcache

import (
	"context"
	"fmt"
	"net/http"
	"testing"
)

// A list from the cache allocates its answer and the order of its items,
// nothing per object: over many members, these lists are what the cache
// serves most (docs/benchmark.md).
func TestListAllocatesNothingPerObject(t *testing.T) {
	const n = 1000
	objects := make([]any, 0, n)
	for i := range n {
		objects = append(objects, labelled("ns", fmt.Sprintf("cm-%04d", i), "1", "web"))
	}
	rc := filledCache(t, objects...)
	const path = "/api/v1/namespaces/ns/configmaps"
	for _, query := range []string{"resourceVersion=0", "resourceVersion=0&labelSelector=app%3Dweb", "limit=500"} {
		q, ok := parseRead(readRequest(context.Background(), path, query, ""), path)
		if !ok {
			t.Fatalf("%s?%s not for the cache", path, query)
		}
		w := discard{header: http.Header{}}
		if allocs := testing.AllocsPerRun(5, func() { (&Reads{}).list(w, rc, q) }); allocs > 50 {
			t.Errorf("%s?%s: %.0f allocations for %d objects, want at most 50", path, query, allocs, n)
		}
	}
}
