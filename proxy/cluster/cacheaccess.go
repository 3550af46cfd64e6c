package cluster

import (
	"net/http"
	"net/url"

	corev1 "k8s.io/api/core/v1"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/konnectivity"
	"github.com/kubewharf/kube-gateway/proxy/transport"
)

// CacheAccess is how the gateway's cache reaches a member: the enabled
// servers, each with a round tripper that carries the cache identity of
// spec.clientConfig.cacheSecretRef (never the impersonating credential) the
// way requests go (directly, through the egress proxy or the konnectivity
// tunnel).
type CacheAccess struct {
	Servers []*url.URL
	// Transports[i] carries the requests to Servers[i].
	Transports []http.RoundTripper
	closers    []*transport.Transports
	tunnel     *konnectivity.Dialer
}

// CompileCacheAccess builds the CacheAccess of uc with cacheSecret, the
// Secret of spec.clientConfig.cacheSecretRef (nil when it does not exist),
// and tunnelSecret, that of spec.clientConfig.konnectivity. Errors are
// *ConfigError naming the Secret or field to fix.
func CompileCacheAccess(uc *gatewayv1alpha1.UpstreamCluster, cacheSecret, tunnelSecret *corev1.Secret) (*CacheAccess, error) {
	ref := uc.Spec.ClientConfig.CacheSecretRef
	if ref == nil {
		return nil, configError(ReasonInvalidConfiguration, "spec.clientConfig.cacheSecretRef is not set")
	}
	if cacheSecret == nil {
		return nil, configError(ReasonSecretNotFound, "its cache Secret %s/%s (spec.clientConfig.cacheSecretRef) was not found on the hub", ref.Namespace, ref.Name)
	}
	cfg, err := transportConfig(uc, cacheSecret)
	if err != nil {
		return nil, err
	}
	a := &CacheAccess{}
	if k := uc.Spec.ClientConfig.Konnectivity; k != nil {
		tc, err := tunnelConfig(k, tunnelSecret)
		if err != nil {
			return nil, err
		}
		if a.tunnel, err = konnectivity.New(tc); err != nil {
			return nil, configError(ReasonInvalidSecret, "konnectivity Secret %s/%s: %v", tunnelSecret.Namespace, tunnelSecret.Name, err)
		}
		cfg.Dial = a.tunnel.DialContext
	}
	b, err := transport.NewBuilder(cfg)
	if err != nil {
		a.Close()
		return nil, configError(ReasonInvalidSecret, "cache Secret %s/%s: %v", cacheSecret.Namespace, cacheSecret.Name, err)
	}
	for _, s := range uc.Spec.Servers {
		if s.Disabled {
			continue
		}
		u, err := url.Parse(s.Endpoint)
		if err != nil {
			a.Close()
			return nil, configError(ReasonInvalidConfiguration, "server %q: %v", s.Endpoint, err)
		}
		t := b.New()
		a.Servers = append(a.Servers, u)
		// Probe: the credential of the Secret, no impersonation.
		a.Transports = append(a.Transports, t.Probe)
		a.closers = append(a.closers, t)
	}
	return a, nil
}

// Close releases the connections and the tunnel of a.
func (a *CacheAccess) Close() {
	for _, t := range a.closers {
		t.CloseIdleConnections()
	}
	if a.tunnel != nil {
		a.tunnel.Retire()
	}
}
