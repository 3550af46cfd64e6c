package memberauthz

import (
	"context"
	"errors"
	"slices"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/transport"
)

// member answers reviews: alice may list configmaps in namespace alice.
type member struct {
	reviews int
	down    bool
}

func (m *member) create(_ context.Context, path string, in, out any) error {
	m.reviews++
	if m.down {
		return errors.New("connection refused")
	}
	if path != "/apis/authorization.k8s.io/v1/subjectaccessreviews" {
		return errors.New("unexpected path " + path)
	}
	spec := in.(*authorizationv1.SubjectAccessReview).Spec
	ra := spec.ResourceAttributes
	allowed := spec.User == "alice" && slices.Contains(spec.Groups, user.AllAuthenticated) &&
		ra != nil && ra.Verb == "list" && ra.Resource == "configmaps" && ra.Namespace == "alice"
	out.(*authorizationv1.SubjectAccessReview).Status = authorizationv1.SubjectAccessReviewStatus{Allowed: allowed, Reason: "by the test"}
	return nil
}

func attrs(u user.Info, ns string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{User: u, Verb: "list", APIVersion: "v1", Resource: "configmaps", Namespace: ns, ResourceRequest: true}
}

// Answers are asked once and kept: a user's second question costs no review.
func TestAnswersAreKept(t *testing.T) {
	m := &member{}
	a := New("member-a", m.create, Options{})
	alice := Impersonated(transport.ImpersonationConfig{UserName: "alice"})
	for range 3 {
		if d, _, err := a.Authorize(context.Background(), attrs(alice, "alice")); d != authorizer.DecisionAllow || err != nil {
			t.Fatalf("alice in alice: %v %v, want allowed", d, err)
		}
		if d, _, _ := a.Authorize(context.Background(), attrs(alice, "")); d == authorizer.DecisionAllow {
			t.Fatal("alice in every namespace: allowed")
		}
	}
	if m.reviews != 2 {
		t.Errorf("%d reviews for 2 distinct questions asked 3 times each, want 2", m.reviews)
	}
}

// A member that cannot answer decides nothing, says why, and is asked again.
func TestMemberDown(t *testing.T) {
	m := &member{down: true}
	a := New("member-a", m.create, Options{})
	alice := Impersonated(transport.ImpersonationConfig{UserName: "alice"})
	for range 2 {
		d, reason, err := a.Authorize(context.Background(), attrs(alice, "alice"))
		if d != authorizer.DecisionNoOpinion || err == nil || reason == "" {
			t.Fatalf("member down: %v %q %v, want no opinion with an error", d, reason, err)
		}
	}
	if m.reviews != 2 {
		t.Errorf("%d reviews, want 2: failures are not kept", m.reviews)
	}
}

// Impersonated adds the groups the member's impersonation filter adds.
func TestImpersonated(t *testing.T) {
	for _, tc := range []struct {
		id   transport.ImpersonationConfig
		want []string
	}{
		{transport.ImpersonationConfig{UserName: "alice"}, []string{user.AllAuthenticated}},
		{transport.ImpersonationConfig{UserName: "alice", Groups: []string{"dev"}}, []string{"dev", user.AllAuthenticated}},
		{transport.ImpersonationConfig{UserName: "alice", Groups: []string{user.AllUnauthenticated}}, []string{user.AllUnauthenticated}},
		{transport.ImpersonationConfig{UserName: user.Anonymous}, nil},
		{transport.ImpersonationConfig{UserName: "system:serviceaccount:ns1:sa"}, []string{"system:serviceaccounts", "system:serviceaccounts:ns1", user.AllAuthenticated}},
	} {
		if got := Impersonated(tc.id).GetGroups(); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: groups %v, want %v", tc.id, got, tc.want)
		}
	}
}
