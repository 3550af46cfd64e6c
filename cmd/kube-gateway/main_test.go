package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A failing command prints one plain line, not a log line, and exits 1. (The
// command can be built once per process: its flags register feature gates.)
func TestErrorsArePlainLines(t *testing.T) {
	for _, args := range [][]string{
		{"kubeconfig", "--kubeconfig", "/nonexistent/hub.kubeconfig", "--cluster", "member-a"}, // the command's own error
	} {
		var stderr bytes.Buffer
		code := run(context.Background(), args, &stderr)
		if code != 1 {
			t.Errorf("%v: exit code %d, want 1", args, code)
		}
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		last := lines[len(lines)-1]
		if !strings.HasPrefix(last, "Error: ") || strings.Contains(last, "command failed") {
			t.Errorf("%v: last line %q, want one plain \"Error: ...\" line", args, last)
		}
	}
}
