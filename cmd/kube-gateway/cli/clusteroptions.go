package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubewharf/kube-gateway/apis/client/clientset/versioned"
	"github.com/kubewharf/kube-gateway/apis/client/multicluster"
)

// clusterOptions are the flags join and unjoin share: where the hub and the
// member are, and the names of what join creates on each.
type clusterOptions struct {
	name string // the UpstreamCluster

	hubRules     *clientcmd.ClientConfigLoadingRules
	hubOverrides *clientcmd.ConfigOverrides

	memberKubeconfig string
	memberContext    string
	identity         memberIdentity
	secretNamespace  string
	dryRun           bool
	forceConflicts   bool
	timeout          time.Duration
}

func (o *clusterOptions) addFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&o.hubRules.ExplicitPath, "kubeconfig", "", "path of the hub kubeconfig (default: $KUBECONFIG, else ~/.kube/config)")
	fs.StringVar(&o.hubOverrides.CurrentContext, "context", "", "context of the hub kubeconfig to use (default: its current context)")
	fs.StringVar(&o.memberKubeconfig, "member-kubeconfig", "", "path of a kubeconfig of the member cluster, with the right to create ServiceAccounts, ClusterRoles, ClusterRoleBindings and RoleBindings in kube-system there (required)")
	fs.StringVar(&o.memberContext, "member-context", "", "context of the member kubeconfig to use (default: its current context)")
	fs.StringVar(&o.identity.namespace, "member-namespace", "kube-system", "member namespace of the gateway's ServiceAccount")
	fs.StringVar(&o.identity.name, "identity-name", "kube-gateway", "name of the gateway's ServiceAccount on the member; its ClusterRole and ClusterRoleBinding are NAME:impersonator (the member chart's value \"name\")")
	fs.StringVar(&o.secretNamespace, "secret-namespace", "kube-gateway", "hub namespace of the credential Secret: the gateway's --secret-namespace")
	fs.BoolVar(&o.forceConflicts, "force-conflicts", false, "take over fields of existing objects that another tool (the member chart, kubectl, ...) set to other values; without it join stops at such a conflict")
	fs.BoolVar(&o.dryRun, "dry-run", false, "change nothing: send every change as a server-side dry run and print what would be created, changed or deleted")
	_ = cmd.MarkFlagRequired("member-kubeconfig")
	// The server command's sectioned help does not describe this command.
	defaults := &cobra.Command{}
	cmd.SetHelpFunc(defaults.HelpFunc())
	cmd.SetUsageFunc(defaults.UsageFunc())
}

func newClusterOptions() clusterOptions {
	return clusterOptions{
		hubRules:     clientcmd.NewDefaultClientConfigLoadingRules(),
		hubOverrides: &clientcmd.ConfigOverrides{},
		timeout:      2 * time.Minute,
	}
}

func (o *clusterOptions) validate() error {
	if err := multicluster.ValidateClusterName(o.name); err != nil {
		return err
	}
	if o.identity.name == "" || o.identity.namespace == "" || o.secretNamespace == "" {
		return errors.New("--identity-name, --member-namespace and --secret-namespace must not be empty")
	}
	return nil
}

// clients connects to the hub and the member.
type clients struct {
	hubConfig, memberConfig *rest.Config
	hub                     kubernetes.Interface
	gateway                 versioned.Interface
	member                  kubernetes.Interface
}

func (o *clusterOptions) clients() (*clients, error) {
	hubConfig, err := hubClientConfig(o.hubRules, o.hubOverrides)
	if err != nil {
		return nil, err
	}
	memberConfig, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: o.memberKubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: o.memberContext}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("the member kubeconfig %s: %w", o.memberKubeconfig, err)
	}
	if segment, _, ok := throughGateway(memberConfig.Host); ok {
		// Its objects would be written through the gateway, as the hub
		// user, and the UpstreamCluster would point at the gateway itself.
		return nil, fmt.Errorf("the member kubeconfig %s reaches %s through the gateway (server %s), not the member's own apiserver: pass with --member-kubeconfig (and --member-context) a kubeconfig of the member cluster itself",
			o.memberKubeconfig, segment, memberConfig.Host)
	}
	c := &clients{hubConfig: hubConfig, memberConfig: memberConfig}
	for _, cfg := range []*rest.Config{hubConfig, memberConfig} {
		cfg.Timeout = 30 * time.Second
	}
	if c.hub, err = kubernetes.NewForConfig(hubConfig); err != nil {
		return nil, err
	}
	if c.gateway, err = versioned.NewForConfig(hubConfig); err != nil {
		return nil, err
	}
	if c.member, err = kubernetes.NewForConfig(memberConfig); err != nil {
		return nil, err
	}
	return c, nil
}
