package cli

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/fanout"
)

// throughGateway says whether server, the server of a kubeconfig cluster,
// reaches members through the gateway: its path ends in (or goes on past) a
// proxy prefix, .../upstreamclusters/SEGMENT/proxy, of one member (SEGMENT a
// name) or many (* or a label selector). It returns the segment, decoded,
// and the server the prefix hangs off: the hub.
func throughGateway(server string) (segment, hub string, ok bool) {
	if !strings.Contains(server, "://") {
		// host:port, as client-go accepts it.
		server = "https://" + server
	}
	u, err := url.Parse(server)
	if err != nil {
		return "", "", false
	}
	i := strings.Index(u.Path, gatewayv1alpha1.UpstreamClustersPath+"/")
	if i < 0 {
		return "", "", false
	}
	rest := u.Path[i+len(gatewayv1alpha1.UpstreamClustersPath)+1:]
	segment, after, found := strings.Cut(rest, "/")
	if !found || segment == "" || (after != "proxy" && !strings.HasPrefix(after, "proxy/")) {
		return "", "", false
	}
	hubURL := *u
	hubURL.Path, hubURL.RawPath = u.Path[:i], ""
	return segment, hubURL.String(), true
}

// checkHubContext refuses context contextName (the current context when
// empty) of kubeconfig cfg as the hub's when its server reaches members
// through the gateway (throughGateway): every command that talks to the hub
// (kubeconfig, clusters, join, unjoin) would otherwise take a member for the
// hub, which a merged KUBECONFIG whose current context is a member's makes
// easy. The error names the context and what to pass instead: the contexts
// of cfg whose server is the hub that one goes through, if any. A context
// that is missing or incomplete is left to the caller to report.
func checkHubContext(cfg clientcmdapi.Config, contextName string) error {
	if contextName == "" {
		contextName = cfg.CurrentContext
	}
	ctx := cfg.Contexts[contextName]
	if ctx == nil {
		return nil
	}
	cluster := cfg.Clusters[ctx.Cluster]
	if cluster == nil {
		return nil
	}
	segment, hub, ok := throughGateway(cluster.Server)
	if !ok {
		return nil
	}
	what := fmt.Sprintf("member cluster %s", segment)
	if fanout.IsFanOut(segment) {
		what = fmt.Sprintf("the member clusters %q selects", segment)
	}
	var hubContexts []string
	for name, c := range cfg.Contexts {
		if c == nil || cfg.Clusters[c.Cluster] == nil {
			continue
		}
		if sameServer(cfg.Clusters[c.Cluster].Server, hub) {
			hubContexts = append(hubContexts, "--context "+name)
		}
	}
	slices.Sort(hubContexts)
	use := "--context with a context of the hub itself (server " + hub + ")"
	if len(hubContexts) > 0 {
		use = strings.Join(hubContexts, " or ")
	}
	return fmt.Errorf("context %q of the kubeconfig is not the hub's: its server %s reaches %s through the gateway: "+
		"pass %s, or --kubeconfig with the hub's kubeconfig", contextName, cluster.Server, what, use)
}

// sameServer compares two kubeconfig servers, but for a trailing slash.
func sameServer(a, b string) bool {
	return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/")
}

// hubClientConfig loads the hub kubeconfig as kubectl does and returns its
// client configuration, refusing a context that reaches members through the
// gateway (checkHubContext).
func hubClientConfig(rules *clientcmd.ClientConfigLoadingRules, overrides *clientcmd.ConfigOverrides) (*rest.Config, error) {
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	raw, err := loader.RawConfig()
	if err != nil {
		return nil, fmt.Errorf("the hub kubeconfig: %w", err)
	}
	if err := checkHubContext(raw, overrides.CurrentContext); err != nil {
		return nil, err
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("the hub kubeconfig: %w", err)
	}
	return cfg, nil
}
