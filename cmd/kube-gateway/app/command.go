package app

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/term"
	"k8s.io/component-base/version/verflag"

	"github.com/kubewharf/kube-gateway/cmd/kube-gateway/cli"
)

// NewCommand returns the kube-gateway command.
func NewCommand(ctx context.Context) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "kube-gateway",
		Short: "An aggregated API server that proxies requests to member Kubernetes clusters",
		Long: `kube-gateway serves gateway.kubewharf.io/v1alpha1 behind a hub kube-apiserver.
UpstreamClusters (stored in etcd) describe member clusters; requests to
/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/NAME/proxy/PATH are forwarded
to a server of member NAME, impersonating the hub user, so that the member's own
RBAC applies.

"kube-gateway kubeconfig --cluster NAME" prints a kubeconfig that reaches member
NAME through the hub (see "kube-gateway kubeconfig --help"); "kube-gateway join
NAME --member-kubeconfig FILE" registers a member cluster; installed as
kubectl-gateway in a directory on PATH (ln -s "$PWD/_output/bin/kube-gateway"
DIR/kubectl-gateway after make build), the binary is the kubectl plugin
"kubectl gateway".`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			verflag.PrintAndExitIfRequested()
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			config, err := o.Config()
			if err != nil {
				return err
			}
			completed, err := config.Complete()
			if err != nil {
				return err
			}
			server, err := completed.New()
			if err != nil {
				return err
			}
			return server.Run(cmd.Context())
		},
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%q does not take any arguments, got %q", cmd.CommandPath(), args)
			}
			return nil
		},
	}
	cmd.SetContext(ctx)
	cmd.AddCommand(cli.Commands()...)

	fss := o.Flags()
	verflag.AddFlags(fss.FlagSet("global"))
	fs := cmd.Flags()
	for _, f := range fss.FlagSets {
		fs.AddFlagSet(f)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}
