package cli

import (
	"context"
	"path/filepath"
	"regexp"
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
	cmd.AddCommand(Commands()...)
	for _, sub := range cmd.Commands() {
		sub.Example = pluginExample(sub.Example)
	}
	return cmd
}

// pluginExample rewrites the example commands of a subcommand's help, which
// run kube-gateway, as the plugin runs them: kubectl gateway.
func pluginExample(example string) string {
	return strings.ReplaceAll("\n"+example, "\n  kube-gateway ", "\n  kubectl gateway ")[1:]
}

// selfCommand returns how the user runs this binary, for the commands it
// prints (join's hints): "kubectl gateway" when kubectl runs it as the
// plugin (argv0 is kubectl-gateway); argv0 itself when it is a path (the
// user typed _output/bin/kube-gateway: that works from where they are) or
// a name that PATH finds; else, as a name PATH does not find, the absolute
// path of the running binary (executable).
func selfCommand(argv0 string, lookPath func(string) (string, error), executable func() (string, error)) string {
	if IsPlugin(argv0) {
		return "kubectl gateway"
	}
	if argv0 != "" && strings.ContainsRune(argv0, filepath.Separator) {
		return shellQuote(argv0)
	}
	if argv0 != "" {
		if _, err := lookPath(argv0); err == nil {
			return shellQuote(argv0)
		}
	}
	if path, err := executable(); err == nil && path != "" {
		return shellQuote(path)
	}
	return "kube-gateway"
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:@%+=,-]+$`)

// shellQuote quotes s for a POSIX shell unless it needs no quotes.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
