// Package floor runs test/bench/floorproxy, the benchmarks' floor: a minimal Go
// reverse proxy (TLS and HTTP/2 in, HTTP/2 out, httputil.ReverseProxy with a
// buffer pool; no authentication, authorization, admission or metrics) in
// front of a member. Whatever the gateway costs beyond it is the gateway's own
// overhead.
package floor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// The floor target's names in reports.
const (
	Key   = "floor"
	Label = "minimal Go proxy"
	Proc  = "floor proxy" // its name among the measured processes
)

// Build compiles test/bench/floorproxy into dir. The benchmarks run with
// `go run` from the repository root, so the package path is relative to it.
func Build(ctx context.Context, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "floorproxy")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./test/bench/floorproxy")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./test/bench/floorproxy: %w\n%s", err, out)
	}
	return bin, nil
}

// Proxy is the running floorproxy process.
type Proxy struct {
	// DebugURL is the base URL of its /debug/pprof endpoints (plain HTTP on
	// loopback), so that its heap, stacks and goroutines can be read as the
	// gateway's are.
	DebugURL string

	cmd  *exec.Cmd
	done chan struct{} // closed when it exited
	err  error         // of Wait, valid after done
	log  string
}

// PID is the proxy's process ID.
func (f *Proxy) PID() int { return f.cmd.Process.Pid }

// Start starts bin in front of member m (replica 0), waits for it to write its
// addresses and returns it with its target. It sends the member's admin token;
// with impersonate, the gateway's own member token instead, naming the hub's
// admin and its groups in impersonation headers, as the gateway does for the
// gateway-alone target. dir receives the member CA, the token, the proxy's
// ca.crt and addresses, and its log.
func Start(ctx context.Context, bin, dir string, m *harness.Cluster, impersonate bool) (*Proxy, *measure.Target, error) {
	caFile := filepath.Join(dir, "upstream-ca.crt")
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(caFile, m.CAData, 0o644); err != nil {
		return nil, nil, err
	}
	token := m.Tokens[harness.UserAdmin]
	if impersonate {
		token = m.Tokens[harness.UserGateway]
	}
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		return nil, nil, err
	}
	logPath := filepath.Join(dir, "floorproxy.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	defer lf.Close() // the child has its own descriptor
	args := []string{"-upstream", m.Servers[0].URL, "-upstream-ca", caFile, "-token-file", tokenFile, "-dir", dir}
	if impersonate {
		args = append(args, "-impersonate-user", harness.UserAdmin, "-impersonate-groups", strings.Join(harness.AdminGroups(), ","))
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	// Own process group (a ^C goes to the bench, which stops it), killed if
	// the bench dies without stopping it, as the harness does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", bin, err)
	}
	f := &Proxy{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { f.err = cmd.Wait(); close(f.done) }()

	// debug-addr is written before addr: once addr is there, both are.
	addr, err := f.waitAddr(ctx, filepath.Join(dir, "addr"), 30*time.Second)
	if err != nil {
		f.Stop()
		return nil, nil, err
	}
	debugAddr, err := os.ReadFile(filepath.Join(dir, "debug-addr"))
	if err != nil {
		f.Stop()
		return nil, nil, err
	}
	f.DebugURL = "http://" + strings.TrimSpace(string(debugAddr))
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		f.Stop()
		return nil, nil, err
	}
	client, err := measure.NewClient(ca, nil, 2*time.Minute)
	if err != nil {
		f.Stop()
		return nil, nil, err
	}
	// No headers: the proxy adds the member's token itself.
	return f, &measure.Target{Key: Key, Label: Label, Base: "https://" + addr, Client: client}, nil
}

// waitAddr polls for the addr file until it appears, the process exits or
// timeout passes.
func (f *Proxy) waitAddr(ctx context.Context, path string, timeout time.Duration) (string, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if data, err := os.ReadFile(path); err == nil && len(data) > 0 {
			return strings.TrimSpace(string(data)), nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-f.done:
			return "", fmt.Errorf("floorproxy exited before listening: %v (log %s)", f.err, f.log)
		case <-deadline.C:
			return "", fmt.Errorf("floorproxy wrote no %s within %s (log %s)", path, timeout, f.log)
		case <-tick.C:
		}
	}
}

// Stop sends SIGTERM to the proxy's PID and waits for it to exit (SIGKILL
// after 10 s). Stopping twice is a no-op.
func (f *Proxy) Stop() error {
	select {
	case <-f.done:
		return nil
	default:
	}
	_ = syscall.Kill(f.PID(), syscall.SIGTERM)
	select {
	case <-f.done:
		return nil
	case <-time.After(10 * time.Second):
	}
	_ = f.cmd.Process.Kill()
	<-f.done
	return errors.New("floorproxy ignored SIGTERM for 10 s and was killed")
}
