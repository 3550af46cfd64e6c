// Command kube-gateway is the kube-gateway aggregated API server: it serves the
// UpstreamCluster API and proxies requests to member clusters.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	componentcli "k8s.io/component-base/cli"

	"github.com/kubewharf/kube-gateway/cmd/kube-gateway/app"
	"github.com/kubewharf/kube-gateway/cmd/kube-gateway/cli"
)

func main() {
	os.Exit(run(genericapiserver.SetupSignalContext(), os.Args[0], os.Args[1:], os.Stderr))
}

// run runs the command with args and returns the exit code; started as
// kubectl-gateway (argv0), it is the kubectl plugin. An error is one
// plain line on stderr, whatever the subcommand: a person reads it (and a log
// collector takes it as it is), so it carries no log-line decoration.
func run(ctx context.Context, argv0 string, args []string, stderr io.Writer) int {
	newCommand := app.NewCommand
	if cli.IsPlugin(argv0) {
		newCommand = cli.NewPluginCommand
	}
	cmd := newCommand(ctx)
	cmd.SetArgs(args)
	if err := componentcli.RunNoErrOutput(cmd); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}
	return 0
}
