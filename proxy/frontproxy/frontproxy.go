// Package frontproxy authenticates requests that the hub's front proxy (its
// aggregator) forwards, like k8s.io/apiserver's request-header authenticator,
// but verifies each front-proxy client certificate once instead of on every
// request.
//
// The hub sends thousands of requests over one connection with the same client
// certificate; the library checks its chain (a public-key signature check per
// certificate) for each of them (BenchmarkTrusted; docs/benchmark-history.md).
// A verified
// certificate is remembered by identity, for as long as the request-header CA
// bundle is the same and the verified chain is within its validity period: the
// TLS stack parses a connection's certificates once, at its handshake, and
// every request of the connection carries the same *x509.Certificate, which
// nothing modifies; the same certificate against the same roots at a time
// inside that period gives the same answer. So a connection's certificate is
// verified at its first request, and its other requests cost a map lookup
// without hashing or locking (the entry decision and the authenticator both
// ask, on every request). Possession of the certificate's key is proven by the
// TLS handshake of every connection, as before.
//
// The same verification tells the entry decision (proxy/chain) whether a
// request comes from the front proxy at all: by default the gateway serves its
// API only to such requests.
package frontproxy

import (
	"errors"
	"net/http"

	"github.com/kubewharf/kube-gateway/proxy/certcache"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/request/union"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/utils/clock"
)

// cacheSize bounds the remembered certificates, one per connection of the hub:
// a few long-lived HTTP/2 connections per hub apiserver, and one for each open
// exec, attach or port-forward (upgrades use HTTP/1.1). When it is reached the
// cache starts over; a connection's next request verifies its certificate
// again.
const cacheSize = 64

// WithCachedVerification returns an authenticator that first tries the
// request-header authentication described by rh with verified certificates
// remembered, and otherwise (no client certificate, one that does not verify,
// a name that is not allowed, no user header) runs full, the server's complete
// authenticator, which then verifies again and reports the error as before.
// Without request-header authentication (nil rh or full), full is returned
// unchanged.
func WithCachedVerification(rh *authenticatorfactory.RequestHeaderConfig, full authenticator.Request) authenticator.Request {
	return NewVerifier(rh).Authenticator(full)
}

// Verifier verifies the front proxy's client certificates, remembering those
// that verified. One Verifier serves both the authenticator and the entry
// decision (FromFrontProxy), so a certificate is verified once for both.
type Verifier struct {
	v *verifier
}

// NewVerifier returns a Verifier for the request-header authentication that rh
// describes; nil without one (nothing then comes from a front proxy).
func NewVerifier(rh *authenticatorfactory.RequestHeaderConfig) *Verifier {
	if rh == nil {
		return nil
	}
	return newVerifier(rh, clock.RealClock{})
}

func newVerifier(rh *authenticatorfactory.RequestHeaderConfig, clk clock.PassiveClock) *Verifier {
	return &Verifier{v: &verifier{
		verifyOptions:   rh.CAContentProvider.VerifyOptions,
		allowedNames:    rh.AllowedClientNames,
		usernameHeaders: rh.UsernameHeaders,
		headers:         headerrequest.NewDynamic(rh.UsernameHeaders, rh.UIDHeaders, rh.GroupHeaders, rh.ExtraHeaderPrefixes),
		verified:        certcache.New(cacheSize, clk),
	}}
}

// Authenticator returns the authenticator described at WithCachedVerification:
// full, preceded by the cached request-header authentication. A nil Verifier
// or full returns full.
func (v *Verifier) Authenticator(full authenticator.Request) authenticator.Request {
	if v == nil || full == nil {
		return full
	}
	// full adds system:authenticated to its own users; the group adder does the
	// same for users of the fast path and leaves full's alone.
	return group.NewAuthenticatedGroupAdder(union.New(v.v, full))
}

// FromFrontProxy tells whether req comes from the front proxy: a client
// certificate that verifies against the request-header CA, with an allowed
// name, and a user in a username header. These are the conditions under which
// the request-header authentication (the first step of Authenticator)
// authenticates req, so a request for which it is true is authenticated as the
// user the front proxy names. It does not authenticate: the headers stay for
// the authenticator, which reads and clears them. A nil Verifier says false.
func (v *Verifier) FromFrontProxy(req *http.Request) bool {
	if v == nil || !v.v.trusted(req) {
		return false
	}
	for _, name := range v.v.usernameHeaders.Value() {
		if req.Header.Get(name) != "" {
			return true
		}
	}
	return false
}

// Trusted tells whether req came over a connection that presented a verified
// front-proxy client certificate: it is the hub's front proxy that sends req
// and passes its response on. Unlike FromFrontProxy it still holds after
// authentication cleared the username headers. A nil Verifier says false.
func (v *Verifier) Trusted(req *http.Request) bool {
	return v != nil && v.v.trusted(req)
}

// Loaded returns an error until the request-header CA bundle is loaded. The
// bundle kept in the hub's kube-system/extension-apiserver-authentication
// ConfigMap arrives with that ConfigMap's informer, after the server starts
// serving; until then no front-proxy certificate verifies and every request
// through the hub would get 401, so the server is not ready. A nil Verifier has
// nothing to load.
func (v *Verifier) Loaded() error {
	if v == nil {
		return nil
	}
	if _, ok := v.v.verifyOptions(); !ok {
		return errors.New("the hub's front-proxy CA bundle (requestheader-client-ca-file) is not loaded yet")
	}
	return nil
}

type verifier struct {
	verifyOptions   x509request.VerifyOptionFunc
	allowedNames    headerrequest.StringSliceProvider
	usernameHeaders headerrequest.StringSliceProvider
	headers         authenticator.Request
	verified        *certcache.Cache
}

// AuthenticateRequest implements authenticator.Request. It never returns an
// error: failures are left to the full authenticator, which reports them.
func (v *verifier) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	if !v.trusted(req) {
		return nil, false, nil
	}
	return v.headers.AuthenticateRequest(req)
}

// trusted tells whether req carries a client certificate that verifies
// against the request-header CA and has an allowed name.
func (v *verifier) trusted(req *http.Request) bool {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
		return false
	}
	opts, ok := v.verifyOptions()
	if !ok {
		return false
	}
	return v.verified.Verify(req.TLS.PeerCertificates, opts) == nil && v.allowed(req.TLS.PeerCertificates[0].Subject.CommonName)
}

// allowed applies the allowed client names, read on every request because the
// hub can change them.
func (v *verifier) allowed(commonName string) bool {
	names := v.allowedNames.Value()
	if len(names) == 0 {
		return true
	}
	for _, name := range names {
		if name == commonName {
			return true
		}
	}
	return false
}
