package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	gatewayac "github.com/kubewharf/kube-gateway/apis/client/applyconfiguration/gateway/v1alpha1"
	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
)

// checkHub makes sure, before join writes anything to the member, that the
// hub of c can take what join writes there: it answers, serves the gateway's
// API, has namespace secretNamespace, and lets the user read and apply
// Secrets there and UpstreamClusters. Each error says what to fix. What the
// hub does not let the user see (a namespace, an access review) is left to
// the writes to find out.
func checkHub(ctx context.Context, c *clients, secretNamespace string) error {
	hub := "the hub"
	if c.hubConfig != nil {
		hub += " " + c.hubConfig.Host
	}
	gv := gatewayv1alpha1.SchemeGroupVersion.String()
	resources, err := c.hub.Discovery().ServerResourcesForGroupVersion(gv)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && !slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool {
		return r.Name == "upstreamclusters"
	})):
		return fmt.Errorf("%s does not serve the gateway's API %s: install the gateway there first (docs/install.md), or pass --kubeconfig and --context of the hub that runs it", hub, gv)
	case apierrors.IsServiceUnavailable(err):
		return fmt.Errorf("%s has the gateway's API %s registered, but the gateway does not answer (%w): see `kubectl get apiservice v1alpha1.gateway.kubewharf.io`, the gateway's pods and its log", hub, gv, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s does not accept the credentials of --kubeconfig (%w): renew them, or pass another --kubeconfig or --context", hub, err)
	case err != nil:
		return fmt.Errorf("cannot ask %s whether it serves the gateway's API %s (%w): check that --kubeconfig and --context name the hub and that it is reachable", hub, gv, err)
	}

	if _, err := c.hub.CoreV1().Namespaces().Get(ctx, secretNamespace, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return fmt.Errorf("%s has no namespace %s, where join puts the gateway's credential Secret: pass the namespace the gateway reads Secrets from (its --secret-namespace, the chart's release namespace) as --secret-namespace", hub, secretNamespace)
	}

	var denied []string
	for _, a := range []authorizationv1.ResourceAttributes{
		{Verb: "get", Resource: "secrets", Namespace: secretNamespace},
		{Verb: "patch", Resource: "secrets", Namespace: secretNamespace},
		{Verb: "get", Group: gatewayv1alpha1.GroupName, Resource: "upstreamclusters"},
		{Verb: "patch", Group: gatewayv1alpha1.GroupName, Resource: "upstreamclusters"},
	} {
		review, err := c.hub.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &a}},
			metav1.CreateOptions{})
		if err != nil || review.Status.Allowed {
			continue
		}
		what := a.Resource
		if a.Namespace != "" {
			what += " in namespace " + a.Namespace
		}
		denied = append(denied, a.Verb+" "+what)
	}
	if len(denied) > 0 {
		return fmt.Errorf("%s does not let the user of --kubeconfig %s: join applies (server-side apply: get and patch) the credential Secret in namespace %s and the UpstreamCluster; have a hub admin grant it, or pass a hub admin's --kubeconfig",
			hub, strings.Join(denied, ", "), secretNamespace)
	}
	return nil
}

// tunnel is the konnectivity servers the gateway reaches the member through,
// if any: spec.clientConfig.konnectivity.
type tunnel struct {
	addresses          []string
	secret, serverName string
}

// config is spec.clientConfig.konnectivity, nil without --konnectivity-address.
func (k tunnel) config(secretNamespace string) (*gatewayac.KonnectivityConfigApplyConfiguration, error) {
	if len(k.addresses) == 0 {
		if k.secret != "" || k.serverName != "" {
			return nil, errors.New("--konnectivity-secret and --konnectivity-server-name need --konnectivity-address")
		}
		return nil, nil
	}
	if k.secret == "" {
		return nil, errors.New("--konnectivity-address needs --konnectivity-secret, the hub Secret with the gateway's client certificate toward the konnectivity server")
	}
	c := gatewayac.KonnectivityConfig().
		WithSecretRef(gatewayac.SecretReference().WithNamespace(secretNamespace).WithName(k.secret))
	if len(k.addresses) == 1 {
		c.WithAddress(k.addresses[0])
	} else {
		c.WithAddresses(k.addresses...)
	}
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
// set, and filling its caches with the credential of Secret cacheSecret if set.
func upstreamCluster(name, secretNamespace string, access *memberAccess, proxyURL string, tunnel *gatewayac.KonnectivityConfigApplyConfiguration, cacheSecret string) *gatewayac.UpstreamClusterApplyConfiguration {
	spec := gatewayac.UpstreamClusterSpec().
		WithClientConfig(gatewayac.ClientConfig().
			WithSecretRef(gatewayac.SecretReference().WithNamespace(secretNamespace).WithName(name)))
	if cacheSecret != "" {
		spec.ClientConfig.WithCacheSecretRef(gatewayac.SecretReference().WithNamespace(secretNamespace).WithName(cacheSecret))
	}
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
