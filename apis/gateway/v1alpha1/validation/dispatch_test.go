package validation_test

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1/validation"
)

type rule = gatewayv1alpha1.DispatchPolicyRule

// podsRule is a valid resource rule the cases below change one field of.
func podsRule(mutate ...func(*rule)) rule {
	r := rule{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"pods"}}
	for _, m := range mutate {
		m(&r)
	}
	return r
}

// withRules returns a mutation setting one policy with these rules, named and
// defaulted as the API server would.
func withRules(rules ...rule) func(*gatewayv1alpha1.UpstreamCluster) {
	return func(uc *gatewayv1alpha1.UpstreamCluster) {
		uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{Name: "p", Rules: rules, Strategy: gatewayv1alpha1.RoundRobin}}
	}
}

// withSchemas sets the flow-control schemas.
func withSchemas(schemas ...gatewayv1alpha1.FlowControlSchema) func(*gatewayv1alpha1.UpstreamCluster) {
	return func(uc *gatewayv1alpha1.UpstreamCluster) {
		uc.Spec.FlowControl = &gatewayv1alpha1.FlowControl{FlowControlSchemas: schemas}
	}
}

func exempt(name string) gatewayv1alpha1.FlowControlSchema {
	return gatewayv1alpha1.FlowControlSchema{Name: name, Exempt: &gatewayv1alpha1.ExemptFlowControl{}}
}

func bucket(name string, qps, burst int32) gatewayv1alpha1.FlowControlSchema {
	return gatewayv1alpha1.FlowControlSchema{Name: name, TokenBucket: &gatewayv1alpha1.TokenBucketFlowControl{QPS: *resource.NewQuantity(int64(qps), resource.DecimalSI), Burst: burst}}
}

func qpsBucket(name, qps string) gatewayv1alpha1.FlowControlSchema {
	return gatewayv1alpha1.FlowControlSchema{Name: name, TokenBucket: &gatewayv1alpha1.TokenBucketFlowControl{QPS: resource.MustParse(qps), Burst: 1}}
}

func inflight(name string, max int32) gatewayv1alpha1.FlowControlSchema {
	return gatewayv1alpha1.FlowControlSchema{Name: name, MaxRequestsInflight: &gatewayv1alpha1.MaxRequestsInflightFlowControl{Max: max}}
}

const r0 = "spec.dispatchPolicies[0].rules[0]"

func TestValidateDispatchPolicies(t *testing.T) {
	type mutation = func(*gatewayv1alpha1.UpstreamCluster)
	tests := []struct {
		name   string
		mutate mutation
		want   []fieldErr
	}{
		// valid rules
		{name: "resource rule", mutate: withRules(podsRule())},
		{name: "every field of a resource rule", mutate: withRules(rule{
			Verbs:     []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"},
			APIGroups: []string{"", "apps", "rbac.authorization.k8s.io"}, Resources: []string{"pods", "pods/log", "*/status", "deployments/scale"},
			ResourceNames: []string{"web-0", "web:80"}, Namespaces: []string{"default", ""}, Users: []string{"alice", "dev-*", "*"},
			ServiceAccounts: []gatewayv1alpha1.ServiceAccountReference{{Namespace: "kube-system", Name: "coredns"}},
			UserGroups:      []string{"system:masters", "dev"},
		})},
		{name: "non-resource rule", mutate: withRules(rule{
			Verbs: []string{"get", "head", "post", "put", "patch", "delete", "options"}, NonResourceURLs: []string{"/healthz", "/healthz/*", "/", "/*"},
			Users: []string{"alice"}, UserGroups: []string{"dev"}, ServiceAccounts: []gatewayv1alpha1.ServiceAccountReference{{Namespace: "a", Name: "b"}},
		})},
		{name: "non-resource rule *", mutate: withRules(rule{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}})},
		{name: "wildcards everywhere", mutate: withRules(rule{
			Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, ResourceNames: []string{"*"},
			Namespaces: []string{"*"}, Users: []string{"*"}, UserGroups: []string{"*"},
		})},
		{name: "exclusions everywhere", mutate: withRules(rule{
			Verbs: []string{"-get", "-list"}, APIGroups: []string{"-apps", "-"}, Resources: []string{"-pods", "-pods/log", "-*/status"},
			ResourceNames: []string{"-web-0"}, Namespaces: []string{"-kube-system", "-"}, Users: []string{"-alice", "-system:*"},
			UserGroups: []string{"-system:masters"},
		})},
		{name: "non-resource exclusions", mutate: withRules(rule{Verbs: []string{"-post"}, NonResourceURLs: []string{"-/healthz/*", "-/metrics"}})},
		{name: "several rules", mutate: withRules(podsRule(), rule{Verbs: []string{"get"}, NonResourceURLs: []string{"/version"}})},

		// rule kind
		{
			name:   "neither resources nor nonResourceURLs",
			mutate: withRules(rule{Verbs: []string{"get"}}),
			want:   []fieldErr{{field.ErrorTypeRequired, r0}},
		},
		{
			name:   "resource fields without resources",
			mutate: withRules(rule{Verbs: []string{"get"}, APIGroups: []string{""}, Namespaces: []string{"default"}}),
			want:   []fieldErr{{field.ErrorTypeRequired, r0 + ".resources"}},
		},
		{
			name: "resources and nonResourceURLs",
			mutate: withRules(podsRule(func(r *rule) {
				r.NonResourceURLs = []string{"/healthz"}
				r.ResourceNames = []string{"x"}
				r.Namespaces = []string{"default"}
				r.Verbs = []string{"get"}
			})),
			want: []fieldErr{
				{field.ErrorTypeForbidden, r0 + ".apiGroups"},
				{field.ErrorTypeForbidden, r0 + ".resources"},
				{field.ErrorTypeForbidden, r0 + ".resourceNames"},
				{field.ErrorTypeForbidden, r0 + ".namespaces"},
			},
		},
		{
			name:   "apiGroups with nonResourceURLs",
			mutate: withRules(rule{Verbs: []string{"get"}, APIGroups: []string{"*"}, NonResourceURLs: []string{"/healthz"}}),
			want:   []fieldErr{{field.ErrorTypeForbidden, r0 + ".apiGroups"}},
		},
		{
			name:   "verbs required",
			mutate: withRules(podsRule(func(r *rule) { r.Verbs = nil })),
			want:   []fieldErr{{field.ErrorTypeRequired, r0 + ".verbs"}},
		},
		{
			name:   "verbs required in a non-resource rule",
			mutate: withRules(rule{NonResourceURLs: []string{"/healthz"}}),
			want:   []fieldErr{{field.ErrorTypeRequired, r0 + ".verbs"}},
		},
		{
			name:   "apiGroups required in a resource rule",
			mutate: withRules(podsRule(func(r *rule) { r.APIGroups = nil })),
			want:   []fieldErr{{field.ErrorTypeRequired, r0 + ".apiGroups"}},
		},
		{
			name:   "rules required",
			mutate: withRules(),
			want:   []fieldErr{{field.ErrorTypeRequired, "spec.dispatchPolicies[0].rules"}},
		},

		// mixing plain and exclusions, in every list
		{
			name:   "verbs mixed",
			mutate: withRules(podsRule(func(r *rule) { r.Verbs = []string{"-get", "list"} })),
			want:   []fieldErr{{field.ErrorTypeInvalid, r0 + ".verbs"}},
		},
		{
			name:   "apiGroups mixed",
			mutate: withRules(podsRule(func(r *rule) { r.APIGroups = []string{"", "apps", "-batch"} })),
			want:   []fieldErr{{field.ErrorTypeInvalid, r0 + ".apiGroups"}},
		},
		{
			name:   "resources mixed (KubeGateway silently drops -pods)",
			mutate: withRules(podsRule(func(r *rule) { r.Resources = []string{"-pods", "deployments"} })),
			want:   []fieldErr{{field.ErrorTypeInvalid, r0 + ".resources"}},
		},
		{
			name:   "* with an exclusion is mixed",
			mutate: withRules(podsRule(func(r *rule) { r.Resources = []string{"*", "-secrets"} })),
			want:   []fieldErr{{field.ErrorTypeInvalid, r0 + ".resources"}},
		},
		{
			name:   "resourceNames mixed",
			mutate: withRules(podsRule(func(r *rule) { r.ResourceNames = []string{"a", "-b"} })),
			want:   []fieldErr{{field.ErrorTypeInvalid, r0 + ".resourceNames"}},
		},
		{
			name:   "namespaces mixed",
			mutate: withRules(podsRule(func(r *rule) { r.Namespaces = []string{"-a", "-b", "c"} })),
			want:   []fieldErr{{field.ErrorTypeInvalid, r0 + ".namespaces"}},
		},
		{
			name:   "users mixed",
			mutate: withRules(podsRule(func(r *rule) { r.Users = []string{"alice", "-bob"} })),
			want:   []fieldErr{{field.ErrorTypeInvalid, r0 + ".users"}},
		},
		{
			name:   "userGroups mixed",
			mutate: withRules(podsRule(func(r *rule) { r.UserGroups = []string{"-dev", "ops"} })),
			want:   []fieldErr{{field.ErrorTypeInvalid, r0 + ".userGroups"}},
		},
		{
			name:   "nonResourceURLs mixed",
			mutate: withRules(rule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz", "-/metrics"}}),
			want:   []fieldErr{{field.ErrorTypeInvalid, r0 + ".nonResourceURLs"}},
		},
		{
			name: "-* excludes everything",
			mutate: withRules(podsRule(func(r *rule) {
				r.Verbs = []string{"-*"}
				r.Users = []string{"-alice", "-*"}
			})),
			want: []fieldErr{
				{field.ErrorTypeInvalid, r0 + ".verbs[0]"},
				{field.ErrorTypeInvalid, r0 + ".users[1]"},
			},
		},

		// entries
		{
			name:   "unknown resource verb",
			mutate: withRules(podsRule(func(r *rule) { r.Verbs = []string{"lsit", "-get"} })),
			want: []fieldErr{
				{field.ErrorTypeNotSupported, r0 + ".verbs[0]"},
				{field.ErrorTypeInvalid, r0 + ".verbs"},
			},
		},
		{
			name:   "HTTP method in a resource rule",
			mutate: withRules(podsRule(func(r *rule) { r.Verbs = []string{"post"} })),
			want:   []fieldErr{{field.ErrorTypeNotSupported, r0 + ".verbs[0]"}},
		},
		{
			name:   "Kubernetes verb in a non-resource rule",
			mutate: withRules(rule{Verbs: []string{"get", "list", "GET", "-"}, NonResourceURLs: []string{"/x"}}),
			want: []fieldErr{
				{field.ErrorTypeNotSupported, r0 + ".verbs[1]"},
				{field.ErrorTypeNotSupported, r0 + ".verbs[2]"},
				{field.ErrorTypeNotSupported, r0 + ".verbs[3]"},
				{field.ErrorTypeInvalid, r0 + ".verbs"},
			},
		},
		{
			name:   "empty verb",
			mutate: withRules(podsRule(func(r *rule) { r.Verbs = []string{""} })),
			want:   []fieldErr{{field.ErrorTypeNotSupported, r0 + ".verbs[0]"}},
		},
		{
			name:   "invalid apiGroups",
			mutate: withRules(podsRule(func(r *rule) { r.APIGroups = []string{"Apps", "a/b", "app*"} })),
			want: []fieldErr{
				{field.ErrorTypeInvalid, r0 + ".apiGroups[0]"},
				{field.ErrorTypeInvalid, r0 + ".apiGroups[1]"},
				{field.ErrorTypeInvalid, r0 + ".apiGroups[2]"},
			},
		},
		{
			name: "invalid resources",
			mutate: withRules(podsRule(func(r *rule) {
				r.Resources = []string{"pods/*", "*/*", "", "pods/", "/log", "pods/log/x", "po*", "*/st*", "pods", "*/status"}
			})),
			want: []fieldErr{
				{field.ErrorTypeInvalid, r0 + ".resources[0]"},
				{field.ErrorTypeInvalid, r0 + ".resources[1]"},
				{field.ErrorTypeInvalid, r0 + ".resources[2]"},
				{field.ErrorTypeInvalid, r0 + ".resources[3]"},
				{field.ErrorTypeInvalid, r0 + ".resources[4]"},
				{field.ErrorTypeInvalid, r0 + ".resources[5]"},
				{field.ErrorTypeInvalid, r0 + ".resources[6]"},
				{field.ErrorTypeInvalid, r0 + ".resources[7]"},
			},
		},
		{
			name:   "excluded pods/* is still invalid",
			mutate: withRules(podsRule(func(r *rule) { r.Resources = []string{"-pods/*"} })),
			want:   []fieldErr{{field.ErrorTypeInvalid, r0 + ".resources[0]"}},
		},
		{
			name:   "invalid resourceNames",
			mutate: withRules(podsRule(func(r *rule) { r.ResourceNames = []string{"", "a/b", "web-*", "-"} })),
			want: []fieldErr{
				{field.ErrorTypeInvalid, r0 + ".resourceNames[0]"},
				{field.ErrorTypeInvalid, r0 + ".resourceNames[1]"},
				{field.ErrorTypeInvalid, r0 + ".resourceNames[2]"},
				{field.ErrorTypeInvalid, r0 + ".resourceNames[3]"},
				{field.ErrorTypeInvalid, r0 + ".resourceNames"}, // and mixed
			},
		},
		{
			name:   "invalid namespaces",
			mutate: withRules(podsRule(func(r *rule) { r.Namespaces = []string{"Default", "kube.system", "ns-*"} })),
			want: []fieldErr{
				{field.ErrorTypeInvalid, r0 + ".namespaces[0]"},
				{field.ErrorTypeInvalid, r0 + ".namespaces[1]"},
				{field.ErrorTypeInvalid, r0 + ".namespaces[2]"},
			},
		},
		{
			name:   "cluster-scoped namespace",
			mutate: withRules(podsRule(func(r *rule) { r.Namespaces = []string{""} })),
		},
		{
			name:   "invalid users",
			mutate: withRules(podsRule(func(r *rule) { r.Users = []string{"", "*alice", "a*b", "a**", "dev-*"} })),
			want: []fieldErr{
				{field.ErrorTypeInvalid, r0 + ".users[0]"},
				{field.ErrorTypeInvalid, r0 + ".users[1]"},
				{field.ErrorTypeInvalid, r0 + ".users[2]"},
				{field.ErrorTypeInvalid, r0 + ".users[3]"},
			},
		},
		{
			name:   "invalid excluded user",
			mutate: withRules(podsRule(func(r *rule) { r.Users = []string{"-", "-a*b"} })),
			want: []fieldErr{
				{field.ErrorTypeInvalid, r0 + ".users[0]"},
				{field.ErrorTypeInvalid, r0 + ".users[1]"},
			},
		},
		{
			name:   "invalid userGroups",
			mutate: withRules(podsRule(func(r *rule) { r.UserGroups = []string{"", "system:*"} })),
			want: []fieldErr{
				{field.ErrorTypeInvalid, r0 + ".userGroups[0]"},
				{field.ErrorTypeInvalid, r0 + ".userGroups[1]"},
			},
		},
		{
			name: "invalid nonResourceURLs",
			mutate: withRules(rule{Verbs: []string{"get"}, NonResourceURLs: []string{
				"healthz", "/healthz*", "/*/x", "/a/*/b", "", "/**", "/healthz/*", "/",
			}}),
			want: []fieldErr{
				{field.ErrorTypeInvalid, r0 + ".nonResourceURLs[0]"},
				{field.ErrorTypeInvalid, r0 + ".nonResourceURLs[1]"},
				{field.ErrorTypeInvalid, r0 + ".nonResourceURLs[2]"},
				{field.ErrorTypeInvalid, r0 + ".nonResourceURLs[3]"},
				{field.ErrorTypeInvalid, r0 + ".nonResourceURLs[4]"},
				{field.ErrorTypeInvalid, r0 + ".nonResourceURLs[5]"},
			},
		},
		{
			name: "invalid serviceAccounts",
			mutate: withRules(podsRule(func(r *rule) {
				r.ServiceAccounts = []gatewayv1alpha1.ServiceAccountReference{{}, {Namespace: "Kube_System", Name: "a:b"}, {Namespace: "ns", Name: "*"}}
			})),
			want: []fieldErr{
				{field.ErrorTypeRequired, r0 + ".serviceAccounts[0].namespace"},
				{field.ErrorTypeRequired, r0 + ".serviceAccounts[0].name"},
				{field.ErrorTypeInvalid, r0 + ".serviceAccounts[1].namespace"},
				{field.ErrorTypeInvalid, r0 + ".serviceAccounts[1].name"},
				{field.ErrorTypeInvalid, r0 + ".serviceAccounts[2].name"},
			},
		},
		{
			name: "errors in the second rule of the second policy",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{
					{Name: "a", Rules: []rule{podsRule()}, Strategy: gatewayv1alpha1.Random},
					{Name: "b", Rules: []rule{podsRule(), podsRule(func(r *rule) { r.Resources = []string{"pods/*"} })}, Strategy: gatewayv1alpha1.LeastRequest},
				}
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.dispatchPolicies[1].rules[1].resources[0]"}},
		},

		{
			// as test/e2e TestInvalidPolicyIsRejected sends it
			name: "mixed verbs and a missing schema",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{
					Name:                  "policy-0",
					Rules:                 []rule{podsRule(func(r *rule) { r.Verbs = []string{"get", "-list"} })},
					Strategy:              gatewayv1alpha1.RoundRobin,
					FlowControlSchemaName: "missing",
				}}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, r0 + ".verbs"},
				{field.ErrorTypeNotFound, "spec.dispatchPolicies[0].flowControlSchemaName"},
			},
		},

		// policies
		{
			name: "policy names",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{
					{Name: "policy-0", Rules: []rule{podsRule()}, Strategy: gatewayv1alpha1.RoundRobin},
					{Name: "policy-0", Rules: []rule{podsRule()}, Strategy: gatewayv1alpha1.RoundRobin},
					{Name: "", Rules: []rule{podsRule()}, Strategy: gatewayv1alpha1.RoundRobin},
					{Name: "Not_A_Label", Rules: []rule{podsRule()}, Strategy: gatewayv1alpha1.RoundRobin},
				}
			},
			want: []fieldErr{
				{field.ErrorTypeDuplicate, "spec.dispatchPolicies[1].name"},
				{field.ErrorTypeRequired, "spec.dispatchPolicies[2].name"},
				{field.ErrorTypeInvalid, "spec.dispatchPolicies[3].name"},
			},
		},
		{
			name: "strategies",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{
					{Name: "a", Rules: []rule{podsRule()}, Strategy: gatewayv1alpha1.RoundRobin},
					{Name: "b", Rules: []rule{podsRule()}, Strategy: gatewayv1alpha1.Random},
					{Name: "c", Rules: []rule{podsRule()}, Strategy: gatewayv1alpha1.LeastRequest},
					{Name: "d", Rules: []rule{podsRule()}, Strategy: "roundrobin"},
					{Name: "e", Rules: []rule{podsRule()}}, // not defaulted
				}
			},
			want: []fieldErr{
				{field.ErrorTypeNotSupported, "spec.dispatchPolicies[3].strategy"},
				{field.ErrorTypeNotSupported, "spec.dispatchPolicies[4].strategy"},
			},
		},
		{
			name: "upstreamSubset",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{
					Name: "a", Rules: []rule{podsRule()}, Strategy: gatewayv1alpha1.RoundRobin,
					UpstreamSubset: []string{
						"https://192.0.2.11:6443", // the disabled server: allowed
						"https://192.0.2.10:6443",
						"https://192.0.2.12:6443",  // not a server
						"https://192.0.2.10:6443",  // duplicate
						"https://192.0.2.10:6443/", // not spelled as in spec.servers
						"",
					},
				}}
			},
			want: []fieldErr{
				{field.ErrorTypeNotSupported, "spec.dispatchPolicies[0].upstreamSubset[2]"},
				{field.ErrorTypeDuplicate, "spec.dispatchPolicies[0].upstreamSubset[3]"},
				{field.ErrorTypeNotSupported, "spec.dispatchPolicies[0].upstreamSubset[4]"},
				{field.ErrorTypeNotSupported, "spec.dispatchPolicies[0].upstreamSubset[5]"},
			},
		},
		{
			name: "flowControlSchemaName",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				withSchemas(exempt("free"), bucket("", 1, 1))(uc)
				uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{
					{Name: "a", Rules: []rule{podsRule()}, Strategy: gatewayv1alpha1.RoundRobin, FlowControlSchemaName: "free"},
					{Name: "b", Rules: []rule{podsRule()}, Strategy: gatewayv1alpha1.RoundRobin, FlowControlSchemaName: "missing"},
					{Name: "c", Rules: []rule{podsRule()}, Strategy: gatewayv1alpha1.RoundRobin},
				}
			},
			want: []fieldErr{
				{field.ErrorTypeRequired, "spec.flowControl.flowControlSchemas[1].name"},
				{field.ErrorTypeNotFound, "spec.dispatchPolicies[1].flowControlSchemaName"},
			},
		},
		{
			name: "flowControlSchemaName without flowControl",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{
					{Name: "a", Rules: []rule{podsRule()}, Strategy: gatewayv1alpha1.RoundRobin, FlowControlSchemaName: "free"},
				}
			},
			want: []fieldErr{{field.ErrorTypeNotFound, "spec.dispatchPolicies[0].flowControlSchemaName"}},
		},

		// flow-control schemas
		{name: "every kind of schema", mutate: withSchemas(exempt("free"), bucket("list-pods", 50, 100), inflight("heavy", 10))},
		{name: "burst below qps", mutate: withSchemas(bucket("b", 50, 1))},
		{name: "a fraction of a request per second", mutate: withSchemas(qpsBucket("slow", "0.2"), qpsBucket("slower", "50m"))},
		{
			name:   "qps past the bound, or negative",
			mutate: withSchemas(qpsBucket("a", "2M"), qpsBucket("b", "-0.5")),
			want: []fieldErr{
				{field.ErrorTypeInvalid, "spec.flowControl.flowControlSchemas[0].tokenBucket.qps"},
				{field.ErrorTypeInvalid, "spec.flowControl.flowControlSchemas[1].tokenBucket.qps"},
			},
		},
		{
			name: "distinguishers",
			mutate: withSchemas(
				gatewayv1alpha1.FlowControlSchema{Name: "u", TokenBucket: &gatewayv1alpha1.TokenBucketFlowControl{QPS: resource.MustParse("1"), Burst: 1}, Distinguisher: gatewayv1alpha1.FlowDistinguisherUser},
				gatewayv1alpha1.FlowControlSchema{Name: "n", MaxRequestsInflight: &gatewayv1alpha1.MaxRequestsInflightFlowControl{Max: 1, CountLongRunning: true}, Distinguisher: gatewayv1alpha1.FlowDistinguisherNamespace},
			),
		},
		{
			name: "schema names",
			mutate: withSchemas(exempt("a"), exempt("a"), exempt(""), exempt("Not_A_Label"),
				exempt("a-very-long-name-that-is-longer-than-sixty-three-characters-xxxxxxx")),
			want: []fieldErr{
				{field.ErrorTypeDuplicate, "spec.flowControl.flowControlSchemas[1].name"},
				{field.ErrorTypeRequired, "spec.flowControl.flowControlSchemas[2].name"},
				{field.ErrorTypeInvalid, "spec.flowControl.flowControlSchemas[3].name"},
				{field.ErrorTypeInvalid, "spec.flowControl.flowControlSchemas[4].name"},
			},
		},
		{
			name:   "no limiter",
			mutate: withSchemas(gatewayv1alpha1.FlowControlSchema{Name: "x"}),
			want:   []fieldErr{{field.ErrorTypeRequired, "spec.flowControl.flowControlSchemas[0]"}},
		},
		{
			name: "several limiters",
			mutate: withSchemas(gatewayv1alpha1.FlowControlSchema{
				Name:                "x",
				Exempt:              &gatewayv1alpha1.ExemptFlowControl{},
				MaxRequestsInflight: &gatewayv1alpha1.MaxRequestsInflightFlowControl{Max: 1},
				TokenBucket:         &gatewayv1alpha1.TokenBucketFlowControl{QPS: resource.MustParse("1"), Burst: 1},
			}, gatewayv1alpha1.FlowControlSchema{
				Name:                "y",
				MaxRequestsInflight: &gatewayv1alpha1.MaxRequestsInflightFlowControl{Max: 1},
				TokenBucket:         &gatewayv1alpha1.TokenBucketFlowControl{QPS: resource.MustParse("1"), Burst: 1},
			}),
			want: []fieldErr{
				{field.ErrorTypeForbidden, "spec.flowControl.flowControlSchemas[0].maxRequestsInflight"},
				{field.ErrorTypeForbidden, "spec.flowControl.flowControlSchemas[0].tokenBucket"},
				{field.ErrorTypeForbidden, "spec.flowControl.flowControlSchemas[1].tokenBucket"},
			},
		},
		{
			name:   "max negative",
			mutate: withSchemas(inflight("a", -1), inflight("b", -100)),
			want: []fieldErr{
				{field.ErrorTypeInvalid, "spec.flowControl.flowControlSchemas[0].maxRequestsInflight.max"},
				{field.ErrorTypeInvalid, "spec.flowControl.flowControlSchemas[1].maxRequestsInflight.max"},
			},
		},
		// max 0 refuses everything: the emergency brake of docs/dispatch.md.
		{name: "max 0 is a brake", mutate: withSchemas(inflight("frozen", 0))},
		{
			name:   "qps and burst not positive",
			mutate: withSchemas(bucket("a", 0, 0), bucket("b", -1, 5), bucket("c", 5, -1)),
			want: []fieldErr{
				{field.ErrorTypeInvalid, "spec.flowControl.flowControlSchemas[0].tokenBucket.qps"},
				{field.ErrorTypeInvalid, "spec.flowControl.flowControlSchemas[0].tokenBucket.burst"},
				{field.ErrorTypeInvalid, "spec.flowControl.flowControlSchemas[1].tokenBucket.qps"},
				{field.ErrorTypeInvalid, "spec.flowControl.flowControlSchemas[2].tokenBucket.burst"},
			},
		},
		{
			name: "distinguisher unknown, or on an exempt schema",
			mutate: withSchemas(
				gatewayv1alpha1.FlowControlSchema{Name: "a", TokenBucket: &gatewayv1alpha1.TokenBucketFlowControl{QPS: resource.MustParse("1"), Burst: 1}, Distinguisher: "user"},
				gatewayv1alpha1.FlowControlSchema{Name: "b", Exempt: &gatewayv1alpha1.ExemptFlowControl{}, Distinguisher: gatewayv1alpha1.FlowDistinguisherUser},
			),
			want: []fieldErr{
				{field.ErrorTypeNotSupported, "spec.flowControl.flowControlSchemas[0].distinguisher"},
				{field.ErrorTypeForbidden, "spec.flowControl.flowControlSchemas[1].distinguisher"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uc := valid()
			tt.mutate(uc)
			assertErrors(t, validation.ValidateUpstreamCluster(uc, opts), tt.want)
			old := valid()
			assertErrors(t, validation.ValidateUpstreamClusterUpdate(uc, old, opts), tt.want)
		})
	}
}

// The examples of KubeGateway's documentation, in our API (upstreamSubset, not
// KubeGateway's misspelled upsteamSubset), are valid as they are, except the one
// it documents as a mistake it silently accepts.
func TestKubeGatewayExamplesValidate(t *testing.T) {
	star := []string{"*"}
	uc := valid()
	uc.Spec.Servers = []gatewayv1alpha1.UpstreamServer{{Endpoint: "https://ip-a:6443"}, {Endpoint: "https://ip-b:6443"}}
	uc.Spec.FlowControl = &gatewayv1alpha1.FlowControl{FlowControlSchemas: []gatewayv1alpha1.FlowControlSchema{
		exempt("exempt"), bucket("tokenbucket", 100, 200), inflight("limited", 1), bucket("list-pod", 10, 20), bucket("limit-user-a", 10, 20),
	}}
	uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{
		{Rules: []rule{{Verbs: star, APIGroups: star, Resources: star}}, FlowControlSchemaName: "exempt"},
		{Rules: []rule{{Verbs: star, NonResourceURLs: star}}},
		{Rules: []rule{{Verbs: []string{"list", "get", "watch"}, APIGroups: star, Resources: star}}, UpstreamSubset: []string{"https://ip-a:6443"}},
		{Rules: []rule{{Verbs: []string{"list"}, APIGroups: star, Resources: []string{"pods"}}}, FlowControlSchemaName: "list-pod"},
		{Rules: []rule{{Verbs: star, APIGroups: star, Resources: star, Users: []string{"user-a"}}}, FlowControlSchemaName: "limit-user-a"},
		{Rules: []rule{{Resources: []string{"pods"}, APIGroups: star, Verbs: star}}},
		{Rules: []rule{{NonResourceURLs: []string{"/healthz", "/healthz/*"}, Verbs: []string{"get", "post"}}}},
		{Rules: []rule{{Resources: []string{"-pods", "-deployments"}, APIGroups: star, Verbs: star}}},
	}
	gatewayv1alpha1.SetObjectDefaults_UpstreamCluster(uc)
	if errs := validation.ValidateUpstreamCluster(uc, opts); len(errs) != 0 {
		t.Fatalf("KubeGateway examples refused: %v", errs)
	}
	uc.Spec.DispatchPolicies = append(uc.Spec.DispatchPolicies, gatewayv1alpha1.DispatchPolicy{
		Name: "mixed", Strategy: gatewayv1alpha1.RoundRobin,
		Rules: []rule{{Resources: []string{"-pods", "deployments"}, APIGroups: star, Verbs: star}},
	})
	errs := validation.ValidateUpstreamCluster(uc, opts)
	assertErrors(t, errs, []fieldErr{{field.ErrorTypeInvalid, "spec.dispatchPolicies[8].rules[0].resources"}})
	if !strings.Contains(errs[0].Error(), `plain entries ("deployments") and "-" exclusions ("-pods")`) {
		t.Errorf("error does not explain the mix: %v", errs[0])
	}
}

// ValidateDispatchPolicyRules is what the data plane's compiler calls: it must
// agree with the whole validation about the rules.
func TestValidateDispatchPolicyRulesPaths(t *testing.T) {
	p := field.NewPath("spec", "dispatchPolicies").Index(3).Child("rules")
	errs := validation.ValidateDispatchPolicyRules([]rule{podsRule(), {Verbs: []string{"get"}, Resources: []string{"pods/*"}, APIGroups: []string{""}}}, p)
	assertErrors(t, errs, []fieldErr{{field.ErrorTypeInvalid, "spec.dispatchPolicies[3].rules[1].resources[0]"}})
	assertErrors(t, validation.ValidateDispatchPolicyRules(nil, p), []fieldErr{{field.ErrorTypeRequired, "spec.dispatchPolicies[3].rules"}})
}

// Messages say what to do, and carry the offending value.
func TestDispatchErrorMessages(t *testing.T) {
	tests := []struct {
		rule rule
		want []string
	}{
		{podsRule(func(r *rule) { r.Resources = []string{"pods/*"} }), []string{`"pods/*"`, "pods/log"}},
		{podsRule(func(r *rule) { r.Verbs = []string{"lsit"} }), []string{`"lsit"`, `"deletecollection"`, `"*"`}},
		{rule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz*"}}, []string{`"/healthz*"`, `trailing "/*"`}},
		{rule{Verbs: []string{"get"}}, []string{"resources", "nonResourceURLs"}},
	}
	for i, tt := range tests {
		errs := validation.ValidateDispatchPolicyRules([]rule{tt.rule}, field.NewPath("rules"))
		msg := fmt.Sprint(errs)
		for _, w := range tt.want {
			if !strings.Contains(msg, w) {
				t.Errorf("case %d: %s does not contain %s", i, msg, w)
			}
		}
	}
}
