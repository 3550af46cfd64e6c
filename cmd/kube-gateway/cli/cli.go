// Package cli holds the client commands of kube-gateway: join, unjoin,
// clusters and kubeconfig, which the server command carries as subcommands
// (cmd/kube-gateway/app) and which, started as kubectl-gateway, are the
// kubectl plugin "kubectl gateway" (NewPluginCommand).
package cli

import "github.com/spf13/cobra"

// Commands returns the client commands, to add to a parent command.
func Commands() []*cobra.Command {
	return []*cobra.Command{newKubeconfigCommand(), newJoinCommand(), newUnjoinCommand(), newClustersCommand()}
}
