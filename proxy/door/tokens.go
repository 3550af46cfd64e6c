package door

import (
	"context"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authentication/user"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/metrics"
)

// Options of every door.
type Options struct {
	// Metrics counts TokenReviews; nil: not counted.
	Metrics *metrics.Metrics
}

// memberTokens authenticates bearer tokens by a TokenReview on the member,
// sent with the gateway's own credential to one of its servers: whatever the
// member's authenticator accepts (ServiceAccount tokens, bound or legacy,
// static tokens, OIDC) with the audiences the member expects.
type memberTokens struct {
	cluster *cluster.Cluster
	metrics *metrics.Metrics
}

func (m *memberTokens) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	resp, ok, err := m.review(ctx, token)
	if m.metrics != nil {
		result := metrics.TokenAuthenticated
		switch {
		case err != nil:
			result = metrics.TokenReviewError
		case !ok:
			result = metrics.TokenRejected
		}
		m.metrics.TokenReviewed(m.cluster.Name, result)
	}
	return resp, ok, err
}

func (m *memberTokens) review(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	var review authenticationv1.TokenReview
	err := m.cluster.Create(ctx, "/apis/authentication.k8s.io/v1/tokenreviews", &authenticationv1.TokenReview{
		TypeMeta: metav1.TypeMeta{Kind: "TokenReview", APIVersion: authenticationv1.SchemeGroupVersion.String()},
		Spec:     authenticationv1.TokenReviewSpec{Token: token},
	}, &review)
	if err != nil {
		return nil, false, err
	}
	st := review.Status
	if !st.Authenticated {
		return nil, false, nil
	}
	extra := map[string][]string{}
	for k, v := range st.User.Extra {
		extra[k] = v
	}
	return &authenticator.Response{
		Audiences: st.Audiences,
		User:      &user.DefaultInfo{Name: st.User.Username, UID: st.User.UID, Groups: st.User.Groups, Extra: extra},
	}, true, nil
}

// newTokenAuthenticator is the door's token authenticator for cluster c: the
// member's TokenReviews, kept as tr says (errors are not kept); nil when
// tr turns tokens off.
func newTokenAuthenticator(c *cluster.Cluster, tr *gatewayv1alpha1.TokenReview, o Options) authenticator.Token {
	ttl, failTTL := time.Duration(gatewayv1alpha1.DefaultTokenReviewCacheTTLSeconds)*time.Second, time.Duration(gatewayv1alpha1.DefaultTokenReviewFailureCacheTTLSeconds)*time.Second
	if tr != nil {
		if tr.Disabled {
			return nil
		}
		if tr.CacheTTLSeconds > 0 {
			ttl = time.Duration(tr.CacheTTLSeconds) * time.Second
		}
		if tr.FailureCacheTTLSeconds > 0 {
			failTTL = time.Duration(tr.FailureCacheTTLSeconds) * time.Second
		}
	}
	return tokencache.New(&memberTokens{cluster: c, metrics: o.Metrics}, false, ttl, failTTL)
}
