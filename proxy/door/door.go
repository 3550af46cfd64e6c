// Package door is the member door: a listener of its own where a member
// cluster's own clients (kubelets, controllers, kubectl with the member's
// credentials) reach that member through the gateway, by a host name of its
// spec.secureServing. The TLS server name (SNI) picks the cluster and its
// serving certificate; the client is authenticated against that member only
// (a client certificate verified by the CA of the cluster's door Secret, or
// a bearer token the member's TokenReview accepts) and the request goes to the data plane's entry (proxy/handler) as that
// identity, which the gateway impersonates: the member authorizes, the
// gateway does not. A name no cluster serves, a client without SNI, a Host
// naming another name: a clear error, never another cluster's answer.
package door

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/utils/clock"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/certcache"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/memberauthz"
)

// Keys of the door Secret.
const (
	CertKey     = corev1.TLSCertKey       // the serving certificate (chain)
	KeyKey      = corev1.TLSPrivateKeyKey // its key
	ClientCAKey = "ca.crt"                // CAs that verify client certificates
)

// verifiedConnections bounds the client certificates a door remembers as
// verified: about one per live client connection; past it a new connection
// verifies once more.
const verifiedConnections = 4096

// Door is one cluster's member door, compiled from spec.secureServing and
// its Secret; immutable but for its client CAs when they are the member's
// (Run keeps them current).
type Door struct {
	// Cluster is the UpstreamCluster the door serves.
	Cluster string
	// ServerNames are the names it is served under.
	ServerNames []string

	// tls serves the door's names: its certificate, client certificates
	// requested but verified per request (verify), so that a bad one gets a
	// 401 Status rather than a TLS alert.
	tls *tls.Config
	// clientCAs verify client certificates; nil until the member's are read
	// (spec.secureServing.clientCA Member), with memberCA telling why not.
	clientCAs atomic.Pointer[x509.CertPool]
	memberCA  *memberCA
	// verified remembers the client certificates that verified, per
	// connection (a connection's requests share its parsed certificate).
	verified *certcache.Cache
	// tokens authenticates bearer tokens by the member's TokenReviews.
	tokens authenticator.Token
	// impersonation decides a client's own Impersonate-* headers by the
	// member's SubjectAccessReviews.
	impersonation *memberauthz.Authorizer
}

// Compile builds the door of uc, compiled as c, from secret (nil when the
// Secret does not exist); nil without error when uc has no door.
func Compile(uc *gatewayv1alpha1.UpstreamCluster, secret *corev1.Secret, c *cluster.Cluster, o Options) (*Door, error) {
	ss := uc.Spec.SecureServing
	if ss == nil {
		return nil, nil
	}
	ref := ss.SecretRef
	if secret == nil {
		return nil, &cluster.ConfigError{Reason: cluster.ReasonSecretNotFound,
			Err: fmt.Errorf("its member-door Secret %s/%s was not found on the hub", ref.Namespace, ref.Name)}
	}
	cert, err := tls.X509KeyPair(secret.Data[CertKey], secret.Data[KeyKey])
	if err != nil {
		return nil, &cluster.ConfigError{Reason: cluster.ReasonInvalidSecret,
			Err: fmt.Errorf("member-door Secret %s/%s: keys %s and %s: %v", ref.Namespace, ref.Name, CertKey, KeyKey, err)}
	}
	fromMember := ss.ClientCA == gatewayv1alpha1.ClientCAFromMember
	secretCAs := secret.Data[ClientCAKey]
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(secretCAs) && (len(secretCAs) > 0 || !fromMember) {
		return nil, &cluster.ConfigError{Reason: cluster.ReasonInvalidSecret,
			Err: fmt.Errorf("member-door Secret %s/%s: key %s holds no PEM certificate: the member's client CA, which verifies its clients' certificates (or set spec.secureServing.clientCA: Member)", ref.Namespace, ref.Name, ClientCAKey)}
	}
	d := &Door{
		Cluster:     uc.Name,
		ServerNames: slices.Clone(ss.ServerNames),
		tls: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			NextProtos:   nextProtos,
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.RequestClientCert,
		},
		verified: certcache.New(verifiedConnections, clock.RealClock{}),
		tokens:   newTokenAuthenticator(c, ss.TokenReview, o),
	}
	if c != nil {
		d.impersonation = c.Authorizer
	}
	if fromMember {
		d.memberCA = &memberCA{cluster: c, secretCAs: secretCAs}
	} else {
		d.clientCAs.Store(pool)
	}
	return d, nil
}

// Run keeps the door's client CAs current while ctx lasts, when they are
// the member's own; otherwise it returns at once.
func (d *Door) Run(ctx context.Context) {
	if d.memberCA != nil {
		d.memberCA.run(ctx, &d.clientCAs)
	}
}
