package door

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kubewharf/kube-gateway/proxy/cluster"
)

// Lifetimes of a member's SubjectAccessReview answers, as kube-apiserver's
// webhook authorizer keeps them by default.
const (
	sarAllowTTL = 5 * time.Minute
	sarDenyTTL  = 30 * time.Second
	// sarCacheSize bounds the answers kept per door.
	sarCacheSize = 4096
)

// memberAuthorizer asks the member, by a SubjectAccessReview sent with the
// gateway's own credential, whether a user may do something there: it decides
// a client's own impersonation (Impersonate-* headers) at the door, as the
// member's impersonation filter would.
type memberAuthorizer struct {
	cluster *cluster.Cluster
	answers *cache.LRUExpireCache
}

func newMemberAuthorizer(c *cluster.Cluster) *memberAuthorizer {
	return &memberAuthorizer{cluster: c, answers: cache.NewLRUExpireCache(sarCacheSize)}
}

type answer struct {
	decision authorizer.Decision
	reason   string
}

// Authorize implements authorizer.UnconditionalAuthorizer.
func (m *memberAuthorizer) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
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
		// The impersonation filter answers 403 with the reason only.
		return authorizer.DecisionNoOpinion, fmt.Sprintf("upstream cluster %q could not answer a SubjectAccessReview: %v", m.cluster.Name, err), nil
	}
	ans := answer{decision: authorizer.DecisionNoOpinion, reason: st.Reason}
	ttl := sarDenyTTL
	switch {
	case st.Allowed:
		ans.decision, ttl = authorizer.DecisionAllow, sarAllowTTL
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

func (m *memberAuthorizer) review(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (*authorizationv1.SubjectAccessReviewStatus, error) {
	var sar authorizationv1.SubjectAccessReview
	err := create(ctx, m.cluster, "/apis/authorization.k8s.io/v1/subjectaccessreviews", &authorizationv1.SubjectAccessReview{
		TypeMeta: metav1.TypeMeta{Kind: "SubjectAccessReview", APIVersion: authorizationv1.SchemeGroupVersion.String()},
		Spec:     spec,
	}, &sar)
	if err != nil {
		return nil, err
	}
	return &sar.Status, nil
}
