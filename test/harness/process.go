package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// stopTimeout is how long Stop waits after SIGTERM before it sends SIGKILL.
const stopTimeout = 20 * time.Second

// Process is an external process started by the harness. Its stdout and
// stderr go to LogFile.
type Process struct {
	// Name identifies the process in logs and in state.json (for example
	// "etcd", "hub-1", "member-a-2", "kube-gateway").
	Name string
	// Args is the full argv; Args[0] is an absolute path.
	Args []string
	// LogFile receives stdout and stderr; it is appended to on restart.
	LogFile string
	// Env is added to the harness's own environment (e.g. GOGC=400).
	Env []string

	detach  bool
	probe   func(ctx context.Context) error // readiness
	timeout time.Duration                   // readiness deadline
	onStart func()                          // after each successful start

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when cmd exits
	waitErr  error
	logStart int64 // offset of this run's output in LogFile
}

// PID returns the process id of the current run, or 0 if it was never started.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the current run has not exited.
func (p *Process) Running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the process (for example syscall.SIGSTOP to freeze an
// apiserver replica, syscall.SIGCONT to resume it).
func (p *Process) Signal(sig os.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("%s: not started", p.Name)
	}
	return p.cmd.Process.Signal(sig)
}

// start launches the process once; it does not wait for readiness.
func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s: already running (pid %d)", p.Name, p.cmd.Process.Pid)
		}
	}
	if err := os.MkdirAll(dirOf(p.LogFile), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	off, _ := f.Seek(0, io.SeekEnd)
	fmt.Fprintf(f, "=== %s start %s: %s\n", time.Now().Format(time.RFC3339), p.Name, strings.Join(p.Args, " "))
	cmd := exec.Command(p.Args[0], p.Args[1:]...)
	cmd.Stdout = f
	cmd.Stderr = f
	if len(p.Env) > 0 {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	if p.detach {
		// Own session: survives the program that started it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		// Own process group (a ^C on the test goes to the test only), and
		// killed if the test binary dies without running Stop.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: start %s: %w", p.Name, p.Args[0], err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.logStart = cmd, done, off
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// waitReady polls the probe until it succeeds, the process exits, or the
// deadline passes.
func (p *Process) waitReady(ctx context.Context) error {
	if p.probe == nil {
		return nil
	}
	timeout := p.timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	var last error
	for {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		last = p.probe(pctx)
		pcancel()
		if last == nil {
			// A success while our process has exited came from someone
			// else on the port.
			select {
			case <-done:
			default:
				return nil
			}
		}
		select {
		case <-done:
			p.mu.Lock()
			werr := p.waitErr
			p.mu.Unlock()
			return &exitError{name: p.Name, err: werr, tail: p.runTail(40)}
		case <-ctx.Done():
			return fmt.Errorf("%s: not ready after %s (last probe: %v); log %s ends with:\n%s",
				p.Name, timeout, last, p.LogFile, p.runTail(40))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// exitError reports a process that exited before it was ready.
type exitError struct {
	name string
	err  error
	tail string
}

func (e *exitError) Error() string {
	return fmt.Sprintf("%s exited before it was ready (%v); its log ends with:\n%s", e.name, e.err, e.tail)
}

// portClash reports whether err is an early exit caused by a port in use.
func portClash(err error) bool {
	var ee *exitError
	return errors.As(err, &ee) && strings.Contains(ee.tail, "address already in use")
}

// runTail returns the last n lines the current run wrote to its log.
func (p *Process) runTail(n int) string {
	data, err := os.ReadFile(p.LogFile)
	if err != nil {
		return err.Error()
	}
	p.mu.Lock()
	off := p.logStart
	p.mu.Unlock()
	if off > 0 && off <= int64(len(data)) {
		data = data[off:]
	}
	return tailLines(data, n)
}

func tailLines(data []byte, n int) string {
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// Stop sends SIGTERM, waits up to 20 s for the process to exit, then sends
// SIGKILL. Stopping a process that is not running is a no-op.
func (p *Process) Stop() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // in case a test froze it
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = cmd.Process.Kill()
	select {
	case <-done:
		return fmt.Errorf("%s (pid %d) ignored SIGTERM for %s and was killed", p.Name, cmd.Process.Pid, stopTimeout)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.Name, cmd.Process.Pid)
	}
}

// Restart stops the process if it runs, starts it again with the same
// arguments (same ports, same data) and waits until it is ready. A test that
// stopped a process with Stop brings it back with Restart.
func (p *Process) Restart(ctx context.Context) error {
	if err := p.Stop(); err != nil {
		return err
	}
	if err := p.start(); err != nil {
		return err
	}
	if p.onStart != nil {
		p.onStart() // the new PID into state.json
	}
	return p.waitReady(ctx)
}

// startReady starts p and waits for readiness. When the process exits early
// because a port was taken, it calls reassign (which must pick new ports and
// rebuild p.Args) and tries again, up to five times.
func (p *Process) startReady(ctx context.Context, reassign func()) error {
	for attempt := 1; ; attempt++ {
		if err := p.start(); err != nil {
			return err
		}
		if p.onStart != nil {
			p.onStart()
		}
		err := p.waitReady(ctx)
		if err == nil || reassign == nil || attempt == 5 || !portClash(err) {
			return err
		}
		reassign()
	}
}

// --- ports ---

var (
	portsMu sync.Mutex
	given   = map[int]bool{}
)

// freePort returns a loopback TCP port that was free a moment ago and that
// this program has not handed out before. A process can still lose the race
// for it; startReady retries on that.
func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !given[port] {
			given[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no free port found")
}

func mustFreePort() int {
	p, err := freePort()
	if err != nil {
		panic(err)
	}
	return p
}

// --- detached processes (state.json) ---

// procCmdline returns /proc/<pid>/cmdline split into argv, or nil if the
// process does not exist or is a zombie.
func procCmdline(pid int) []string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	// state is the first field after "(comm)".
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return nil
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(data) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

// isOurs reports whether pid is still the process started with args.
func isOurs(pid int, args []string) bool {
	got := procCmdline(pid)
	if got == nil || len(got) != len(args) {
		return false
	}
	for i := range got {
		if got[i] != args[i] {
			return false
		}
	}
	return true
}

// stopPID stops a process that is not our child: SIGTERM, poll, SIGKILL.
// It only signals pid while it still runs args.
func stopPID(name string, pid int, args []string) error {
	if !isOurs(pid, args) {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGCONT)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("%s (pid %d): %w", name, pid, err)
	}
	gone := func(context.Context) (bool, error) { return !isOurs(pid, args), nil }
	if wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, stopTimeout, true, gone) == nil {
		return nil
	}
	if isOurs(pid, args) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, gone) == nil {
		return nil
	}
	return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", name, pid)
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i > 0 {
		return path[:i]
	}
	return "."
}
