package app

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/component-base/version/verflag"
)

// PluginName is the file name under which kubectl runs this binary as
// `kubectl gateway`: kubectl finds plugins as kubectl-NAME on PATH.
const PluginName = "kubectl-gateway"

// IsPlugin says whether argv0, the path the binary was started as, is the
// kubectl plugin's name (a copy or symlink of kube-gateway).
func IsPlugin(argv0 string) bool {
	base := filepath.Base(argv0)
	return strings.TrimSuffix(base, ".exe") == PluginName
}

// NewPluginCommand returns `kubectl gateway`: the client subcommands of
// kube-gateway, without the server.
func NewPluginCommand(ctx context.Context) *cobra.Command {
	cmd := &cobra.Command{
		Use: "gateway",
		// kubectl runs it as `kubectl gateway`: help and usage say so.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl gateway"},
		Short:       "Register member clusters with kube-gateway and reach them through the hub",
		Long: `kubectl gateway manages the member clusters of a hub that runs kube-gateway:
  join       register a member cluster (its identity on the member, its UpstreamCluster on the hub)
  unjoin     remove what join created
  clusters   print the member clusters and their health
  kubeconfig print a kubeconfig that reaches a member cluster through the hub`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		// Without a subcommand, the help.
		RunE: func(cmd *cobra.Command, _ []string) error {
			verflag.PrintAndExitIfRequested()
			return cmd.Help()
		},
	}
	cmd.SetContext(ctx)
	cmd.AddCommand(newJoinCommand(), newUnjoinCommand(), newClustersCommand(), newKubeconfigCommand())
	return cmd
}
