package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/version/verflag"

	gatewayac "github.com/kubewharf/kube-gateway/apis/client/applyconfiguration/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/apis/client/clientset/versioned"
	"github.com/kubewharf/kube-gateway/apis/client/multicluster"
	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
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
	fs.StringVar(&o.memberKubeconfig, "member-kubeconfig", "", "path of a kubeconfig of the member cluster, with the right to create ServiceAccounts, ClusterRoles and ClusterRoleBindings there (required)")
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

// joinOptions are the flags of `kube-gateway join`.
type joinOptions struct {
	clusterOptions
	servers         []string
	self            string // how to run this binary in printed commands: selfCommand
	longLivedToken  bool
	tokenExpiration time.Duration
	renewToken      bool
	proxy           egressProxy
	tunnel          tunnel
}

// tunnel is the konnectivity server the gateway reaches the member through,
// if any: spec.clientConfig.konnectivity.
type tunnel struct {
	address, secret, serverName string
}

// config is spec.clientConfig.konnectivity, nil without --konnectivity-address.
func (k tunnel) config(secretNamespace string) (*gatewayac.KonnectivityConfigApplyConfiguration, error) {
	if k.address == "" {
		if k.secret != "" || k.serverName != "" {
			return nil, errors.New("--konnectivity-secret and --konnectivity-server-name need --konnectivity-address")
		}
		return nil, nil
	}
	if k.secret == "" {
		return nil, errors.New("--konnectivity-address needs --konnectivity-secret, the hub Secret with the gateway's client certificate toward the konnectivity server")
	}
	c := gatewayac.KonnectivityConfig().WithAddress(k.address).
		WithSecretRef(gatewayac.SecretReference().WithNamespace(secretNamespace).WithName(k.secret))
	if k.serverName != "" {
		c.WithServerName(k.serverName)
	}
	return c, nil
}

// egressProxy is the forward proxy the gateway reaches the member through,
// if any: spec.clientConfig.proxyURL and the proxy keys of the Secret.
type egressProxy struct {
	url, username, passwordFile, caFile string
}

// secretData reads the proxy's credential and CA files into the keys of the
// credential Secret.
func (p egressProxy) secretData() (map[string][]byte, error) {
	data := map[string][]byte{}
	if p.url == "" {
		if p.username != "" || p.passwordFile != "" || p.caFile != "" {
			return nil, errors.New("--proxy-username, --proxy-password-file and --proxy-ca-file need --proxy-url")
		}
		return data, nil
	}
	if (p.username == "") != (p.passwordFile == "") {
		return nil, errors.New("--proxy-username and --proxy-password-file go together")
	}
	if p.username != "" {
		password, err := os.ReadFile(p.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("--proxy-password-file: %w", err)
		}
		data[cluster.SecretKeyProxyUsername] = []byte(p.username)
		data[cluster.SecretKeyProxyPassword] = bytes.TrimRight(password, "\r\n")
	}
	if p.caFile != "" {
		ca, err := os.ReadFile(p.caFile)
		if err != nil {
			return nil, fmt.Errorf("--proxy-ca-file: %w", err)
		}
		data[cluster.SecretKeyProxyCA] = ca
	}
	return data, nil
}

func newJoinCommand() *cobra.Command {
	o := &joinOptions{clusterOptions: newClusterOptions(), tokenExpiration: 365 * 24 * time.Hour,
		self: selfCommand(os.Args[0], exec.LookPath, os.Executable)}
	cmd := &cobra.Command{
		Use:   "join NAME --member-kubeconfig FILE",
		Short: "Register a member cluster with the gateway: its identity on the member, its credential and UpstreamCluster on the hub",
		Long: `Register the cluster of --member-kubeconfig as UpstreamCluster NAME, then wait
until it is Ready.

Before it writes anything, join checks the hub: that it answers, serves the
gateway's API (gateway.kubewharf.io/v1alpha1), has --secret-namespace and lets
the user of --kubeconfig get and patch Secrets there and UpstreamClusters.

On the member (with --member-kubeconfig, which needs the right to create
ServiceAccounts, ClusterRoles and ClusterRoleBindings), it creates the objects
the kube-gateway-member chart creates: ServiceAccount --identity-name in
--member-namespace, ClusterRole and ClusterRoleBinding IDENTITY:impersonator,
which let that ServiceAccount impersonate hub users and nothing else.

Its token is a bound ServiceAccount token (TokenRequest API) valid for
--token-expiration, or as much of it as the member allows. Running join again
renews it once half of its lifetime has passed (at once with --renew-token, for
example to apply a new --token-expiration), and otherwise changes nothing. With --long-lived-token it is instead a
kubernetes.io/service-account-token Secret IDENTITY-token, which the member's
token controller (part of kube-controller-manager) fills and which never expires.

On the hub (with --kubeconfig, loaded like kubectl does), it creates Secret NAME
in --secret-namespace with keys token and ca.crt (the CA of the member
kubeconfig), and UpstreamCluster NAME whose servers are --server, by default
the server of the member kubeconfig. With --proxy-url the gateway reaches them
through that forward proxy, and the Secret also holds the proxy's credential
(--proxy-username, --proxy-password-file) and CA (--proxy-ca-file). With
--konnectivity-address it reaches them through that konnectivity server, with
the client certificate of hub Secret --konnectivity-secret; --server then names
them as the member's konnectivity agent resolves them.

Every object is written with server-side apply (field manager kube-gateway-join):
running join again with the same flags changes nothing, with other flags it
updates what they change. Where another tool set a field to another value (an
identity of the same name, from the member chart or by hand), join stops and
says so; --force-conflicts takes such fields over. --dry-run sends every write as a server-side dry run,
prints what would be created or changed, and changes nothing.
"kube-gateway unjoin NAME" removes all of it.`,
		Example: `  kube-gateway join member-a --kubeconfig hub.kubeconfig --member-kubeconfig member-a.kubeconfig

  # Several apiservers behind one member, checked first without changing anything.
  kube-gateway join member-a --member-kubeconfig member-a.kubeconfig \
    --server https://10.0.0.1:6443 --server https://10.0.0.2:6443 --dry-run`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			verflag.PrintAndExitIfRequested()
			o.name = args[0]
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	o.addFlags(cmd)
	fs := cmd.Flags()
	fs.StringArrayVar(&o.servers, "server", nil, "https URL of a member apiserver, repeatable (default: the server of the member kubeconfig)")
	fs.BoolVar(&o.longLivedToken, "long-lived-token", false, "use a long-lived token Secret filled by the member's token controller (needs kube-controller-manager on the member) instead of a bound token")
	fs.DurationVar(&o.tokenExpiration, "token-expiration", o.tokenExpiration, "requested lifetime of a new bound token; the member may shorten it")
	fs.BoolVar(&o.renewToken, "renew-token", false, "request a new bound token even if the current one has more than half of its lifetime left")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "how long to wait for the long-lived token and for the UpstreamCluster to be Ready")
	fs.StringVar(&o.proxy.url, "proxy-url", "", "forward proxy the gateway reaches the member's servers through: http://, https:// or socks5://HOST:PORT (spec.clientConfig.proxyURL); join itself reaches the member as --member-kubeconfig says")
	fs.StringVar(&o.proxy.username, "proxy-username", "", "user name toward the proxy (key proxy-username of the credential Secret)")
	fs.StringVar(&o.proxy.passwordFile, "proxy-password-file", "", "file holding the password toward the proxy (key proxy-password of the credential Secret)")
	fs.StringVar(&o.tunnel.address, "konnectivity-address", "", "HOST:PORT of the konnectivity server the gateway reaches the member's servers through (spec.clientConfig.konnectivity), for a member whose agent dials out to it; --server then names the servers as the member's agent resolves them")
	fs.StringVar(&o.tunnel.secret, "konnectivity-secret", "", "hub Secret, in --secret-namespace, with the gateway's client certificate toward the konnectivity server (keys tls.crt, tls.key, ca.crt); join checks that it exists")
	fs.StringVar(&o.tunnel.serverName, "konnectivity-server-name", "", "name verified in the konnectivity server's certificate (default: the host of --konnectivity-address)")
	fs.StringVar(&o.proxy.caFile, "proxy-ca-file", "", "PEM CA bundle that signed an https:// proxy's certificate, if the host's roots do not (key proxy-ca.crt of the credential Secret)")
	return cmd
}

// memberAccess is what join takes from the member kubeconfig.
type memberAccess struct {
	servers    []string
	caPEM      []byte
	serverName string
}

// memberAccessFrom returns the servers and CA the gateway reaches the member
// with: the servers given, else the kubeconfig's server; the kubeconfig's CA.
func memberAccessFrom(cfg *rest.Config, servers []string) (*memberAccess, error) {
	cfg = rest.CopyConfig(cfg)
	if err := rest.LoadTLSFiles(cfg); err != nil {
		return nil, fmt.Errorf("the member kubeconfig: %w", err)
	}
	if len(cfg.CAData) == 0 {
		return nil, errors.New("the member kubeconfig has no CA (certificate-authority or certificate-authority-data of its cluster): the gateway needs it to verify the member's apiservers; add it, even if the kubeconfig uses insecure-skip-tls-verify")
	}
	if len(servers) == 0 {
		servers = []string{cfg.Host}
	}
	seen := map[string]bool{}
	for _, s := range servers {
		u, err := url.Parse(s)
		if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("member server %q: want https://HOST[:PORT], without path (pass --server)", s)
		}
		if seen[s] {
			return nil, fmt.Errorf("member server %q given twice", s)
		}
		seen[s] = true
	}
	return &memberAccess{servers: servers, caPEM: cfg.CAData, serverName: cfg.ServerName}, nil
}

// hubSecret is the gateway's credential toward the member, with the keys of
// extra (the proxy's).
func hubSecret(name, namespace string, token, caPEM []byte, extra map[string][]byte) *corev1ac.SecretApplyConfiguration {
	data := map[string][]byte{cluster.SecretKeyToken: token, cluster.SecretKeyCA: caPEM}
	maps.Copy(data, extra)
	return corev1ac.Secret(name, namespace).
		WithLabels(map[string]string{"app.kubernetes.io/managed-by": joinFieldManager}).
		WithType(corev1.SecretTypeOpaque).
		WithData(data)
}

// upstreamCluster is UpstreamCluster name reaching the member's servers with
// the credential of Secret secretNamespace/name, through proxyURL or tunnel if
// set.
func upstreamCluster(name, secretNamespace string, access *memberAccess, proxyURL string, tunnel *gatewayac.KonnectivityConfigApplyConfiguration) *gatewayac.UpstreamClusterApplyConfiguration {
	spec := gatewayac.UpstreamClusterSpec().
		WithClientConfig(gatewayac.ClientConfig().
			WithSecretRef(gatewayac.SecretReference().WithNamespace(secretNamespace).WithName(name)))
	if access.serverName != "" {
		spec.ClientConfig.WithServerName(access.serverName)
	}
	if proxyURL != "" {
		spec.ClientConfig.WithProxyURL(proxyURL)
	}
	if tunnel != nil {
		spec.ClientConfig.WithKonnectivity(tunnel)
	}
	for _, s := range access.servers {
		spec.WithServers(gatewayac.UpstreamServer().WithEndpoint(strings.TrimSuffix(s, "/")))
	}
	return gatewayac.UpstreamCluster(name).
		WithLabels(map[string]string{"app.kubernetes.io/managed-by": joinFieldManager}).
		WithSpec(spec)
}

func (o *joinOptions) run(ctx context.Context, out io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	if o.tokenExpiration < 10*time.Minute {
		return fmt.Errorf("--token-expiration %s: must be at least 10m", o.tokenExpiration)
	}
	c, err := o.clients()
	if err != nil {
		return err
	}
	return o.join(ctx, c, out)
}

// join registers the member with clients c: it checks the hub first
// (checkHub), then writes the member's objects, whose token the hub's
// objects need, then the hub's.
func (o *joinOptions) join(ctx context.Context, c *clients, out io.Writer) error {
	access, err := memberAccessFrom(c.memberConfig, o.servers)
	if err != nil {
		return err
	}
	proxyData, err := o.proxy.secretData()
	if err != nil {
		return err
	}
	tunnel, err := o.tunnel.config(o.secretNamespace)
	if err != nil {
		return err
	}
	if tunnel != nil && o.proxy.url != "" {
		return errors.New("--proxy-url and --konnectivity-address exclude each other: the gateway reaches a member either way, not both")
	}
	r := &reporter{out: out, dryRun: o.dryRun}
	m := o.identity
	apply := metav1.ApplyOptions{FieldManager: joinFieldManager, Force: o.forceConflicts}
	if o.dryRun {
		apply.DryRun = []string{metav1.DryRunAll}
	}

	// Nothing is written to the member before the hub is known to take the
	// hub's objects: a hub without the gateway, or a user who may not write
	// there, would leave an identity on the member that nothing uses.
	if err := checkHub(ctx, c, o.secretNamespace); err != nil {
		return err
	}
	hubSecrets := c.hub.CoreV1().Secrets(o.secretNamespace)
	current, err := hubSecrets.Get(ctx, o.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		current = nil
	case err != nil:
		return hubError(err, o.secretNamespace)
	}
	if tunnel != nil {
		if _, err := hubSecrets.Get(ctx, o.tunnel.secret, metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("--konnectivity-secret: the hub has no Secret %s/%s: create it with the gateway's client certificate toward the konnectivity server (keys tls.crt, tls.key, ca.crt)", o.secretNamespace, o.tunnel.secret)
			}
			return hubError(err, o.secretNamespace)
		}
	}

	// Then the member: the hub's objects need the token.
	sas := c.member.CoreV1().ServiceAccounts(m.namespace)
	if err := r.apply(ctx, "member", "serviceaccount", m.namespace+"/"+m.name,
		func(ctx context.Context) (runtime.Object, error) { return sas.Get(ctx, m.name, metav1.GetOptions{}) },
		func(ctx context.Context) (runtime.Object, error) { return sas.Apply(ctx, m.serviceAccount(), apply) }); err != nil {
		return memberError(err, m)
	}
	roles := c.member.RbacV1().ClusterRoles()
	if err := r.apply(ctx, "member", "clusterrole", m.roleName(),
		func(ctx context.Context) (runtime.Object, error) {
			return roles.Get(ctx, m.roleName(), metav1.GetOptions{})
		},
		func(ctx context.Context) (runtime.Object, error) { return roles.Apply(ctx, m.clusterRole(), apply) }); err != nil {
		return memberError(err, m)
	}
	bindings := c.member.RbacV1().ClusterRoleBindings()
	if err := r.apply(ctx, "member", "clusterrolebinding", m.roleName(),
		func(ctx context.Context) (runtime.Object, error) {
			return bindings.Get(ctx, m.roleName(), metav1.GetOptions{})
		},
		func(ctx context.Context) (runtime.Object, error) {
			return bindings.Apply(ctx, m.clusterRoleBinding(), apply)
		}); err != nil {
		return memberError(err, m)
	}

	token, expires, err := o.token(ctx, c, r, current, apply)
	if err != nil {
		return err
	}

	if err := r.apply(ctx, "hub", "secret", o.secretNamespace+"/"+o.name,
		func(ctx context.Context) (runtime.Object, error) {
			return hubSecrets.Get(ctx, o.name, metav1.GetOptions{})
		},
		func(ctx context.Context) (runtime.Object, error) {
			return hubSecrets.Apply(ctx, hubSecret(o.name, o.secretNamespace, token, access.caPEM, proxyData), apply)
		}); err != nil {
		return hubError(err, o.secretNamespace)
	}
	ucs := c.gateway.GatewayV1alpha1().UpstreamClusters()
	if err := r.apply(ctx, "hub", "upstreamcluster", o.name,
		func(ctx context.Context) (runtime.Object, error) { return ucs.Get(ctx, o.name, metav1.GetOptions{}) },
		func(ctx context.Context) (runtime.Object, error) {
			return ucs.Apply(ctx, upstreamCluster(o.name, o.secretNamespace, access, o.proxy.url, tunnel), apply)
		}); err != nil {
		return hubError(err, o.secretNamespace)
	}
	if o.dryRun {
		return nil
	}

	if err := waitReady(ctx, c.gateway, o.name, o.timeout); err != nil {
		return err
	}
	o.printReady(out, expires)
	return nil
}

// printReady says that the UpstreamCluster is Ready, when its token expires
// (zero: never), and how to use it, with commands that work from where the
// user runs join: this binary as the user started it (o.self), with the hub
// kubeconfig and context join was given.
func (o *joinOptions) printReady(out io.Writer, expires time.Time) {
	fmt.Fprintf(out, "\nupstreamcluster %s is Ready.\n", o.name)
	if !expires.IsZero() {
		fmt.Fprintf(out, "The gateway's token on the member expires at %s: run this join again before then to renew it (it renews once half of the token's lifetime has passed, or with --renew-token).\n",
			expires.UTC().Format(time.RFC3339))
	}
	hub := ""
	if o.hubRules.ExplicitPath != "" {
		hub += " --kubeconfig " + shellQuote(o.hubRules.ExplicitPath)
	}
	if o.hubOverrides.CurrentContext != "" {
		hub += " --context " + shellQuote(o.hubOverrides.CurrentContext)
	}
	file := shellQuote(o.name + ".kubeconfig")
	fmt.Fprintf(out, `Reach it through the hub at %s/..., for example:
  %s kubeconfig --cluster %s%s > %s
  kubectl --kubeconfig %s get namespaces
Hub users need a role with verbs on upstreamclusters/proxy (resource name %q) to use it.
`, multicluster.ProxyPath(o.name), o.self, o.name, hub, file, file, o.name)
}

// token returns the token to put into the hub Secret and when it expires
// (zero: never). A bound token already in current Secret is kept while it
// still authenticates as the identity on the member and has more than half of
// its lifetime left, so that running join again changes nothing.
func (o *joinOptions) token(ctx context.Context, c *clients, r *reporter, current *corev1.Secret, apply metav1.ApplyOptions) ([]byte, time.Time, error) {
	m := o.identity
	secrets := c.member.CoreV1().Secrets(m.namespace)
	if o.longLivedToken {
		if err := r.apply(ctx, "member", "secret", m.namespace+"/"+m.tokenSecretName(),
			func(ctx context.Context) (runtime.Object, error) {
				return secrets.Get(ctx, m.tokenSecretName(), metav1.GetOptions{})
			},
			func(ctx context.Context) (runtime.Object, error) { return secrets.Apply(ctx, m.tokenSecret(), apply) }); err != nil {
			return nil, time.Time{}, memberError(err, m)
		}
		if o.dryRun {
			return []byte("<the token of Secret " + m.namespace + "/" + m.tokenSecretName() + ">"), time.Time{}, nil
		}
		var token []byte
		err := wait.PollUntilContextTimeout(ctx, time.Second, o.timeout, true, func(ctx context.Context) (bool, error) {
			s, err := secrets.Get(ctx, m.tokenSecretName(), metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			token = s.Data[corev1.ServiceAccountTokenKey]
			return len(token) > 0, nil
		})
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("member Secret %s/%s still has no token after %s: the member's token controller (kube-controller-manager) fills it; start it, or leave out --long-lived-token to use a bound token",
				m.namespace, m.tokenSecretName(), o.timeout)
		}
		return token, time.Time{}, nil
	}

	// A bound token: the long-lived token Secret an earlier join made goes.
	if err := deleteOwnedTokenSecret(ctx, c.member, r, m, o.dryRun); err != nil {
		return nil, time.Time{}, err
	}
	if current != nil && !o.renewToken {
		if t := current.Data["token"]; len(t) > 0 {
			if exp, keep := keepToken(t, time.Now()); keep && authenticatesAs(ctx, c.memberConfig, t, m.username()) {
				return t, exp, nil
			}
		}
	}
	if o.dryRun {
		fmt.Fprintf(r.out, "member: token of serviceaccount %s/%s would be requested (dry run)\n", m.namespace, m.name)
		return []byte("<a new bound token of " + m.username() + ">"), time.Time{}, nil
	}
	secs := int64(o.tokenExpiration / time.Second)
	tr, err := c.member.CoreV1().ServiceAccounts(m.namespace).CreateToken(ctx, m.name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return nil, time.Time{}, memberError(fmt.Errorf("requesting a token of serviceaccount %s/%s: %w", m.namespace, m.name, err), m)
	}
	fmt.Fprintf(r.out, "member: token of serviceaccount %s/%s requested, expires %s\n", m.namespace, m.name, tr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339))
	return []byte(tr.Status.Token), tr.Status.ExpirationTimestamp.Time, nil
}

// deleteOwnedTokenSecret deletes the long-lived token Secret of m if join
// made it (it lists join as a field manager), and not one a chart installed.
func deleteOwnedTokenSecret(ctx context.Context, member kubernetes.Interface, r *reporter, m memberIdentity, dryRun bool) error {
	s, err := member.CoreV1().Secrets(m.namespace).Get(ctx, m.tokenSecretName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return memberError(err, m)
	}
	if !managedBy(s, joinFieldManager) {
		return nil
	}
	return r.delete(ctx, "member", "secret", m.namespace+"/"+m.tokenSecretName(), dryRun, func(ctx context.Context, opts metav1.DeleteOptions) error {
		return member.CoreV1().Secrets(m.namespace).Delete(ctx, m.tokenSecretName(), opts)
	})
}

func managedBy(obj metav1.Object, manager string) bool {
	for _, f := range obj.GetManagedFields() {
		if f.Manager == manager {
			return true
		}
	}
	return false
}

// boundTokenLifetime reads when a bound ServiceAccount token (a JWT) was
// issued and expires, without verifying it: the member verifies it
// (authenticatesAs); this only decides when to renew. A token without expiry
// is not a bound token.
func boundTokenLifetime(token []byte) (issued, expires time.Time, ok bool) {
	parts := strings.Split(string(token), ".")
	if len(parts) != 3 {
		return time.Time{}, time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, time.Time{}, false
	}
	var claims struct {
		Iat int64 `json:"iat"`
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == 0 || claims.Iat == 0 || claims.Iat >= claims.Exp {
		return time.Time{}, time.Time{}, false
	}
	return time.Unix(claims.Iat, 0), time.Unix(claims.Exp, 0), true
}

// keepToken says whether a bound token still has more than half of its
// lifetime (which the member may have made shorter than requested) left.
func keepToken(token []byte, now time.Time) (time.Time, bool) {
	issued, expires, ok := boundTokenLifetime(token)
	if !ok {
		return time.Time{}, false
	}
	return expires, expires.Sub(now) > expires.Sub(issued)/2
}

// authenticatesAs says whether the member authenticates token as username.
func authenticatesAs(ctx context.Context, member *rest.Config, token []byte, username string) bool {
	cfg := rest.AnonymousClientConfig(member)
	cfg.BearerToken = string(token)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	return err == nil && r.Status.UserInfo.Username == username
}

// waitReady waits until UpstreamCluster name reports Ready=True for its
// current generation.
func waitReady(ctx context.Context, client versioned.Interface, name string, timeout time.Duration) error {
	last := "not observed yet"
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		uc, err := client.GatewayV1alpha1().UpstreamClusters().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		cond := meta.FindStatusCondition(uc.Status.Conditions, gatewayv1alpha1.ConditionReady)
		switch {
		case uc.Status.ObservedGeneration < uc.Generation || cond == nil:
			last = "the gateway has not reported on the current spec yet"
		case cond.Status != metav1.ConditionTrue:
			last = fmt.Sprintf("Ready=%s %s: %s", cond.Status, cond.Reason, cond.Message)
		default:
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("upstreamcluster %s is not Ready after %s (%s): see `kubectl get upstreamcluster %s -o yaml` and the gateway's log", name, timeout, last, name)
	}
	return nil
}

// memberError names what to fix when the member refuses a change.
func memberError(err error, m memberIdentity) error {
	switch {
	case apierrors.IsConflict(err):
		return fmt.Errorf("the member has it already, with other values set by another tool (%w): choose another --identity-name, or pass --force-conflicts to take it over (which changes it for whatever uses it now)", err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the member refused (%w): the user of --member-kubeconfig must be allowed to create ServiceAccounts and Secrets in namespace %s, ClusterRoles and ClusterRoleBindings, and to grant the impersonate verb (cluster-admin can)", err, m.namespace)
	case apierrors.IsNotFound(err) && strings.Contains(err.Error(), "namespaces"):
		return fmt.Errorf("the member has no namespace %s (%w): create it or pass --member-namespace", m.namespace, err)
	}
	return fmt.Errorf("member: %w", err)
}

// hubError names what to fix when the hub refuses a change.
func hubError(err error, secretNamespace string) error {
	switch {
	case apierrors.IsConflict(err):
		return fmt.Errorf("the hub has it already, with other values set by another tool (%w): choose another NAME, or pass --force-conflicts to take it over", err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the hub refused (%w): the user of --kubeconfig must be allowed to manage Secrets in namespace %s and UpstreamClusters", err, secretNamespace)
	case apierrors.IsNotFound(err) && strings.Contains(err.Error(), "namespaces"):
		return fmt.Errorf("the hub has no namespace %s (%w): install the gateway first, or pass the gateway's --secret-namespace", secretNamespace, err)
	}
	return fmt.Errorf("hub: %w", err)
}

// reporter prints one line per object join or unjoin writes: created,
// configured, unchanged or deleted, marked as a dry run when it was one.
type reporter struct {
	out    io.Writer
	dryRun bool
}

func (r *reporter) suffix() string {
	if r.dryRun {
		return " (server dry run)"
	}
	return ""
}

// apply applies an object with write and reports how it compares with what
// get returned before.
func (r *reporter) apply(ctx context.Context, side, kind, name string, get, write func(context.Context) (runtime.Object, error)) error {
	before, err := get(ctx)
	switch {
	case apierrors.IsNotFound(err):
		before = nil
	case err != nil:
		return fmt.Errorf("reading %s %s: %w", kind, name, err)
	}
	after, err := write(ctx)
	if err != nil {
		return fmt.Errorf("applying %s %s: %w", kind, name, err)
	}
	verb := "created"
	if before != nil {
		verb = "configured"
		if sameContent(before, after) {
			verb = "unchanged"
		}
	}
	fmt.Fprintf(r.out, "%s: %s/%s %s%s\n", side, kind, name, verb, r.suffix())
	return nil
}

// delete deletes an object, and reports it unless it was gone already.
func (r *reporter) delete(ctx context.Context, side, kind, name string, dryRun bool, del func(context.Context, metav1.DeleteOptions) error) error {
	opts := metav1.DeleteOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	err := del(ctx, opts)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("deleting %s %s: %w", kind, name, err)
	}
	fmt.Fprintf(r.out, "%s: %s/%s deleted%s\n", side, kind, name, r.suffix())
	return nil
}

// sameContent compares two versions of an object without what every write
// changes (resource version, managed fields) and the status.
func sameContent(a, b runtime.Object) bool {
	norm := func(o runtime.Object) map[string]any {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return nil
		}
		delete(u, "status")
		delete(u, "kind")
		delete(u, "apiVersion")
		if md, ok := u["metadata"].(map[string]any); ok {
			delete(md, "resourceVersion")
			delete(md, "managedFields")
			delete(md, "generation")
		}
		return u
	}
	return reflect.DeepEqual(norm(a), norm(b))
}
