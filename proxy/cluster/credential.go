package cluster

import (
	"crypto/tls"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/cert"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1/validation"
	"github.com/kubewharf/kube-gateway/proxy/konnectivity"
	"github.com/kubewharf/kube-gateway/proxy/transport"
)

// Keys of the credential Secret.
const (
	SecretKeyToken   = "token"
	SecretKeyTLSCert = corev1.TLSCertKey       // tls.crt
	SecretKeyTLSKey  = corev1.TLSPrivateKeyKey // tls.key
	SecretKeyCA      = "ca.crt"
	// Credentials toward spec.clientConfig.proxyURL, both or neither, and CAs
	// trusted, besides the host's roots, for an https proxy.
	SecretKeyProxyUsername = "proxy-username"
	SecretKeyProxyPassword = "proxy-password"
	SecretKeyProxyCA       = "proxy-ca.crt"
)

// transportConfig reads the gateway's credential toward the member from its
// Secret and the connection settings from spec.clientConfig. Problems are
// ConfigErrors whose messages name the Secret and the key, never the data.
func transportConfig(uc *gatewayv1alpha1.UpstreamCluster, secret *corev1.Secret) (transport.Config, error) {
	cc := uc.Spec.ClientConfig
	cfg := transport.Config{ServerName: cc.ServerName, Insecure: cc.Insecure}
	secretCA, hasCA := secret.Data[SecretKeyCA]
	if hasCA && len(secretCA) == 0 {
		return cfg, configError(ReasonInvalidCAData, "%q of credential Secret %s/%s is empty: put the member's CA bundle (PEM) in it, or remove the key",
			SecretKeyCA, secret.Namespace, secret.Name)
	}
	// Checked here so that the problem is named; the messages never repeat the
	// data (x509 errors do not either).
	if len(cc.CAData) > 0 {
		if _, err := cert.ParseCertsPEM(cc.CAData); err != nil {
			return cfg, configError(ReasonInvalidCAData, "spec.clientConfig.caData is not a PEM bundle of certificates: %v", err)
		}
	}
	if len(secretCA) > 0 {
		if _, err := cert.ParseCertsPEM(secretCA); err != nil {
			return cfg, configError(ReasonInvalidCAData, "%q of credential Secret %s/%s is not a PEM bundle of certificates: %v",
				SecretKeyCA, secret.Namespace, secret.Name, err)
		}
		if cc.Insecure {
			return cfg, configError(ReasonInvalidConfiguration, "spec.clientConfig.insecure is true but credential Secret %s/%s has %q: "+
				"certificate verification is either on or off; remove one of them", secret.Namespace, secret.Name, SecretKeyCA)
		}
	}
	// Both sources of CA certificates are trusted: a CA rotation can publish the
	// new CA in one before the old one leaves the other.
	cfg.CAData = append(append(append([]byte{}, cc.CAData...), '\n'), secretCA...)
	if len(cc.CAData) == 0 && len(secretCA) == 0 {
		cfg.CAData = nil
	}
	if err := proxyConfig(&cfg, cc.ProxyURL, secret); err != nil {
		return cfg, err
	}
	for _, k := range []string{SecretKeyToken, SecretKeyTLSCert, SecretKeyTLSKey} {
		if v, ok := secret.Data[k]; ok && len(v) == 0 {
			return cfg, configError(ReasonInvalidSecret, "%q of credential Secret %s/%s is empty: set it, or remove the key",
				k, secret.Namespace, secret.Name)
		}
	}
	token, crt, key := secret.Data[SecretKeyToken], secret.Data[SecretKeyTLSCert], secret.Data[SecretKeyTLSKey]
	switch {
	case len(token) > 0 && (len(crt) > 0 || len(key) > 0):
		return cfg, configError(ReasonInvalidSecret, "credential Secret %s/%s has both %q and %q/%q: keep exactly one credential",
			secret.Namespace, secret.Name, SecretKeyToken, SecretKeyTLSCert, SecretKeyTLSKey)
	case len(token) > 0:
		cfg.BearerToken = string(token)
	case len(crt) > 0 && len(key) > 0:
		if _, err := tls.X509KeyPair(crt, key); err != nil {
			return cfg, configError(ReasonInvalidSecret, "credential Secret %s/%s: %q and %q are not a usable certificate and key: %v",
				secret.Namespace, secret.Name, SecretKeyTLSCert, SecretKeyTLSKey, err)
		}
		cfg.CertData, cfg.KeyData = crt, key
	default:
		return cfg, configError(ReasonInvalidSecret, "credential Secret %s/%s has no credential: set %q, or %q and %q",
			secret.Namespace, secret.Name, SecretKeyToken, SecretKeyTLSCert, SecretKeyTLSKey)
	}
	return cfg, nil
}

// tunnelConfig reads the gateway's client certificate toward the konnectivity
// server of spec.clientConfig.konnectivity from its Secret.
func tunnelConfig(k *gatewayv1alpha1.KonnectivityConfig, secret *corev1.Secret) (konnectivity.Config, error) {
	cfg := konnectivity.Config{Addresses: k.Addresses, ServerName: k.ServerName}
	if k.Address != "" {
		cfg.Addresses = []string{k.Address}
	}
	if secret == nil {
		return cfg, configError(ReasonSecretNotFound, "its konnectivity Secret %s/%s (spec.clientConfig.konnectivity.secretRef) was not found on the hub",
			k.SecretRef.Namespace, k.SecretRef.Name)
	}
	for _, key := range []string{SecretKeyTLSCert, SecretKeyTLSKey, SecretKeyCA} {
		if len(secret.Data[key]) == 0 {
			return cfg, configError(ReasonInvalidSecret, "konnectivity Secret %s/%s has no %q: it needs %q and %q (the gateway's client certificate toward the konnectivity server) and %q (the CA of the konnectivity server's certificate)",
				secret.Namespace, secret.Name, key, SecretKeyTLSCert, SecretKeyTLSKey, SecretKeyCA)
		}
	}
	cfg.CertData, cfg.KeyData, cfg.CAData = secret.Data[SecretKeyTLSCert], secret.Data[SecretKeyTLSKey], secret.Data[SecretKeyCA]
	if _, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData); err != nil {
		return cfg, configError(ReasonInvalidSecret, "konnectivity Secret %s/%s: %q and %q are not a usable certificate and key: %v",
			secret.Namespace, secret.Name, SecretKeyTLSCert, SecretKeyTLSKey, err)
	}
	if _, err := cert.ParseCertsPEM(cfg.CAData); err != nil {
		return cfg, configError(ReasonInvalidCAData, "%q of konnectivity Secret %s/%s is not a PEM bundle of certificates: %v",
			SecretKeyCA, secret.Namespace, secret.Name, err)
	}
	return cfg, nil
}

// proxyConfig sets the egress proxy of cfg from spec.clientConfig.proxyURL and
// its credentials from the Secret. Without a proxy URL the proxy keys are
// ignored.
func proxyConfig(cfg *transport.Config, proxyURL string, secret *corev1.Secret) error {
	if proxyURL == "" {
		return nil
	}
	// Validation checked the URL; an object written past it is named here.
	if err := validation.ValidateProxyURL(proxyURL); err != nil {
		return configError(ReasonInvalidConfiguration, "spec.clientConfig.proxyURL %v", err)
	}
	u, err := url.Parse(proxyURL)
	if err != nil {
		return configError(ReasonInvalidConfiguration, "spec.clientConfig.proxyURL: %v", err)
	}
	cfg.ProxyURL = u
	for _, k := range []string{SecretKeyProxyUsername, SecretKeyProxyPassword, SecretKeyProxyCA} {
		if v, ok := secret.Data[k]; ok && len(v) == 0 {
			return configError(ReasonInvalidSecret, "%q of credential Secret %s/%s is empty: set it, or remove the key",
				k, secret.Namespace, secret.Name)
		}
	}
	user, password := secret.Data[SecretKeyProxyUsername], secret.Data[SecretKeyProxyPassword]
	if (len(user) > 0) != (len(password) > 0) {
		return configError(ReasonInvalidSecret, "credential Secret %s/%s has only one of %q and %q: the proxy's credentials need both",
			secret.Namespace, secret.Name, SecretKeyProxyUsername, SecretKeyProxyPassword)
	}
	cfg.ProxyUsername, cfg.ProxyPassword = string(user), string(password)
	if ca := secret.Data[SecretKeyProxyCA]; len(ca) > 0 {
		if _, err := cert.ParseCertsPEM(ca); err != nil {
			return configError(ReasonInvalidCAData, "%q of credential Secret %s/%s is not a PEM bundle of certificates: %v",
				SecretKeyProxyCA, secret.Namespace, secret.Name, err)
		}
		if u.Scheme != "https" {
			return configError(ReasonInvalidConfiguration, "credential Secret %s/%s has %q but spec.clientConfig.proxyURL is not an https URL: "+
				"remove the key, or use an https proxy", secret.Namespace, secret.Name, SecretKeyProxyCA)
		}
		cfg.ProxyCAData = ca
	}
	return nil
}
