package harness

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestCopyExecutableWhileForking copies an executable and runs the copy, over
// and over in several goroutines, while others start processes without
// pause, as Start does: a process forked while a copy is open for writing
// holds that descriptor until its own exec, and running the copy meanwhile
// fails with ETXTBSY. The race is narrow, hence the count: with a plain copy
// (no fork lock), 4 to 9 of the 1600 runs failed on a loaded 2-core machine.
func TestCopyExecutableWhileForking(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of forking")
	}
	src, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true executable")
	}
	dir := t.TempDir()
	stop := make(chan struct{})
	var forkers sync.WaitGroup
	for range 2 {
		forkers.Add(1)
		go func() {
			defer forkers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = exec.Command(src).Run()
			}
		}()
	}
	defer func() { close(stop); forkers.Wait() }()

	const copiers, copies = 4, 400
	var busy, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i := range copiers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := filepath.Join(dir, fmt.Sprint(i), "true")
			for range copies {
				if err := copyExecutable(src, dst); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Errorf("copy: %w", err))
					return
				}
				if err := exec.Command(dst).Run(); err != nil {
					if errors.Is(err, syscall.ETXTBSY) {
						busy.Add(1)
					} else {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := busy.Load(); n > 0 {
		t.Errorf("%d of %d runs of a fresh copy failed with ETXTBSY: a fork held the copy open for writing", n, copiers*copies)
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d copies or runs failed otherwise, the first: %v", n, firstErr.Load())
	}
}
