package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/component-base/version/verflag"

	"github.com/kubewharf/kube-gateway/apis/client/multicluster"
)

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
	cacheResources  []string // --cache-resources as given: parseCacheResources
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
ServiceAccounts, ClusterRoles, ClusterRoleBindings and RoleBindings in
kube-system), it creates the objects the kube-gateway-member chart creates:
ServiceAccount --identity-name in --member-namespace, ClusterRole and
ClusterRoleBinding IDENTITY:impersonator, which let that ServiceAccount
impersonate users and create TokenReviews and SubjectAccessReviews (for the
member door), and RoleBinding kube-system/IDENTITY:authentication-reader to the
member's Role extension-apiserver-authentication-reader, which lets it read the
member's client CA (for a member door with clientCA: Member).

Its token is a bound ServiceAccount token (TokenRequest API) valid for
--token-expiration, or as much of it as the member allows. Running join again
renews it once half of its lifetime has passed (at once with --renew-token, for
example to apply a new --token-expiration), and otherwise changes nothing. With --long-lived-token it is instead a
kubernetes.io/service-account-token Secret IDENTITY-token, which the member's
token controller (part of kube-controller-manager) fills and which never expires.

With --cache-resources (resource[.group] as kubectl names them, such as
configmaps,deployments.apps), it also creates the cache identity that fills
the gateway's fleet caches (CachedResources) of the member: ServiceAccount
IDENTITY-cache, ClusterRole and ClusterRoleBinding IDENTITY:cache-reader, which
let it get, list and watch exactly those resources in every namespace and do
nothing else (no impersonation), a token of it like the gateway's, hub Secret
NAME-cache with that token, and spec.clientConfig.cacheSecretRef naming it.
The member must serve each resource; secrets are refused (never cached).
Running join again with another list changes the ClusterRole; without the
flag, join removes a cache identity an earlier join created.

On the hub (with --kubeconfig, loaded like kubectl does), it creates Secret NAME
in --secret-namespace with keys token and ca.crt (the CA of the member
kubeconfig), and UpstreamCluster NAME whose servers are --server, by default
the server of the member kubeconfig. With --proxy-url the gateway reaches them
through that forward proxy, and the Secret also holds the proxy's credential
(--proxy-username, --proxy-password-file) and CA (--proxy-ca-file). With
--konnectivity-address it reaches them through that konnectivity server (or
those, when repeated), with the client certificate of hub Secret
--konnectivity-secret; --server then names them as the member's konnectivity
agent resolves them.

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
    --server https://10.0.0.1:6443 --server https://10.0.0.2:6443 --dry-run

  # With a read-only identity for the gateway's caches of configmaps and deployments.
  kube-gateway join member-a --member-kubeconfig member-a.kubeconfig \
    --cache-resources=configmaps,deployments.apps`,
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
	fs.StringArrayVar(&o.tunnel.addresses, "konnectivity-address", nil, "HOST:PORT of the konnectivity server the gateway reaches the member's servers through (spec.clientConfig.konnectivity), for a member whose agent dials out to it; --server then names the servers as the member's agent resolves them. Repeatable: one per konnectivity server when several run with --server-count")
	fs.StringVar(&o.tunnel.secret, "konnectivity-secret", "", "hub Secret, in --secret-namespace, with the gateway's client certificate toward the konnectivity server (keys tls.crt, tls.key, ca.crt); join checks that it exists")
	fs.StringVar(&o.tunnel.serverName, "konnectivity-server-name", "", "name verified in the konnectivity server's certificate (default: the host of --konnectivity-address)")
	fs.StringVar(&o.proxy.caFile, "proxy-ca-file", "", "PEM CA bundle that signed an https:// proxy's certificate, if the host's roots do not (key proxy-ca.crt of the credential Secret)")
	fs.StringSliceVar(&o.cacheResources, "cache-resources", nil, "resources the gateway's fleet caches may read on the member, as resource[.group] like kubectl names them (configmaps,deployments.apps; comma-separated or repeated): creates the read-only cache identity IDENTITY-cache with get, list and watch on exactly these in every namespace, hub Secret NAME-cache and spec.clientConfig.cacheSecretRef. Never secrets. Without it, join removes a cache identity an earlier join created")
	return cmd
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
	cache, err := parseCacheResources(o.cacheResources)
	if err != nil {
		return err
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
	if err := o.checkSecretNames(ctx, c, len(cache) > 0); err != nil {
		return err
	}
	if len(cache) > 0 {
		if err := checkServed(c.member.Discovery(), cache); err != nil {
			return err
		}
	}
	hubSecrets := c.hub.CoreV1().Secrets(o.secretNamespace)
	current, err := currentSecret(ctx, hubSecrets, o.name, o.secretNamespace)
	if err != nil {
		return err
	}
	currentCache, err := currentSecret(ctx, hubSecrets, cacheSecretName(o.name), o.secretNamespace)
	if err != nil {
		return err
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
	caReaders := c.member.RbacV1().RoleBindings(metav1.NamespaceSystem)
	if err := r.apply(ctx, "member", "rolebinding", metav1.NamespaceSystem+"/"+m.caReaderName(),
		func(ctx context.Context) (runtime.Object, error) {
			return caReaders.Get(ctx, m.caReaderName(), metav1.GetOptions{})
		},
		func(ctx context.Context) (runtime.Object, error) {
			return caReaders.Apply(ctx, m.caReaderBinding(), apply)
		}); err != nil {
		return memberError(err, m)
	}
	if len(cache) > 0 {
		if err := applyCacheIdentity(ctx, c, r, m, cache, apply); err != nil {
			return err
		}
	}

	token, expires, err := o.token(ctx, c, r, m, current, apply)
	if err != nil {
		return err
	}
	var cacheToken []byte
	if len(cache) > 0 {
		var cacheExpires time.Time
		if cacheToken, cacheExpires, err = o.token(ctx, c, r, m.cache(), currentCache, apply); err != nil {
			return err
		}
		if !cacheExpires.IsZero() && (expires.IsZero() || cacheExpires.Before(expires)) {
			expires = cacheExpires
		}
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
	cacheSecret := ""
	if len(cache) > 0 {
		cacheSecret = cacheSecretName(o.name)
		if err := r.apply(ctx, "hub", "secret", o.secretNamespace+"/"+cacheSecret,
			func(ctx context.Context) (runtime.Object, error) {
				return hubSecrets.Get(ctx, cacheSecret, metav1.GetOptions{})
			},
			func(ctx context.Context) (runtime.Object, error) {
				// The cache reaches the member as requests do: through the
				// same proxy, with the same proxy credential.
				return hubSecrets.Apply(ctx, hubSecret(cacheSecret, o.secretNamespace, cacheToken, access.caPEM, proxyData), apply)
			}); err != nil {
			return hubError(err, o.secretNamespace)
		}
	}
	ucs := c.gateway.GatewayV1alpha1().UpstreamClusters()
	if err := r.apply(ctx, "hub", "upstreamcluster", o.name,
		func(ctx context.Context) (runtime.Object, error) { return ucs.Get(ctx, o.name, metav1.GetOptions{}) },
		func(ctx context.Context) (runtime.Object, error) {
			return ucs.Apply(ctx, upstreamCluster(o.name, o.secretNamespace, access, o.proxy.url, tunnel, cacheSecret), apply)
		}); err != nil {
		return hubError(err, o.secretNamespace)
	}
	if len(cache) == 0 {
		// The UpstreamCluster no longer names it: what an earlier join
		// with --cache-resources made goes, read rights first.
		if err := o.deleteCacheIdentity(ctx, c, r); err != nil {
			return err
		}
	}
	if o.dryRun {
		return nil
	}

	if err := waitReady(ctx, c.gateway, o.name, o.timeout); err != nil {
		return err
	}
	o.printReady(out, expires, cache)
	return nil
}

// currentSecret returns hub Secret namespace/name, nil if there is none.
func currentSecret(ctx context.Context, secrets corev1client.SecretInterface, name, namespace string) (*corev1.Secret, error) {
	s, err := secrets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, hubError(err, namespace)
	}
	return s, nil
}

// printReady says that the UpstreamCluster is Ready, when its token expires
// (zero: never), and how to use it, with commands that work from where the
// user runs join: this binary as the user started it (o.self), with the hub
// kubeconfig and context join was given.
func (o *joinOptions) printReady(out io.Writer, expires time.Time, cache []schema.GroupResource) {
	fmt.Fprintf(out, "\nupstreamcluster %s is Ready.\n", o.name)
	if !expires.IsZero() {
		fmt.Fprintf(out, "The gateway's token on the member expires at %s: run this join again, with the same flags, before then to renew it (it renews once half of the token's lifetime has passed, or with --renew-token).\n",
			expires.UTC().Format(time.RFC3339))
	}
	if len(cache) > 0 {
		names := make([]string, len(cache))
		for i, gr := range cache {
			names[i] = gr.String()
		}
		fmt.Fprintf(out, "Its cache identity %s may read %s on the member: CachedResources for them can fill the gateway's caches of %s.\n",
			o.identity.cache().username(), strings.Join(names, ", "), o.name)
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
