package chain

import (
	"testing"
	"unsafe"
)

// deepFrame is a call about as deep as the chain below growStack: it fits in
// the 16 KiB stack growStack leaves, not in a smaller one.
const deepFrame = 12 << 10

//go:noinline
func deepCall(i int) byte {
	var frame [deepFrame]byte
	frame[i%deepFrame] = 1
	return frame[0]
}

// stackMoved reports whether a deep call made the runtime copy the calling
// goroutine's stack. The address of a local is kept as a plain integer, which
// the runtime does not adjust when it moves the stack.
func stackMoved(grow bool) bool {
	moved := make(chan bool)
	go func() {
		var local byte
		if grow {
			growStack(int(local))
		}
		before := uintptr(unsafe.Pointer(&local))
		deepCall(int(local))
		moved <- uintptr(unsafe.Pointer(&local)) != before
	}()
	return <-moved
}

// TestGrowStack checks that after growStack a call as deep as the chain runs
// without the runtime growing (copying) the stack, and that without it the
// same call does: the frame is neither optimized away nor too small.
func TestGrowStack(t *testing.T) {
	if !stackMoved(false) {
		t.Fatalf("a %d-byte call on a new goroutine did not grow its stack: the runtime starts goroutines with larger stacks than this test assumes", deepFrame)
	}
	if stackMoved(true) {
		t.Errorf("a %d-byte call after growStack still grew the stack: growStack left less than 16 KiB", deepFrame)
	}
}
