// Package cluster holds a compiled member cluster: what a proxied request needs,
// built once per UpstreamCluster generation and Secret version, immutable after.
package cluster

import (
	"fmt"
	"net/url"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/impersonate"
	"github.com/kubewharf/kube-gateway/proxy/transport"
)

// Keys of the credential Secret.
const (
	SecretKeyToken   = "token"
	SecretKeyTLSCert = corev1.TLSCertKey       // tls.crt
	SecretKeyTLSKey  = corev1.TLSPrivateKeyKey // tls.key
	SecretKeyCA      = "ca.crt"
)

// Cluster is a compiled member cluster.
type Cluster struct {
	Name string
	// Endpoints are the enabled servers, in spec order.
	Endpoints []*url.URL
	// Transports toward the servers, with the gateway's credential.
	Transports *transport.Transports
	// Impersonation maps the hub user to the member identity.
	Impersonation *impersonate.Policy

	next atomic.Uint64
}

// Compile builds the runtime form of uc with the credential in secret.
func Compile(uc *gatewayv1alpha1.UpstreamCluster, secret *corev1.Secret) (*Cluster, error) {
	c := &Cluster{Name: uc.Name, Impersonation: impersonate.Compile(uc.Spec.Impersonation)}
	for _, s := range uc.Spec.Servers {
		if s.Disabled {
			continue
		}
		u, err := url.Parse(s.Endpoint)
		if err != nil {
			return nil, fmt.Errorf("server %q: %v", s.Endpoint, err)
		}
		c.Endpoints = append(c.Endpoints, u)
	}
	cfg, err := transportConfig(uc, secret)
	if err != nil {
		return nil, err
	}
	if c.Transports, err = transport.New(cfg); err != nil {
		return nil, fmt.Errorf("credential Secret %s/%s: %v", secret.Namespace, secret.Name, err)
	}
	return c, nil
}

func transportConfig(uc *gatewayv1alpha1.UpstreamCluster, secret *corev1.Secret) (transport.Config, error) {
	cc := uc.Spec.ClientConfig
	cfg := transport.Config{ServerName: cc.ServerName, Insecure: cc.Insecure}
	// Both sources of CA certificates are trusted: a CA rotation can publish the
	// new CA in one before the old one leaves the other.
	cfg.CAData = append(append(append([]byte{}, cc.CAData...), '\n'), secret.Data[SecretKeyCA]...)
	if len(cc.CAData) == 0 && len(secret.Data[SecretKeyCA]) == 0 {
		cfg.CAData = nil
	}
	token, crt, key := secret.Data[SecretKeyToken], secret.Data[SecretKeyTLSCert], secret.Data[SecretKeyTLSKey]
	switch {
	case len(token) > 0 && (len(crt) > 0 || len(key) > 0):
		return cfg, fmt.Errorf("credential Secret %s/%s has both %q and %q/%q: keep exactly one credential",
			secret.Namespace, secret.Name, SecretKeyToken, SecretKeyTLSCert, SecretKeyTLSKey)
	case len(token) > 0:
		cfg.BearerToken = string(token)
	case len(crt) > 0 && len(key) > 0:
		cfg.CertData, cfg.KeyData = crt, key
	default:
		return cfg, fmt.Errorf("credential Secret %s/%s has no credential: set %q, or %q and %q",
			secret.Namespace, secret.Name, SecretKeyToken, SecretKeyTLSCert, SecretKeyTLSKey)
	}
	return cfg, nil
}

// Pick returns the server for the next request, round robin over the enabled
// servers; nil when none is enabled.
func (c *Cluster) Pick() *url.URL {
	if len(c.Endpoints) == 0 {
		return nil
	}
	return c.Endpoints[(c.next.Add(1)-1)%uint64(len(c.Endpoints))]
}

// Release closes the idle connections of a cluster that was replaced or deleted;
// requests in flight finish.
func (c *Cluster) Release() {
	c.Transports.CloseIdleConnections()
}
