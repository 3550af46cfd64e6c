// Command bench-exec counts how often kubectl exec loses output or reports the
// wrong exit code, over SPDY and over WebSocket, on three paths to the same pod
// (the stand-in kubelet's pod alice/shell on member-a of test/harness):
//
//	direct    kubectl -> member-a (admin)
//	gateway   kubectl -> kube-gateway (--direct-access, the hub admin token) -> member-a
//	hub       kubectl -> hub -> kube-gateway -> member-a (admin through the proxy prefix)
//
// Each session runs one of the stand-in kubelet's commands with a known
// answer: `echo <marker>` (stdout is the marker), `cat` fed 64 KiB (stdout is
// the input) or `sh -c "exit N"` for N in 1..3 (kubectl exits N). Sessions of
// every path and protocol are interleaved, so that machine noise falls on all
// alike. It writes report.md to -out-dir and prints it.
//
//	make bench-exec                          # BENCH_EXEC_ARGS="-n 100" to pass flags
//
// It is a report, not a test: it exits non-zero only when it cannot measure.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/harness"
)

type options struct {
	N           int // sessions per path and protocol
	Concurrency int
	OutDir      string
}

func main() {
	var o options
	flag.IntVar(&o.N, "n", 500, "kubectl exec sessions per path and protocol")
	flag.IntVar(&o.Concurrency, "concurrency", 4, "sessions at a time, over all paths")
	flag.StringVar(&o.OutDir, "out-dir", "_output/bench-exec", "directory for report.md")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "bench-exec: %v\n", err)
		os.Exit(1)
	}
}

// A path is a kubeconfig that reaches member-a one way.
type path struct{ key, label, kubeconfig string }

// A protocol is how kubectl streams: its environment switches.
type protocol struct {
	name string
	env  []string
}

var protocols = []protocol{
	{"websocket", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true"}},
	{"spdy", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false"}},
}

// tally is what the sessions of one path and protocol gave.
type tally struct {
	Runs, OK, WrongExit, LostOutput, Failed int
	Examples                                []string // the first few of each failure
}

func (t *tally) example(s string) {
	if len(t.Examples) < 6 {
		t.Examples = append(t.Examples, s)
	}
}

func run(ctx context.Context, o options) error {
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return err
	}
	started := time.Now()
	workDir, err := os.MkdirTemp("", "kube-gateway-bench-exec-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(workDir)
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	env, err := harness.Start(startCtx, harness.Config{WorkDir: workDir, Log: os.Stderr, GatewayArgs: []string{"--direct-access"}})
	cancel()
	if err != nil {
		return fmt.Errorf("starting the environment: %w", err)
	}
	defer env.Stop()

	gatewayKubeconfig := filepath.Join(workDir, "gateway-direct.kubeconfig")
	gatewayCA, err := os.ReadFile(env.GatewayCAFile)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["gateway"] = &clientcmdapi.Cluster{Server: env.GatewayURL + harness.ProxyPath(harness.MemberA), CertificateAuthorityData: gatewayCA}
	cfg.AuthInfos["admin@hub"] = &clientcmdapi.AuthInfo{Token: env.Hub.Tokens[harness.UserAdmin]}
	cfg.Contexts["gateway"] = &clientcmdapi.Context{Cluster: "gateway", AuthInfo: "admin@hub"}
	cfg.CurrentContext = "gateway"
	if err := clientcmd.WriteToFile(*cfg, gatewayKubeconfig); err != nil {
		return err
	}
	paths := []path{
		{"direct", "direct to member-a", env.Kubeconfig(harness.MemberA + "-admin")},
		{"gateway", "gateway alone (direct access)", gatewayKubeconfig},
		{"hub", "hub + gateway", env.Kubeconfig(harness.UserAdmin + "@" + harness.MemberA)},
	}

	type job struct {
		p path
		r protocol
		i int
	}
	jobs := make(chan job)
	tallies := map[string]*tally{}
	for _, p := range paths {
		for _, r := range protocols {
			tallies[p.key+"/"+r.name] = &tally{}
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range o.Concurrency {
		wg.Go(func() {
			for j := range jobs {
				outcome, detail := session(ctx, env, j.p, j.r, j.i)
				mu.Lock()
				t := tallies[j.p.key+"/"+j.r.name]
				t.Runs++
				switch outcome {
				case "ok":
					t.OK++
				case "wrong exit":
					t.WrongExit++
				case "lost output":
					t.LostOutput++
				default:
					t.Failed++
				}
				if outcome != "ok" {
					t.example(fmt.Sprintf("%s: %s", outcome, detail))
				}
				mu.Unlock()
			}
		})
	}
	logf("%d sessions per path and protocol, %d at a time", o.N, o.Concurrency)
	for i := range o.N {
		for _, p := range paths {
			for _, r := range protocols {
				select {
				case jobs <- job{p, r, i}:
				case <-ctx.Done():
				}
			}
		}
		if (i+1)%50 == 0 {
			logf("%d of %d rounds", i+1, o.N)
		}
	}
	close(jobs)
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}

	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# kubectl exec fidelity\n\n")
	m := measure.ThisMachine()
	p("Run %s on %s. Code: %s (the kube-gateway binary `make build` made from it); kubectl %s. %d sessions per path and protocol, %d at a time, interleaved; whole run %s.\n\n",
		started.UTC().Format("2006-01-02 15:04 MST"), m, m.Commit, kubectlVersion(ctx, env), o.N, o.Concurrency, time.Since(started).Round(time.Second))
	p("Each session is `kubectl exec -i` into pod alice/shell on member-a (the stand-in kubelet) running, in turn, `echo <marker>`, `cat` fed 64 KiB, or `sh -c \"exit N\"` (N = 1, 2, 3). ")
	p("*wrong exit*: kubectl exited with another code (0 for a lost error stream); *lost output*: kubectl exited as expected but stdout differs; *failed*: kubectl failed otherwise.\n\n")
	p("| path | protocol | sessions | ok | wrong exit | lost output | failed |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, pa := range paths {
		for _, r := range protocols {
			t := tallies[pa.key+"/"+r.name]
			p("| %s | %s | %d | %d | %d | %d | %d |\n", pa.label, r.name, t.Runs, t.OK, t.WrongExit, t.LostOutput, t.Failed)
		}
	}
	p("\n")
	for _, pa := range paths {
		for _, r := range protocols {
			if t := tallies[pa.key+"/"+r.name]; len(t.Examples) > 0 {
				p("%s, %s:\n\n", pa.label, r.name)
				for _, e := range t.Examples {
					p("- %s\n", e)
				}
				p("\n")
			}
		}
	}
	out := filepath.Join(o.OutDir, "report.md")
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Print(b.String())
	logf("report written to %s", out)
	return nil
}

// session runs one kubectl exec and judges it.
func session(ctx context.Context, env *harness.Env, p path, r protocol, i int) (outcome, detail string) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var args []string
	var stdin, want string
	wantCode := 0
	switch i % 3 {
	case 0:
		marker := fmt.Sprintf("%s-%s-%d", p.key, r.name, i)
		args, want = []string{"echo", marker}, marker+"\n"
	case 1:
		stdin = strings.Repeat(fmt.Sprintf("%07d\n", i), 8192) // 64 KiB
		args, want = []string{"cat"}, stdin
	default:
		wantCode = 1 + (i/3)%3
		args = []string{"sh", "-c", fmt.Sprintf("exit %d", wantCode)}
	}
	cmd := env.KubectlCmd(ctx, p.kubeconfig, append([]string{"--namespace=" + harness.AliceNamespace, "exec", "-i", harness.ShellPod, "-c", "main", "--"}, args...)...)
	cmd.Env = append(cmd.Env, r.env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	case err != nil:
		return "failed", err.Error()
	}
	what := strings.Join(args, " ")
	switch {
	case code == wantCode && stdout.String() == want:
		return "ok", ""
	case wantCode != 0 && code != wantCode && (code == 0 || strings.TrimSpace(stderr.String()) == "" || strings.Contains(stderr.String(), "command terminated with exit code")):
		return "wrong exit", fmt.Sprintf("%s: exit %d, want %d; stderr %q", what, code, wantCode, short(stderr.String()))
	case code == wantCode:
		return "lost output", fmt.Sprintf("%s: %d bytes of stdout, want %d; stderr %q", what, stdout.Len(), len(want), short(stderr.String()))
	}
	return "failed", fmt.Sprintf("%s: exit %d, want %d; stderr %q", what, code, wantCode, short(stderr.String()))
}

// kubectlVersion is the client version of the harness's kubectl.
func kubectlVersion(ctx context.Context, env *harness.Env) string {
	out, err := exec.CommandContext(ctx, filepath.Join(env.BinDir, "kubectl"), "version", "--client", "-o", "json").Output()
	var v struct {
		ClientVersion struct{ GitVersion string } `json:"clientVersion"`
	}
	if err != nil || json.Unmarshal(out, &v) != nil {
		return "(unknown version)"
	}
	return v.ClientVersion.GitVersion
}

func short(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[bench-exec %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
