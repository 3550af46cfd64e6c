// Package multicluster lets any client-go (typed, dynamic, discovery) or
// controller-runtime client reach member clusters through kube-gateway, given
// only a rest.Config for the hub:
//
//   - ConfigFor returns a rest.Config for one member: a copy of the hub config
//     whose Host is the member's proxy prefix on the hub,
//     https://HUB/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/NAME/proxy.
//   - RoutingConfig returns a hub rest.Config whose transport sends each request
//     to the cluster named in the request's context (WithCluster), in the style
//     of KubeVela's multicluster client: one client, one connection pool, any
//     number of members. Requests whose context names no cluster, or Local, go to
//     the hub unchanged.
//
// Both keep the hub's TLS settings and credentials: the client authenticates to
// the hub, which authorizes upstreamclusters/proxy, and kube-gateway
// impersonates the hub user on the member, whose RBAC decides.
package multicluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// Local is the cluster name that means "the hub itself" for WithCluster: a
// request whose context names Local is sent to the hub unchanged, as is a
// request whose context names no cluster. Because of it, an UpstreamCluster
// that is itself called "local" cannot be reached through the routing round
// tripper; ConfigFor still reaches it.
const Local = "local"

// ProxyPath returns the hub path prefix that proxies to the member cluster
// (no trailing slash): /apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/NAME/proxy.
// cluster should be valid (ValidateClusterName); it is path-escaped regardless.
func ProxyPath(cluster string) string {
	return gatewayv1alpha1.UpstreamClustersPath + "/" + url.PathEscape(cluster) + "/proxy"
}

// ValidateClusterName returns an error unless name can be the name of an
// UpstreamCluster (a DNS subdomain, RFC 1123).
func ValidateClusterName(name string) error {
	if name == "" {
		return errors.New("cluster name must not be empty")
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("invalid cluster name %q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// ConfigFor returns a copy of the hub config whose Host is the proxy prefix of
// member cluster on the hub (keeping any path prefix the hub Host already has).
// TLS settings, credentials, rate limits and transport wrappers are those of
// hub; hub itself is not modified. Pass it to kubernetes.NewForConfig,
// dynamic.NewForConfig, discovery.NewDiscoveryClientForConfig, a
// controller-runtime client or manager, or anything else that takes a
// rest.Config.
func ConfigFor(hub *rest.Config, cluster string) (*rest.Config, error) {
	if hub == nil {
		return nil, errors.New("hub config must not be nil")
	}
	if err := ValidateClusterName(cluster); err != nil {
		return nil, err
	}
	base, err := hostURL(hub)
	if err != nil {
		return nil, err
	}
	u := *base
	u.Path = strings.TrimSuffix(base.Path, "/") + ProxyPath(cluster)
	if base.RawPath != "" {
		u.RawPath = strings.TrimSuffix(base.RawPath, "/") + ProxyPath(cluster)
	}
	cfg := rest.CopyConfig(hub)
	cfg.Host = u.String()
	return cfg, nil
}

// hostURL parses the Host of config the way client-go does (a URL, or host:port
// with https when the config has TLS settings).
func hostURL(config *rest.Config) (*url.URL, error) {
	if config.Host == "" {
		return nil, errors.New("hub config has no Host")
	}
	u, _, err := rest.DefaultServerUrlFor(config)
	if err != nil {
		return nil, fmt.Errorf("hub config Host %q: %w", config.Host, err)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("hub config Host %q must not have a query or fragment", config.Host)
	}
	return u, nil
}

type clusterKey struct{}

// WithCluster returns a context that routes the requests made with it, through
// a RoutingConfig client, to member cluster name. Local or "" routes them to the
// hub (use it to override a cluster set by a parent context).
func WithCluster(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, clusterKey{}, name)
}

// ClusterFrom returns the cluster set by WithCluster, and false when the
// context names none (or named "").
func ClusterFrom(ctx context.Context) (string, bool) {
	name, _ := ctx.Value(clusterKey{}).(string)
	return name, name != ""
}

// RoutingConfig returns a copy of the hub config whose transport routes every
// request by its context: when ClusterFrom names a member, the request path P
// becomes ProxyPath(member)+P (after the hub Host's own path prefix, if any);
// requests without a cluster, or with Local, go to the hub unchanged. A request
// whose context holds an invalid cluster name fails without being sent.
//
// hub must be a config for the hub itself, not one from ConfigFor. An invalid
// hub Host is reported by the client constructor that receives the result.
func RoutingConfig(hub *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(hub)
	prefix := ""
	if u, err := hostURL(hub); err == nil {
		prefix = strings.TrimSuffix(u.EscapedPath(), "/")
	}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return NewRoutingRoundTripper(prefix, rt)
	})
	return cfg
}

// NewRoutingRoundTripper returns the round tripper that RoutingConfig installs:
// it rewrites the path of requests whose context names a member cluster to go
// through that member's proxy prefix, inserted after hostPrefix (the escaped
// path prefix of the hub Host, "" when it has none), and passes every request
// on to next.
func NewRoutingRoundTripper(hostPrefix string, next http.RoundTripper) http.RoundTripper {
	decoded, err := url.PathUnescape(hostPrefix)
	if err != nil {
		decoded = hostPrefix
	}
	return &routingRoundTripper{rawPrefix: hostPrefix, prefix: decoded, next: next}
}

type routingRoundTripper struct {
	rawPrefix string // escaped path prefix of the hub Host, no trailing slash
	prefix    string // the same, unescaped
	next      http.RoundTripper
}

var _ utilnet.RoundTripperWrapper = &routingRoundTripper{}

func (rt *routingRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	cluster, ok := ClusterFrom(req.Context())
	if !ok || cluster == Local {
		return rt.next.RoundTrip(req)
	}
	if err := ValidateClusterName(cluster); err != nil {
		closeBody(req)
		return nil, fmt.Errorf("multicluster: %w", err)
	}
	tail, okPath := trimPathPrefix(req.URL.Path, rt.prefix)
	rawTail, okRaw := trimPathPrefix(req.URL.EscapedPath(), rt.rawPrefix)
	if !okPath || !okRaw {
		closeBody(req)
		return nil, fmt.Errorf("multicluster: request path %q is outside the hub path prefix %q", req.URL.EscapedPath(), rt.rawPrefix)
	}
	// A RoundTripper must not modify the request it was given.
	out := req.Clone(req.Context())
	proxy := ProxyPath(cluster)
	out.URL.Path = rt.prefix + proxy + tail
	out.URL.RawPath = ""
	// Keep the escaping of the original path (%2F stays %2F) where it differs
	// from the default one.
	if raw := rt.rawPrefix + proxy + rawTail; raw != out.URL.EscapedPath() {
		out.URL.RawPath = raw
	}
	return rt.next.RoundTrip(out)
}

// WrappedRoundTripper implements utilnet.RoundTripperWrapper.
func (rt *routingRoundTripper) WrappedRoundTripper() http.RoundTripper { return rt.next }

// trimPathPrefix removes prefix from p when p is prefix or lies below it.
func trimPathPrefix(p, prefix string) (string, bool) {
	if prefix == "" {
		return p, true
	}
	if p == prefix {
		return "", true
	}
	if strings.HasPrefix(p, prefix+"/") {
		return p[len(prefix):], true
	}
	return "", false
}

// closeBody honours the RoundTripper contract: the body is closed even on error.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
