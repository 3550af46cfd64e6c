// Package impersonate decides which identity the gateway impersonates on a member
// for a hub user, and removes from a proxied request everything a client sent that
// carries identity or credentials.
package impersonate

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	proxyutil "k8s.io/apimachinery/pkg/util/proxy"
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
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie"}

var credentialHeaderPrefixes = []string{"Impersonate-", "X-Remote-"}

// StripInbound removes credential and identity headers from h, in place.
func StripInbound(h http.Header) {
	for _, name := range credentialHeaders {
		h.Del(name)
	}
	for name := range h {
		canonical := textproto.CanonicalMIMEHeaderKey(name)
		for _, prefix := range credentialHeaderPrefixes {
			if strings.HasPrefix(canonical, prefix) {
				delete(h, name)
				break
			}
		}
	}
}

// Apply returns a copy of req that impersonates id. It uses client-go's own
// impersonating round tripper so the headers (and the escaping of extra keys)
// are exactly what a member apiserver expects.
func Apply(req *http.Request, id transport.ImpersonationConfig) (*http.Request, error) {
	if id.UserName == "" {
		return nil, fmt.Errorf("cannot impersonate a user without a name")
	}
	resp, err := transport.NewImpersonatingRoundTripper(id, proxyutil.MirrorRequest).RoundTrip(req)
	if err != nil {
		return nil, err
	}
	return resp.Request, nil
}
