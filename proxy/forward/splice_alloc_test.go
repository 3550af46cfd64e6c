//go:build !race

// The race detector makes sync.Pool drop a share of what it is given, so
// allocation counts only mean something without it; `make test-unit` runs this
// file in a run of its own.

package forward

import (
	"bytes"
	"io"
	"testing"

	"github.com/kubewharf/kube-gateway/test/allocbudget"
)

// A session's copy takes a pooled buffer, where io.Copy alone allocates
// 32 KiB for each direction of every session.
func TestSplicedConnAllocatesPooledBuffers(t *testing.T) {
	pool := newBufferPool(spliceBufferSize)
	sink := &pipeConn{}
	out := []byte("exec output\n")
	src := bytes.NewReader(out)
	copyOnce := func() {
		sink.out.Reset()
		src.Reset(out)
		c := &splicedConn{Conn: sink, buffers: pool}
		if _, err := io.Copy(c, onlyReader{src}); err != nil {
			t.Fatal(err)
		}
	}
	allocbudget.Check(t, "session copy", copyOnce, 8, 1<<10)
}
