package chain

import (
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
)

// TestGrowStack checks that growStack leaves the calling goroutine with a stack
// of 16 KiB: its frame is neither optimized away nor too small. Stacks in use
// also count those the runtime keeps cached, so the test compares with
// goroutines that did not call it: each grown one holds about 16 KiB more.
func TestGrowStack(t *testing.T) {
	// A collection would shrink the parked goroutines' stacks.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	const goroutines = 100
	stackPerGoroutine := func(grow bool) uint64 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		before := ms.StackInuse
		release := make(chan struct{})
		var started, ended sync.WaitGroup
		for i := range goroutines {
			started.Add(1)
			ended.Add(1)
			go func() {
				defer ended.Done()
				if grow {
					growStack(i)
				}
				started.Done()
				<-release
			}()
		}
		started.Wait()
		runtime.ReadMemStats(&ms)
		close(release)
		ended.Wait()
		return (ms.StackInuse - before) / goroutines
	}
	plain := stackPerGoroutine(false)
	grown := stackPerGoroutine(true)
	if grown < plain+12<<10 {
		t.Errorf("stack in use per goroutine: %d bytes after growStack, %d without; want about 16 KiB more", grown, plain)
	}
}
