package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A failing command prints one plain line, not a log line, and exits 1. (The
// server command can be built once per process: its flags register feature
// gates; the plugin's cannot.) Started as kubectl-gateway, the binary is the
// kubectl plugin: its client subcommands, without the server's flags.
func TestErrorsArePlainLines(t *testing.T) {
	for _, c := range []struct {
		argv0 string
		args  []string
		want  string
	}{
		{"/usr/local/bin/kube-gateway", []string{"kubeconfig", "--kubeconfig", "/nonexistent/hub.kubeconfig", "--cluster", "member-a"}, "/nonexistent/hub.kubeconfig"}, // the command's own error
		{"/usr/local/bin/kubectl-gateway", []string{"join", "member-a", "--kubeconfig", "/nonexistent/hub.kubeconfig", "--member-kubeconfig", "m.kubeconfig"}, "the hub kubeconfig"},
		{"kubectl-gateway", []string{"clusters", "--kubeconfig", "/nonexistent/hub.kubeconfig"}, "the hub kubeconfig"},
		{"kubectl-gateway", []string{"join"}, "accepts 1 arg(s)"},
		{"kubectl-gateway", []string{"--secure-port=6443"}, "unknown flag: --secure-port"}, // not the server
	} {
		var stderr bytes.Buffer
		code := run(context.Background(), c.argv0, c.args, &stderr)
		if code != 1 {
			t.Errorf("%s %v: exit code %d, want 1", c.argv0, c.args, code)
		}
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		last := lines[len(lines)-1]
		if !strings.HasPrefix(last, "Error: ") || strings.Contains(last, "command failed") || !strings.Contains(last, c.want) {
			t.Errorf("%s %v: last line %q, want one plain \"Error: ...%s...\" line", c.argv0, c.args, last, c.want)
		}
	}
}
