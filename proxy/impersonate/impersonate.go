// Package impersonate decides which identity the gateway impersonates on a member
// for a hub user, and removes from a proxied request everything a client sent that
// carries identity or credentials.
package impersonate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/transport"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// Policy is a compiled spec.impersonation: immutable, safe for concurrent use.
type Policy struct {
	userPrefix, groupPrefix string
	groups, extras          nameFilter
}

// Compile turns an UpstreamCluster's impersonation policy into a Policy; nil
// means the member sees the hub user as is.
func Compile(p *gatewayv1alpha1.ImpersonationPolicy) *Policy {
	if p == nil {
		return &Policy{}
	}
	return &Policy{
		userPrefix:  p.UserPrefix,
		groupPrefix: p.GroupPrefix,
		groups:      compileFilter(p.Groups),
		extras:      compileFilter(p.Extras),
	}
}

// Identity returns the identity to impersonate on the member for the hub user u.
func (p *Policy) Identity(u user.Info) transport.ImpersonationConfig {
	cfg := transport.ImpersonationConfig{
		UserName: p.userPrefix + u.GetName(),
		UID:      u.GetUID(),
	}
	for _, g := range u.GetGroups() {
		if p.groups.keeps(g) {
			cfg.Groups = append(cfg.Groups, p.groupPrefix+g)
		}
	}
	for k, v := range u.GetExtra() {
		if p.extras.keeps(k) && len(v) > 0 {
			if cfg.Extra == nil {
				cfg.Extra = map[string][]string{}
			}
			cfg.Extra[k] = v
		}
	}
	return cfg
}

type nameFilter struct {
	allow sets.Set[string] // nil: all
	deny  sets.Set[string]
}

func compileFilter(f *gatewayv1alpha1.NameFilter) nameFilter {
	if f == nil {
		return nameFilter{}
	}
	var nf nameFilter
	if len(f.Allow) > 0 {
		nf.allow = sets.New(f.Allow...)
	}
	nf.deny = sets.New(f.Deny...)
	return nf
}

func (f nameFilter) keeps(name string) bool {
	return (f.allow == nil || f.allow.Has(name)) && !f.deny.Has(name)
}

// Headers a client may send that carry identity or credentials. None of them may
// reach a member: the member must only see the gateway's own credential and the
// impersonation headers the gateway sets.
var credentialHeaders = sets.New("Authorization", "Proxy-Authorization", "Cookie")

var credentialHeaderPrefixes = []string{"Impersonate-", "X-Remote-"}

// StripInbound removes credential and identity headers from h, in place, whatever
// the letter case of their keys.
func StripInbound(h http.Header) {
	for name := range h {
		if isCredentialHeader(textproto.CanonicalMIMEHeaderKey(name)) {
			delete(h, name)
		}
	}
}

func isCredentialHeader(canonical string) bool {
	if credentialHeaders.Has(canonical) {
		return true
	}
	for _, prefix := range credentialHeaderPrefixes {
		if strings.HasPrefix(canonical, prefix) {
			return true
		}
	}
	return false
}

type identityKey struct{}

// WithIdentity returns a context carrying the identity to impersonate on the
// member; the round tripper of NewRoundTripper reads it.
func WithIdentity(ctx context.Context, id transport.ImpersonationConfig) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// NewRoundTripper returns a round tripper that impersonates, on every request, the
// identity of the request's context, and refuses requests without one: nothing
// reaches a member with the gateway's own identity by accident.
//
// The headers are set here, in the transport, after the reverse proxy removed
// hop-by-hop headers: a client naming Impersonate-User in its Connection header
// cannot make them disappear.
func NewRoundTripper(delegate http.RoundTripper) http.RoundTripper {
	return &roundTripper{delegate: delegate}
}

type roundTripper struct {
	delegate http.RoundTripper
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	id, _ := req.Context().Value(identityKey{}).(transport.ImpersonationConfig)
	if hasImpersonation(req.Header) {
		req = utilnet.CloneRequest(req) // Apply drops stray headers in place
	}
	out, err := Apply(req, id)
	if err != nil {
		return nil, err
	}
	return rt.delegate.RoundTrip(out)
}

// Apply returns a copy of req that impersonates id, with the headers
// client-go's impersonating round tripper sets (so that the escaping of extra
// keys is exactly what a member apiserver expects) and no other Impersonate-*
// header: stray ones are deleted from req's headers in place, so req must be
// the caller's own (the forwarder's copy of the client's request). It refuses
// an empty identity: nothing reaches a member with the gateway's own identity
// by accident.
func Apply(req *http.Request, id transport.ImpersonationConfig) (*http.Request, error) {
	if id.UserName == "" {
		return nil, ErrNoIdentity
	}
	// client-go's round tripper leaves a request that already has
	// Impersonate-User alone: drop stray headers first (the forwarder has
	// stripped the client's; this is defence in depth).
	for name := range req.Header {
		if isImpersonation(name) {
			delete(req.Header, name)
		}
	}
	var out *http.Request
	_, _ = transport.NewImpersonatingRoundTripper(id, capture{&out}).RoundTrip(req)
	if out == nil {
		return nil, fmt.Errorf("impersonation headers could not be set")
	}
	return out, nil
}

// ErrNoIdentity refuses a request that would reach a member with the gateway's
// own identity.
var ErrNoIdentity = errors.New("refusing to forward a request without an identity to impersonate")

// capture is the end of a round-tripper chain that keeps the request it is
// given instead of sending it.
type capture struct{ out **http.Request }

func (c capture) RoundTrip(req *http.Request) (*http.Response, error) {
	*c.out = req
	return nil, nil
}

// WrappedRoundTripper lets apimachinery find the dialer and TLS configuration
// underneath (upgrades dial themselves).
func (rt *roundTripper) WrappedRoundTripper() http.RoundTripper { return rt.delegate }

func isImpersonation(name string) bool {
	return strings.HasPrefix(textproto.CanonicalMIMEHeaderKey(name), "Impersonate-")
}

func hasImpersonation(h http.Header) bool {
	for name := range h {
		if isImpersonation(name) {
			return true
		}
	}
	return false
}
