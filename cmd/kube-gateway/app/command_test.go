package app

import (
	"context"
	"testing"
)

// The server command carries the client commands too.
func TestServerCommandHasClientCommands(t *testing.T) {
	root := NewCommand(context.Background())
	for _, args := range [][]string{{"kubeconfig", "--cluster", "x"}, {"join", "x"}, {"unjoin", "x"}, {"clusters"}} {
		sub, _, err := root.Find(args)
		if err != nil || sub.Name() != args[0] {
			t.Errorf("kube-gateway %s: %v %v", args[0], sub, err)
		}
	}
}
