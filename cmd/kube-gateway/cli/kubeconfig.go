package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/component-base/version/verflag"

	"github.com/kubewharf/kube-gateway/apis/client/clientset/versioned"
	"github.com/kubewharf/kube-gateway/apis/client/multicluster"
	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/fanout"
)

// kubeconfigOptions are the flags of `kube-gateway kubeconfig`.
type kubeconfigOptions struct {
	cluster     string
	contextName string
	check       bool
	flatten     bool
	timeout     time.Duration
	direct      directOptions

	rules     *clientcmd.ClientConfigLoadingRules
	overrides *clientcmd.ConfigOverrides
}

// directOptions are the flags of `kube-gateway kubeconfig --direct`.
type directOptions struct {
	enabled    bool
	server     string // https://HOST:PORT of the gateway itself
	caFile     string // CA of the gateway's serving certificate
	serverName string // TLS server name when the address is not in the certificate
}

// newKubeconfigCommand returns `kube-gateway kubeconfig`: it prints a
// kubeconfig for a member cluster through the hub, or with --direct through
// the gateway alone.
func newKubeconfigCommand() *cobra.Command {
	o := &kubeconfigOptions{
		rules:     clientcmd.NewDefaultClientConfigLoadingRules(),
		overrides: &clientcmd.ConfigOverrides{},
		timeout:   30 * time.Second,
	}
	cmd := &cobra.Command{
		Use:   "kubeconfig --cluster NAME|'*'|SELECTOR",
		Short: "Print a kubeconfig that reaches a member cluster, or many, through the hub (or, with --direct, the gateway alone)",
		Long: `Print a kubeconfig for member cluster NAME through the hub to stdout.

It is built from the current hub kubeconfig, loaded like kubectl does (--kubeconfig,
else $KUBECONFIG, else ~/.kube/config; --context, else the current context): the
same cluster TLS settings (CA, server name, insecure flag) and the same user
credentials, which authenticate to the hub; the server is the hub server plus
/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/NAME/proxy. It has one
context, named NAME unless --context-name says otherwise, and it is the current
context; its cluster and user have the context's name, so that kubeconfigs with
different context names merge safely (KUBECONFIG=a:b kubectl config view
--flatten); the namespace of the hub context is not carried over. kubectl,
client-go, helm, k9s and other tools then work against the member, with the
member's RBAC applied to the hub user.

--cluster '*' (every member) or a label selector of UpstreamClusters (e.g.
'env=prod' or 'env in (prod,staging)', as kubectl get -l takes it) prints a
fan-out kubeconfig instead: kubectl get, get --watch and get --chunk-size then
list and watch over the selected members at once (see docs/fanout.md). Its
context is named fleet for '*'; for a selector, --context-name is required.
Label keys with a prefix (example.com/env) cannot be used: client-go sends the
escaped slash of a server URL as a path separator.

With --direct the server is the gateway itself, --direct-server (its direct
address, https://HOST:PORT) plus the same path, verified with --direct-ca-file
(the CA of the gateway's serving certificate, the caBundle of the APIService
v1alpha1.gateway.kubewharf.io; system roots when not given) and, if the address
is not a name in that certificate, --direct-tls-server-name (for example
kube-gateway.kube-gateway.svc). The hub user's credentials are kept: the gateway
checks them with the hub. The gateway must run with --direct-access: requests
sent this way skip the hub's API Priority and Fairness and its audit log, and the
gateway's own audit policy applies instead.

Only the kubeconfig is written to stdout; errors go to stderr.`,
		Example: `  kube-gateway kubeconfig --cluster member-a > member-a.kubeconfig
  kubectl --kubeconfig member-a.kubeconfig get namespaces

  # Straight to a gateway that runs with --direct-access (its direct Service).
  kubectl get apiservice v1alpha1.gateway.kubewharf.io -o jsonpath='{.spec.caBundle}' | base64 -d > gateway-ca.crt
  kube-gateway kubeconfig --cluster member-a --direct --direct-server https://203.0.113.7:443 \
    --direct-ca-file gateway-ca.crt --direct-tls-server-name kube-gateway.kube-gateway.svc --flatten

  # Check that the UpstreamCluster exists, embed certificate files.
  kube-gateway kubeconfig --kubeconfig hub.kubeconfig --cluster member-a --check --flatten

  # Every member at once (context "fleet"), or those labeled env=prod.
  kube-gateway kubeconfig --cluster '*' > fleet.kubeconfig
  kubectl --kubeconfig fleet.kubeconfig get pods -A
  kube-gateway kubeconfig --cluster 'env=prod' --context-name prod --check > prod.kubeconfig`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			verflag.PrintAndExitIfRequested()
			return o.run(cmd.Context(), cmd)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.cluster, "cluster", "", "name of the member cluster (UpstreamCluster) to reach, or '*' or a label selector of UpstreamClusters for a fan-out kubeconfig (required)")
	fs.StringVar(&o.contextName, "context-name", "", "name of the context, cluster, user and current context of the printed kubeconfig (default: the cluster name; fleet for '*'; required for a selector); give kubeconfigs you will merge different names, e.g. alice@member-a")
	fs.BoolVar(&o.check, "check", false, "verify through the hub that the UpstreamCluster exists (for '*' or a selector: that it selects at least one) before printing")
	fs.BoolVar(&o.flatten, "flatten", false, "embed the certificate and key files the hub kubeconfig refers to")
	fs.DurationVar(&o.timeout, "request-timeout", o.timeout, "timeout of the --check request to the hub")
	fs.StringVar(&o.rules.ExplicitPath, "kubeconfig", "", "path of the hub kubeconfig (default: $KUBECONFIG, else ~/.kube/config)")
	fs.StringVar(&o.overrides.CurrentContext, "context", "", "context of the hub kubeconfig to use (default: its current context)")
	fs.BoolVar(&o.direct.enabled, "direct", false, "reach the member through the gateway alone, at --direct-server, instead of through the hub (the gateway must run with --direct-access)")
	fs.StringVar(&o.direct.server, "direct-server", "", "with --direct: the gateway's direct address, https://HOST:PORT (for example the address of the chart's direct Service)")
	fs.StringVar(&o.direct.caFile, "direct-ca-file", "", "with --direct: PEM file of the CA of the gateway's serving certificate (the APIService caBundle); default: system roots")
	fs.StringVar(&o.direct.serverName, "direct-tls-server-name", "", "with --direct: TLS server name to verify when --direct-server's host is not in the gateway's certificate")
	_ = cmd.MarkFlagRequired("cluster")
	// The server command's sectioned help does not describe this command.
	defaults := &cobra.Command{}
	cmd.SetHelpFunc(defaults.HelpFunc())
	cmd.SetUsageFunc(defaults.UsageFunc())
	return cmd
}

func (o *kubeconfigOptions) run(ctx context.Context, cmd *cobra.Command) error {
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.rules, o.overrides)
	hub, err := loader.RawConfig()
	if err != nil {
		return fmt.Errorf("loading the hub kubeconfig: %w", err)
	}
	member, err := memberKubeconfig(hub, o.overrides.CurrentContext, o.cluster, o.contextName)
	if err != nil {
		return err
	}
	if err := o.direct.apply(member, o.cluster); err != nil {
		return err
	}
	if o.check {
		hubConfig, err := loader.ClientConfig()
		if err != nil {
			return fmt.Errorf("hub client configuration: %w", err)
		}
		if err := checkUpstreamCluster(ctx, hubConfig, o.cluster, o.timeout); err != nil {
			return err
		}
	}
	if o.flatten {
		if err := clientcmdapi.FlattenConfig(member); err != nil {
			return fmt.Errorf("embedding certificate files: %w", err)
		}
	}
	data, err := clientcmd.Write(*member)
	if err != nil {
		return err
	}
	_, err = cmd.OutOrStdout().Write(data)
	return err
}

// memberKubeconfig returns a kubeconfig for member cluster (or the members
// '*' or a label selector selects: parseClusterFlag) through the hub
// described by context contextOverride of hub (its current context when
// empty): the hub context's cluster with the server moved to the proxy
// prefix (proxyServer), and the hub context's user, under one context named
// contextName (default: cluster; fleet for '*'; required for a selector)
// that is the current context; its cluster and user are named contextName
// too.
func memberKubeconfig(hub clientcmdapi.Config, contextOverride, cluster, contextName string) (*clientcmdapi.Config, error) {
	selector, err := parseClusterFlag(cluster)
	if err != nil {
		return nil, err
	}
	if contextName == "" {
		switch {
		case selector == nil:
			contextName = cluster
		case cluster == "*":
			contextName = fanOutContextName
		default:
			return nil, fmt.Errorf("--cluster %q is a label selector: name the printed kubeconfig's context with --context-name (for example --context-name prod)", cluster)
		}
	}
	hubContextName := contextOverride
	if hubContextName == "" {
		hubContextName = hub.CurrentContext
	}
	if hubContextName == "" {
		return nil, errors.New("the hub kubeconfig has no current context: pass --context or --kubeconfig")
	}
	hubContext, ok := hub.Contexts[hubContextName]
	if !ok || hubContext == nil {
		return nil, fmt.Errorf("context %q not found in the hub kubeconfig", hubContextName)
	}
	if err := checkHubContext(hub, hubContextName); err != nil {
		return nil, err
	}
	hubCluster, ok := hub.Clusters[hubContext.Cluster]
	if !ok || hubCluster == nil {
		return nil, fmt.Errorf("cluster %q of context %q not found in the hub kubeconfig", hubContext.Cluster, hubContextName)
	}
	if hubCluster.Server == "" {
		return nil, fmt.Errorf("cluster %q of context %q has no server", hubContext.Cluster, hubContextName)
	}
	user := hub.AuthInfos[hubContext.AuthInfo]
	if user == nil {
		// kubectl treats a missing user as an anonymous one; so do we.
		user = clientcmdapi.NewAuthInfo()
	}

	server, err := proxyServer(&rest.Config{
		Host: hubCluster.Server,
		TLSClientConfig: rest.TLSClientConfig{
			Insecure: hubCluster.InsecureSkipTLSVerify,
			CAFile:   hubCluster.CertificateAuthority,
			CAData:   hubCluster.CertificateAuthorityData,
			CertFile: user.ClientCertificate,
			CertData: user.ClientCertificateData,
		},
	}, cluster)
	if err != nil {
		return nil, err
	}

	memberCluster := hubCluster.DeepCopy()
	memberCluster.Server = server
	memberCluster.LocationOfOrigin = ""
	memberUser := user.DeepCopy()
	memberUser.LocationOfOrigin = ""

	// Cluster and user are named like the context, not like the hub's
	// entries: kubeconfigs printed from different hub contexts (alice's and
	// admin's, whose users may share a name such as "admin") then merge with
	// each context keeping its own credentials, as long as context names differ.
	out := clientcmdapi.NewConfig()
	out.Clusters[contextName] = memberCluster
	out.AuthInfos[contextName] = memberUser
	out.Contexts[contextName] = &clientcmdapi.Context{Cluster: contextName, AuthInfo: contextName}
	out.CurrentContext = contextName
	return out, nil
}

// apply points the one cluster of kubeconfig cfg, made for member cluster by
// memberKubeconfig, at the gateway's direct address instead of the hub, with
// the gateway's CA and server name; the hub's TLS settings do not apply to the
// gateway. Without --direct it only checks that no --direct-* flag was given.
func (d directOptions) apply(cfg *clientcmdapi.Config, cluster string) error {
	if !d.enabled {
		if d.server != "" || d.caFile != "" || d.serverName != "" {
			return errors.New("--direct-server, --direct-ca-file and --direct-tls-server-name need --direct")
		}
		return nil
	}
	if d.server == "" {
		return errors.New("--direct needs --direct-server, the gateway's direct address (https://HOST:PORT)")
	}
	u, err := url.Parse(d.server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("--direct-server %q: want https://HOST[:PORT]", d.server)
	}
	server, err := proxyServer(&rest.Config{Host: d.server}, cluster)
	if err != nil {
		return err
	}
	caFile := d.caFile
	if caFile != "" {
		if caFile, err = filepath.Abs(caFile); err != nil {
			return err
		}
		if _, err := os.Stat(caFile); err != nil {
			return fmt.Errorf("--direct-ca-file: %w", err)
		}
	}
	for name := range cfg.Clusters {
		c := clientcmdapi.NewCluster()
		c.Server = server
		c.CertificateAuthority = caFile
		c.TLSServerName = d.serverName
		cfg.Clusters[name] = c
	}
	return nil
}

// checkUpstreamCluster fails unless the hub serves UpstreamCluster name or,
// for '*' or a label selector, selects at least one.
func checkUpstreamCluster(ctx context.Context, hub *rest.Config, name string, timeout time.Duration) error {
	cfg := rest.CopyConfig(hub)
	cfg.Timeout = timeout
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	selector, err := parseClusterFlag(name)
	if err != nil {
		return err
	}
	if selector != nil {
		// One is enough to know the selection is not empty.
		list, err := client.GatewayV1alpha1().UpstreamClusters().List(ctx, metav1.ListOptions{LabelSelector: selector.String(), Limit: 1})
		switch {
		case err != nil:
			return fmt.Errorf("listing the upstreamclusters %q selects on the hub %s: %w", name, hub.Host, err)
		case len(list.Items) == 0:
			return fmt.Errorf("no upstreamcluster on the hub %s matches %q: see the labels with `kubectl get upstreamclusters --show-labels`", hub.Host, name)
		}
		return nil
	}
	_, err = client.GatewayV1alpha1().UpstreamClusters().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("upstreamcluster %q not found on the hub %s: %w", name, hub.Host, err)
	case err != nil:
		return fmt.Errorf("checking upstreamcluster %q on the hub %s: %w", name, hub.Host, err)
	}
	return nil
}

// fanOutContextName is the default context name of the kubeconfig for '*'.
const fanOutContextName = "fleet"

// parseClusterFlag reads --cluster: the name of one UpstreamCluster (nil
// selector), or '*' or a label selector of UpstreamClusters, told apart as
// the gateway tells them apart in the proxy path (fanout.IsFanOut).
func parseClusterFlag(cluster string) (labels.Selector, error) {
	if !fanout.IsFanOut(cluster) {
		if err := multicluster.ValidateClusterName(cluster); err != nil {
			return nil, fmt.Errorf("--cluster: %w: want the name of an UpstreamCluster, '*' or a label selector such as env=prod", err)
		}
		return nil, nil
	}
	if cluster == "*" {
		return labels.Everything(), nil
	}
	if strings.Contains(cluster, "/") {
		// A server URL could carry it as %2F, but client-go decodes the
		// server's path and sends the slash as it is.
		return nil, fmt.Errorf("--cluster %q: a label key with a prefix (the part before /) cannot be in a kubeconfig's server: select on a label key without a prefix (label the UpstreamClusters with one)", cluster)
	}
	selector, err := labels.Parse(cluster)
	if err != nil {
		return nil, fmt.Errorf("--cluster %q is neither an UpstreamCluster name nor a valid label selector: %w", cluster, err)
	}
	return selector, nil
}

// proxyServer returns the server, a URL, of the proxy prefix of cluster (a
// name, '*' or a label selector: parseClusterFlag) on the server of hub:
// the server as client-go reads it (a URL, or host:port with https when TLS
// is configured), with any path prefix it has, plus
// /apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/SEGMENT/proxy. The
// segment is escaped as a URL path segment, keeping the characters that
// need no escaping there (*, =, !, (, ), ,) as they are.
func proxyServer(hub *rest.Config, cluster string) (string, error) {
	selector, err := parseClusterFlag(cluster)
	if err != nil {
		return "", err
	}
	if selector == nil {
		// ConfigFor validates and escapes the name.
		cfg, err := multicluster.ConfigFor(hub, cluster)
		if err != nil {
			return "", err
		}
		return cfg.Host, nil
	}
	if hub.Host == "" {
		return "", errors.New("the hub has no server")
	}
	base, _, err := rest.DefaultServerUrlFor(hub)
	if err != nil {
		return "", fmt.Errorf("server %q: %w", hub.Host, err)
	}
	if base.RawQuery != "" || base.Fragment != "" {
		return "", fmt.Errorf("server %q must not have a query or fragment", hub.Host)
	}
	suffix := gatewayv1alpha1.UpstreamClustersPath + "/"
	u := *base
	u.Path = strings.TrimSuffix(base.Path, "/") + suffix + cluster + "/proxy"
	u.RawPath = strings.TrimSuffix(base.EscapedPath(), "/") + suffix + escapeSegment(cluster) + "/proxy"
	return u.String(), nil
}

// escapeSegment escapes s as one URL path segment (RFC 3986 pchar): the
// unreserved characters, the sub-delimiters, : and @ stay; anything else,
// the slash included, is percent-encoded.
func escapeSegment(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte("-._~!$&'()*+,;=:@", c) >= 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
