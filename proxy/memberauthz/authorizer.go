// Package memberauthz asks a member cluster, by SubjectAccessReviews sent
// with the gateway's own credential, what a user may do there, and keeps the
// answers for a short while as kube-apiserver's webhook authorizer does. One
// Authorizer per member serves every part of the gateway that must decide as
// the member would without sending it the request: a client's own
// impersonation at the member door, and reads served from the fleet cache.
package memberauthz

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/transport"
)

// Default lifetimes of a member's SubjectAccessReview answers, as
// kube-apiserver's webhook authorizer keeps them by default.
const (
	DefaultAllowTTL = 5 * time.Minute
	DefaultDenyTTL  = 30 * time.Second
	// cacheSize bounds the answers kept per member.
	cacheSize = 4096
)

// Options tune an Authorizer; the zero value is the defaults.
type Options struct {
	// AllowTTL keeps an allowed answer (0: DefaultAllowTTL); a denied one is
	// kept DefaultDenyTTL, or AllowTTL when shorter.
	AllowTTL time.Duration
	// Reviewed, when set, is told of every review sent (not of answers kept).
	Reviewed func(cluster string)
}

// CreateFunc POSTs in to path on the member with the gateway's own credential
// and decodes the created object into out (cluster.Cluster.Create).
type CreateFunc func(ctx context.Context, path string, in, out any) error

// Authorizer decides by the member's SubjectAccessReviews. Safe for
// concurrent use.
type Authorizer struct {
	cluster           string
	create            CreateFunc
	answers           *cache.LRUExpireCache
	allowTTL, denyTTL time.Duration
	reviewed          func(cluster string)
}

// New returns the Authorizer of member cluster, asking it through create.
func New(cluster string, create CreateFunc, o Options) *Authorizer {
	a := &Authorizer{cluster: cluster, create: create, reviewed: o.Reviewed, answers: cache.NewLRUExpireCache(cacheSize),
		allowTTL: o.AllowTTL, denyTTL: DefaultDenyTTL}
	if a.allowTTL <= 0 {
		a.allowTTL = DefaultAllowTTL
	}
	a.denyTTL = min(a.denyTTL, a.allowTTL)
	return a
}

// AllowTTL is how long an allowed answer is kept: a user whose access the
// member takes away may go on for that long.
func (m *Authorizer) AllowTTL() time.Duration { return m.allowTTL }

type answer struct {
	decision authorizer.Decision
	reason   string
}

// Authorize is authorizer.UnconditionalAuthorizer's. A member that cannot answer
// gives no opinion, with the reason saying why, and an error.
func (m *Authorizer) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	spec := sarSpec(a)
	key, err := json.Marshal(spec)
	if err != nil {
		return authorizer.DecisionNoOpinion, "", err
	}
	if v, ok := m.answers.Get(string(key)); ok {
		ans := v.(answer)
		return ans.decision, ans.reason, nil
	}
	st, err := m.review(ctx, spec)
	if err != nil {
		err = fmt.Errorf("upstream cluster %q could not answer a SubjectAccessReview: %w", m.cluster, err)
		return authorizer.DecisionNoOpinion, err.Error(), err
	}
	ans := answer{decision: authorizer.DecisionNoOpinion, reason: st.Reason}
	ttl := m.denyTTL
	switch {
	case st.Allowed:
		ans.decision, ttl = authorizer.DecisionAllow, m.allowTTL
	case st.Denied:
		ans.decision = authorizer.DecisionDeny
	}
	m.answers.Add(string(key), ans, ttl)
	return ans.decision, ans.reason, nil
}

func sarSpec(a authorizer.Attributes) authorizationv1.SubjectAccessReviewSpec {
	spec := authorizationv1.SubjectAccessReviewSpec{}
	if u := a.GetUser(); u != nil {
		spec.User, spec.UID, spec.Groups = u.GetName(), u.GetUID(), u.GetGroups()
		if extra := u.GetExtra(); len(extra) > 0 {
			spec.Extra = map[string]authorizationv1.ExtraValue{}
			for k, v := range extra {
				spec.Extra[k] = v
			}
		}
	}
	if a.IsResourceRequest() {
		spec.ResourceAttributes = &authorizationv1.ResourceAttributes{
			Namespace: a.GetNamespace(), Verb: a.GetVerb(), Group: a.GetAPIGroup(), Version: a.GetAPIVersion(),
			Resource: a.GetResource(), Subresource: a.GetSubresource(), Name: a.GetName(),
		}
	} else {
		spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: a.GetPath(), Verb: a.GetVerb()}
	}
	return spec
}

func (m *Authorizer) review(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (*authorizationv1.SubjectAccessReviewStatus, error) {
	if m.reviewed != nil {
		m.reviewed(m.cluster)
	}
	var sar authorizationv1.SubjectAccessReview
	err := m.create(ctx, "/apis/authorization.k8s.io/v1/subjectaccessreviews", &authorizationv1.SubjectAccessReview{
		TypeMeta: metav1.TypeMeta{Kind: "SubjectAccessReview", APIVersion: authorizationv1.SchemeGroupVersion.String()},
		Spec:     spec,
	}, &sar)
	if err != nil {
		return nil, err
	}
	return &sar.Status, nil
}

// Impersonated is the user the member sees when the gateway impersonates id:
// the groups its impersonation filter adds (a ServiceAccount's groups when
// none are given, system:authenticated for anyone but anonymous) included,
// so that a review answers for the identity a proxied request would carry.
func Impersonated(id transport.ImpersonationConfig) user.Info {
	groups := id.Groups
	if len(groups) == 0 {
		if ns, _, err := serviceaccount.SplitUsername(id.UserName); err == nil {
			groups = serviceaccount.MakeGroupNames(ns)
		}
	}
	if id.UserName != user.Anonymous {
		add := true
		for _, g := range groups {
			if g == user.AllAuthenticated || g == user.AllUnauthenticated {
				add = false
				break
			}
		}
		if add {
			groups = append(groups[:len(groups):len(groups)], user.AllAuthenticated)
		}
	}
	extra := map[string][]string{}
	for k, v := range id.Extra {
		extra[strings.ToLower(k)] = v
	}
	return &user.DefaultInfo{Name: id.UserName, UID: id.UID, Groups: groups, Extra: extra}
}
