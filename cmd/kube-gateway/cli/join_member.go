package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// memberAccess is what join takes from the member kubeconfig.
type memberAccess struct {
	servers    []string
	caPEM      []byte
	serverName string
}

// memberAccessFrom returns the servers and CA the gateway reaches the member
// with: the servers given, else the kubeconfig's server; the kubeconfig's CA.
func memberAccessFrom(cfg *rest.Config, servers []string) (*memberAccess, error) {
	cfg = rest.CopyConfig(cfg)
	if err := rest.LoadTLSFiles(cfg); err != nil {
		return nil, fmt.Errorf("the member kubeconfig: %w", err)
	}
	if len(cfg.CAData) == 0 {
		return nil, errors.New("the member kubeconfig has no CA (certificate-authority or certificate-authority-data of its cluster): the gateway needs it to verify the member's apiservers; add it, even if the kubeconfig uses insecure-skip-tls-verify")
	}
	if len(servers) == 0 {
		servers = []string{cfg.Host}
	}
	seen := map[string]bool{}
	for _, s := range servers {
		u, err := url.Parse(s)
		if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("member server %q: want https://HOST[:PORT], without path (pass --server)", s)
		}
		if seen[s] {
			return nil, fmt.Errorf("member server %q given twice", s)
		}
		seen[s] = true
	}
	return &memberAccess{servers: servers, caPEM: cfg.CAData, serverName: cfg.ServerName}, nil
}

// token returns the token of identity m to put into the hub Secret and when
// it expires (zero: never). A bound token already in current Secret is kept
// while it still authenticates as m on the member and has more than half of
// its lifetime left, so that running join again changes nothing.
func (o *joinOptions) token(ctx context.Context, c *clients, r *reporter, m memberIdentity, current *corev1.Secret, apply metav1.ApplyOptions) ([]byte, time.Time, error) {
	secrets := c.member.CoreV1().Secrets(m.namespace)
	if o.longLivedToken {
		if err := r.apply(ctx, "member", "secret", m.namespace+"/"+m.tokenSecretName(),
			func(ctx context.Context) (runtime.Object, error) {
				return secrets.Get(ctx, m.tokenSecretName(), metav1.GetOptions{})
			},
			func(ctx context.Context) (runtime.Object, error) { return secrets.Apply(ctx, m.tokenSecret(), apply) }); err != nil {
			return nil, time.Time{}, memberError(err, m)
		}
		if o.dryRun {
			return []byte("<the token of Secret " + m.namespace + "/" + m.tokenSecretName() + ">"), time.Time{}, nil
		}
		var token []byte
		err := wait.PollUntilContextTimeout(ctx, time.Second, o.timeout, true, func(ctx context.Context) (bool, error) {
			s, err := secrets.Get(ctx, m.tokenSecretName(), metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			token = s.Data[corev1.ServiceAccountTokenKey]
			return len(token) > 0, nil
		})
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("member Secret %s/%s still has no token after %s: the member's token controller (kube-controller-manager) fills it; start it, or leave out --long-lived-token to use a bound token",
				m.namespace, m.tokenSecretName(), o.timeout)
		}
		return token, time.Time{}, nil
	}

	// A bound token: the long-lived token Secret an earlier join made goes.
	if err := deleteOwnedTokenSecret(ctx, c.member, r, m, o.dryRun); err != nil {
		return nil, time.Time{}, err
	}
	if current != nil && !o.renewToken {
		if t := current.Data["token"]; len(t) > 0 {
			if exp, keep := keepToken(t, time.Now()); keep && authenticatesAs(ctx, c.memberConfig, t, m.username()) {
				return t, exp, nil
			}
		}
	}
	if o.dryRun {
		fmt.Fprintf(r.out, "member: token of serviceaccount %s/%s would be requested (dry run)\n", m.namespace, m.name)
		return []byte("<a new bound token of " + m.username() + ">"), time.Time{}, nil
	}
	secs := int64(o.tokenExpiration / time.Second)
	tr, err := c.member.CoreV1().ServiceAccounts(m.namespace).CreateToken(ctx, m.name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return nil, time.Time{}, memberError(fmt.Errorf("requesting a token of serviceaccount %s/%s: %w", m.namespace, m.name, err), m)
	}
	fmt.Fprintf(r.out, "member: token of serviceaccount %s/%s requested, expires %s\n", m.namespace, m.name, tr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339))
	return []byte(tr.Status.Token), tr.Status.ExpirationTimestamp.Time, nil
}

// deleteOwnedTokenSecret deletes the long-lived token Secret of m if join
// made it (it lists join as a field manager), and not one a chart installed.
func deleteOwnedTokenSecret(ctx context.Context, member kubernetes.Interface, r *reporter, m memberIdentity, dryRun bool) error {
	s, err := member.CoreV1().Secrets(m.namespace).Get(ctx, m.tokenSecretName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return memberError(err, m)
	}
	if !managedBy(s, joinFieldManager) {
		return nil
	}
	return r.delete(ctx, "member", "secret", m.namespace+"/"+m.tokenSecretName(), dryRun, func(ctx context.Context, opts metav1.DeleteOptions) error {
		return member.CoreV1().Secrets(m.namespace).Delete(ctx, m.tokenSecretName(), opts)
	})
}

// boundTokenLifetime reads when a bound ServiceAccount token (a JWT) was
// issued and expires, without verifying it: the member verifies it
// (authenticatesAs); this only decides when to renew. A token without expiry
// is not a bound token.
func boundTokenLifetime(token []byte) (issued, expires time.Time, ok bool) {
	parts := strings.Split(string(token), ".")
	if len(parts) != 3 {
		return time.Time{}, time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, time.Time{}, false
	}
	var claims struct {
		Iat int64 `json:"iat"`
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == 0 || claims.Iat == 0 || claims.Iat >= claims.Exp {
		return time.Time{}, time.Time{}, false
	}
	return time.Unix(claims.Iat, 0), time.Unix(claims.Exp, 0), true
}

// keepToken says whether a bound token still has more than half of its
// lifetime (which the member may have made shorter than requested) left.
func keepToken(token []byte, now time.Time) (time.Time, bool) {
	issued, expires, ok := boundTokenLifetime(token)
	if !ok {
		return time.Time{}, false
	}
	return expires, expires.Sub(now) > expires.Sub(issued)/2
}

// authenticatesAs says whether the member authenticates token as username.
func authenticatesAs(ctx context.Context, member *rest.Config, token []byte, username string) bool {
	cfg := rest.AnonymousClientConfig(member)
	cfg.BearerToken = string(token)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	return err == nil && r.Status.UserInfo.Username == username
}
