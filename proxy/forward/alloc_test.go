//go:build !race

// The race detector makes sync.Pool drop a share of what it is given, so
// allocation counts only mean something without it; `make test-unit` runs this
// file in a run of its own.

package forward_test

import "testing"

// Responses are copied through pooled buffers: a proxied GET must not allocate
// the 32 KiB copy buffer that an unpooled reverse proxy does per response.
func TestServeAllocatesNoCopyBuffer(t *testing.T) {
	res := testing.Benchmark(BenchmarkServe)
	if res.N == 0 {
		t.Fatal("the benchmark did not run")
	}
	if got := res.AllocedBytesPerOp(); got >= 32<<10 {
		t.Fatalf("%d bytes allocated per proxied GET (with the in-process member), want less than a 32 KiB copy buffer", got)
	}
}
