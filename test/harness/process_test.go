package harness

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func TestStartReadyRetriesOnPortClash(t *testing.T) {
	dir := t.TempDir()
	p := &Process{Name: "clash", LogFile: filepath.Join(dir, "clash.log"), timeout: 20 * time.Second}
	attempts := 0
	assign := func() {
		attempts++
		if attempts == 1 {
			p.Args = []string{"/bin/sh", "-c", "echo 'listen tcp 127.0.0.1:1: bind: address already in use'; exit 1"}
		} else {
			p.Args = []string{"/bin/sh", "-c", "exec sleep 60"}
		}
	}
	assign()
	p.probe = func(context.Context) error {
		if attempts == 1 {
			return os.ErrNotExist
		}
		return nil
	}
	if err := p.startReady(context.Background(), assign); err != nil {
		t.Fatal(err)
	}
	if attempts != 2 || !p.Running() {
		t.Fatalf("attempts %d, running %v", attempts, p.Running())
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if p.Running() {
		t.Fatal("still running after Stop")
	}
}

func TestEarlyExitReportsLogTail(t *testing.T) {
	dir := t.TempDir()
	p := &Process{Name: "crash", LogFile: filepath.Join(dir, "crash.log"), timeout: 20 * time.Second,
		Args:  []string{"/bin/sh", "-c", "echo boom; exit 3"},
		probe: func(context.Context) error { return os.ErrNotExist }}
	err := p.startReady(context.Background(), func() {})
	if err == nil || !strings.Contains(err.Error(), "boom") || portClash(err) {
		t.Fatalf("got %v", err)
	}
}

func TestStopFromState(t *testing.T) {
	dir := t.TempDir()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{Name: "sleeper", LogFile: filepath.Join(dir, "sleeper.log"), detach: true,
		Args: []string{sleep, "60"}}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	// Start returns once the child has begun its exec; /proc shows the new
	// command line only when the kernel has loaded it.
	shown := func(context.Context) (bool, error) { return isOurs(p.PID(), p.Args), nil }
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, shown); err != nil {
		t.Fatalf("/proc/%d/cmdline never showed %q", p.PID(), p.Args)
	}
	// A recorded process whose command line no longer matches is left alone.
	st := State{WorkDir: dir, Processes: []StateProcess{
		{Name: "other", PID: p.PID(), Args: []string{sleep, "61"}},
	}}
	data, _ := json.Marshal(st)
	if err := os.WriteFile(filepath.Join(dir, stateFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := StopFromState(dir); err != nil {
		t.Fatal(err)
	}
	if !p.Running() {
		t.Fatal("StopFromState stopped a process whose command line differs")
	}
	st.Processes[0].Args = p.Args
	data, _ = json.Marshal(st)
	if err := os.WriteFile(filepath.Join(dir, stateFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	read, err := ReadState(dir)
	if err != nil || len(read.Running()) != 1 {
		t.Fatalf("ReadState: %v, running %v", err, read)
	}
	if err := StopFromState(dir); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatal("process still running after StopFromState")
	}
}
