// Package impersonate decides which identity the gateway impersonates on a member
// for a hub user, and removes from a proxied request everything a client sent that
// carries identity or credentials.
package impersonate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

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

// AsIs impersonates a user as it is: its name, groups, UID and extras.
var AsIs = &Policy{}

// Compile turns an UpstreamCluster's impersonation policy into a Policy; nil
// means the member sees the hub user as is.
func Compile(p *gatewayv1alpha1.ImpersonationPolicy) *Policy {
	if p == nil {
		return AsIs
	}
	return &Policy{
		userPrefix:  p.UserPrefix,
		groupPrefix: p.GroupPrefix,
		groups:      compileFilter(p.Groups),
		extras:      compileFilter(p.Extras),
	}
}

// Identity returns the identity to impersonate on the member for the hub user
// u. Without a prefix or filter to apply, it shares u's groups and extras
// rather than copying them for every request: neither side changes them.
func (p *Policy) Identity(u user.Info) transport.ImpersonationConfig {
	cfg := transport.ImpersonationConfig{
		UserName: p.userPrefix + u.GetName(),
		UID:      u.GetUID(),
	}
	if groups := u.GetGroups(); p.groupPrefix == "" && p.groups.keepsAll() {
		cfg.Groups = groups
	} else {
		for _, g := range groups {
			if p.groups.keeps(g) {
				cfg.Groups = append(cfg.Groups, p.groupPrefix+g)
			}
		}
	}
	extra := u.GetExtra()
	if p.extras.keepsAll() && !hasEmpty(extra) {
		if len(extra) > 0 {
			cfg.Extra = extra
		}
		return cfg
	}
	for k, v := range extra {
		if p.extras.keeps(k) && len(v) > 0 {
			if cfg.Extra == nil {
				cfg.Extra = map[string][]string{}
			}
			cfg.Extra[k] = v
		}
	}
	return cfg
}

func hasEmpty(extra map[string][]string) bool {
	for _, v := range extra {
		if len(v) == 0 {
			return true
		}
	}
	return false
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

func (f nameFilter) keepsAll() bool { return f.allow == nil && len(f.deny) == 0 }

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
	if id.UserName == "" {
		return nil, ErrNoIdentity
	}
	// Apply sets the headers in place; a round tripper must not change its
	// caller's request.
	out, err := Apply(utilnet.CloneRequest(req), id)
	if err != nil {
		return nil, err
	}
	return rt.delegate.RoundTrip(out)
}

// Apply returns req, or a copy of it, with the headers that impersonate id,
// exactly as client-go's impersonating round tripper sets them (through it),
// and no other Impersonate-* header: stray ones are deleted from req's
// headers in place, so req must be the caller's own (the forwarder's copy of
// the client's request). It refuses an empty identity: nothing reaches a
// member with the gateway's own identity by accident.
func Apply(req *http.Request, id transport.ImpersonationConfig) (*http.Request, error) {
	return (*Headers)(nil).Apply(req, id)
}

// Headers sets impersonation headers as Apply does, without its copy of the
// request: it remembers the header name client-go's round tripper gives each
// extra key (escaped, so that a member apiserver reads the key back), and
// sets the headers on req itself. A proxied request's identity usually has
// extras (a service account's token gives them), and the copy cost a request
// and its headers per request. The zero value is ready; a nil *Headers goes
// through client-go's round tripper every time. Safe for concurrent use.
type Headers struct {
	mu    sync.Mutex                        // serializes additions to names
	names atomic.Pointer[map[string]string] // extra key → header name; replaced whole, never changed
}

// maxExtraNames bounds the extra keys a Headers remembers; the identities of
// a hub carry a handful. Others go through client-go's round tripper.
const maxExtraNames = 64

// Apply is the package's Apply, without a copy of req when every extra key
// of id has a remembered header name.
func (h *Headers) Apply(req *http.Request, id transport.ImpersonationConfig) (*http.Request, error) {
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
	if len(id.Extra) > 0 && (h == nil || !h.learn(id.Extra)) {
		if out := throughClientGo(req, id); out != nil {
			return out, nil
		}
		return nil, fmt.Errorf("impersonation headers could not be set")
	}
	// What client-go's round tripper sets. The values are shared with id,
	// clipped: a later Add appends to a copy, never into id's arrays.
	req.Header[transport.ImpersonateUserHeader] = []string{id.UserName}
	if id.UID != "" {
		req.Header[transport.ImpersonateUIDHeader] = []string{id.UID}
	}
	if len(id.Groups) > 0 {
		req.Header[transport.ImpersonateGroupHeader] = slices.Clip(id.Groups)
	}
	if len(id.Extra) > 0 {
		names := *h.names.Load()
		for k, vv := range id.Extra {
			if len(vv) == 0 {
				continue
			}
			name := names[k]
			if cur, ok := req.Header[name]; ok { // two keys that escape alike
				req.Header[name] = append(cur, vv...)
			} else {
				req.Header[name] = slices.Clip(vv)
			}
		}
	}
	return req, nil
}

// learn makes sure h knows the header name of every key of extra, and
// reports whether it does.
func (h *Headers) learn(extra map[string][]string) bool {
	if names := h.names.Load(); names != nil && knowsAll(*names, extra) {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	old := map[string]string{}
	if names := h.names.Load(); names != nil {
		old = *names
	}
	learned := maps.Clone(old)
	for k := range extra {
		if _, ok := learned[k]; ok {
			continue
		}
		if len(learned) == maxExtraNames {
			return false
		}
		name, ok := extraHeaderName(k)
		if !ok {
			return false
		}
		learned[k] = name
	}
	if len(learned) > len(old) {
		h.names.Store(&learned)
	}
	return true
}

func knowsAll(names map[string]string, extra map[string][]string) bool {
	for k := range extra {
		if _, ok := names[k]; !ok {
			return false
		}
	}
	return true
}

// extraHeaderName returns the header name client-go's round tripper gives
// the extra key k.
func extraHeaderName(k string) (string, bool) {
	id := transport.ImpersonationConfig{UserName: "-", Extra: map[string][]string{k: {"-"}}}
	out := throughClientGo(&http.Request{Header: http.Header{}}, id)
	if out == nil {
		return "", false
	}
	for name := range out.Header {
		if strings.HasPrefix(name, transport.ImpersonateUserExtraHeaderPrefix) {
			return name, true
		}
	}
	return "", false
}

// throughClientGo returns the copy of req client-go's impersonating round
// tripper makes for id, or nil if it made none.
func throughClientGo(req *http.Request, id transport.ImpersonationConfig) *http.Request {
	var out *http.Request
	_, _ = transport.NewImpersonatingRoundTripper(id, capture{&out}).RoundTrip(req)
	return out
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
