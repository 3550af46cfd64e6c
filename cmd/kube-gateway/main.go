// Command kube-gateway is the kube-gateway aggregated API server: it serves the
// UpstreamCluster API and proxies requests to member clusters.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"github.com/kubewharf/kube-gateway/cmd/kube-gateway/app"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	os.Exit(cli.Run(app.NewCommand(ctx)))
}
