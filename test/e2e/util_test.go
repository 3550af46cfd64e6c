package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubewharf/kube-gateway/test/harness"
)

// eventually polls cond every 200ms until it returns nil or timeout passes, then
// fails the test with cond's last error.
func eventually(t *testing.T, timeout time.Duration, cond func(ctx context.Context) error) {
	t.Helper()
	var last error
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		last = cond(ctx)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("condition not met within %s: %v", timeout, last)
	}
}

// testContext returns a context bounded for one test.
func testContext(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// portForwardEcho runs kubectl port-forward to the shell pod with kubeconfig
// (and extraEnv added to kubectl's environment), and echoes a message through
// each of n connections over the one forwarding session (the stand-in kubelet
// echoes).
func portForwardEcho(t *testing.T, ctx context.Context, kubeconfig string, extraEnv []string, n int) {
	t.Helper()
	forwarding := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := env.KubectlCmd(ctx, kubeconfig, "--namespace="+harness.AliceNamespace, "port-forward", "--address=127.0.0.1", "pod/"+harness.ShellPod, ":8080")
	cmd.Env = append(cmd.Env, extraEnv...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	port := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			if m := forwarding.FindStringSubmatch(s.Text()); m != nil {
				port <- m[1]
			}
		}
		close(port)
	}()
	var local string
	select {
	case local = <-port:
	case <-ctx.Done():
	}
	if local == "" {
		t.Fatalf("kubectl port-forward did not start: %s", stderr.String())
	}
	for i := 0; i < n; i++ {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+local, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		msg := []byte(sprintf("ping %d through port-forward\n", i))
		if _, err := conn.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		_, err = io.ReadFull(conn, got)
		conn.Close()
		if err != nil || string(got) != string(msg) {
			t.Fatalf("port-forward echo %d: %q, %v, want %q (kubectl: %s)", i, got, err, msg, stderr.String())
		}
	}
}

// kubectlWatchSeesCreates runs kubectl get -w --watch-only on alice's
// namespace with kubeconfig (whose cluster is member-a, through the gateway)
// and creates ConfigMaps named prefix-N on member-a until one of their events
// arrives, within the given time.
func kubectlWatchSeesCreates(ctx context.Context, t *testing.T, kubeconfig, prefix string, within time.Duration) {
	t.Helper()
	cmd := env.KubectlCmd(ctx, kubeconfig, "--namespace="+harness.AliceNamespace, "get", "configmaps", "--watch-only", "-o", "name")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := make(chan string, 100)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()

	// --watch-only prints events only, no initial list: any object we create that
	// shows up came through the watch. Create objects until one does, so the test
	// does not depend on when kubectl's watch was established.
	deadline := time.After(within)
	created := map[string]bool{}
	var seen []string
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("kubectl get -w ended")
			}
			seen = append(seen, line)
			for name := range created {
				if line == "configmap/"+name {
					return
				}
			}
		case <-tick.C:
			name := sprintf("%s-%d", prefix, i)
			i++
			if _, err := memberA(t).CoreV1().ConfigMaps(harness.AliceNamespace).Create(ctx,
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			created[name] = true
			t.Cleanup(func() {
				_ = memberA(t).CoreV1().ConfigMaps(harness.AliceNamespace).Delete(context.Background(), name, metav1.DeleteOptions{})
			})
		case <-deadline:
			t.Fatalf("no event for the %d created configmaps arrived through the gateway; kubectl printed %q", len(created), seen)
		}
	}
}

// kubectlLines starts kubectl with args and returns the lines it prints,
// closed when it ends, and what it wrote to stderr; it is ended when the test
// ends.
func kubectlLines(ctx context.Context, t *testing.T, kubeconfig string, args ...string) (<-chan string, *strings.Builder) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	cmd := env.KubectlCmd(ctx, kubeconfig, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &strings.Builder{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines, stderr
}
