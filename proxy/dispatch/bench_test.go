package dispatch

import (
	"fmt"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/request"
)

// benchmarkPolicies are 50 policies of 5 rules each, of the kinds people write:
// reads of one resource in one namespace, writes of deployments by some users,
// status updates by a group, list pods by a service account, a non-resource path.
func benchmarkPolicies() []gatewayv1alpha1.DispatchPolicy {
	var ruleSets [][]specRule
	for i := 0; i < 50; i++ {
		ruleSets = append(ruleSets, []specRule{
			res(l("get", "list", "watch"), l(""), l(fmt.Sprintf("res-%d", i)), func(r *specRule) { r.Namespaces = l(fmt.Sprintf("ns-%d", i)) }),
			res(l("create", "update", "patch"), l("apps"), l("deployments", "deployments/scale"), func(r *specRule) {
				r.Users = l(fmt.Sprintf("user-%d", i), fmt.Sprintf("team-%d-*", i))
			}),
			res(star, star, l("*/status"), func(r *specRule) { r.UserGroups = l(fmt.Sprintf("group-%d", i)) }),
			res(l("list"), l(""), l("pods"), func(r *specRule) {
				r.ServiceAccounts = []gatewayv1alpha1.ServiceAccountReference{{Namespace: fmt.Sprintf("ns-%d", i), Name: fmt.Sprintf("sa-%d", i)}}
			}),
			nonRes(l("get"), l(fmt.Sprintf("/path-%d/*", i))),
		})
	}
	return policies(ruleSets...)
}

// benchmarkMatcher returns the compiled benchmark policies and a request "list
// pods" by a service account that matches the last policy (its fourth rule), or
// none. Every policy's fourth rule gets as far as the service account check.
func benchmarkMatcher(tb testing.TB, matchLast bool) (*Matcher, request.Attributes) {
	tb.Helper()
	m, err := Compile(benchmarkPolicies())
	if err != nil {
		tb.Fatal(err)
	}
	sa := "system:serviceaccount:ns-49:sa-49"
	if !matchLast {
		sa = "system:serviceaccount:ns-49:sa-50"
	}
	u := &user.DefaultInfo{Name: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:ns-49", "system:authenticated"}}
	a, err := request.Parse("GET", "/api/v1/namespaces/ns-49/pods", "limit=500", u)
	if err != nil {
		tb.Fatal(err)
	}
	want := -1
	if matchLast {
		want = 49
	}
	if got := m.Match(&a); got != want {
		tb.Fatalf("Match = %d, want %d", got, want)
	}
	return m, a
}

func BenchmarkMatch(b *testing.B) {
	for _, c := range []struct {
		name      string
		matchLast bool
	}{{"last-of-50x5", true}, {"none-of-50x5", false}} {
		b.Run(c.name, func(b *testing.B) {
			m, a := benchmarkMatcher(b, c.matchLast)
			b.ReportAllocs()
			for b.Loop() {
				m.Match(&a)
			}
		})
	}
	b.Run("first-of-50x5", func(b *testing.B) {
		m, _ := benchmarkMatcher(b, true)
		a, err := request.Parse("GET", "/api/v1/namespaces/ns-0/res-0", "", &user.DefaultInfo{Name: "alice"})
		if err != nil || m.Match(&a) != 0 {
			b.Fatalf("%v %d", err, m.Match(&a))
		}
		b.ReportAllocs()
		for b.Loop() {
			m.Match(&a)
		}
	})
}

// BenchmarkParseAndMatch is the whole per-request cost of dispatch.
func BenchmarkParseAndMatch(b *testing.B) {
	m, a := benchmarkMatcher(b, true)
	b.ReportAllocs()
	for b.Loop() {
		a2, _ := request.Parse("GET", "/api/v1/namespaces/ns-49/pods", "limit=500", a.User)
		m.Match(&a2)
	}
}

func BenchmarkCompile(b *testing.B) {
	ps := benchmarkPolicies()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile(ps); err != nil {
			b.Fatal(err)
		}
	}
}
