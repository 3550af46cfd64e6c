package dispatch

import (
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/request"
)

type specRule = gatewayv1alpha1.DispatchPolicyRule

var (
	star = []string{"*"}

	alice   = &user.DefaultInfo{Name: "alice", Groups: []string{"dev", "system:authenticated"}}
	bob     = &user.DefaultInfo{Name: "bob", Groups: []string{"ops", "system:authenticated"}}
	admin   = &user.DefaultInfo{Name: "root", Groups: []string{"system:masters", "system:authenticated"}}
	coredns = &user.DefaultInfo{Name: "system:serviceaccount:kube-system:coredns",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	node1    = &user.DefaultInfo{Name: "system:node:n1", Groups: []string{"system:nodes", "system:authenticated"}}
	nogroups = &user.DefaultInfo{Name: "lonely"}
)

// req parses a request the way the proxy does; "GET /path?query".
func req(t testing.TB, line string, u user.Info) request.Attributes {
	t.Helper()
	method, target, _ := strings.Cut(line, " ")
	path, query, _ := strings.Cut(target, "?")
	a, err := request.Parse(method, path, query, u)
	if err != nil {
		t.Fatalf("Parse(%q): %v", line, err)
	}
	return a
}

// policies makes one policy per rule set, defaulted as the API server does.
func policies(ruleSets ...[]specRule) []gatewayv1alpha1.DispatchPolicy {
	ps := make([]gatewayv1alpha1.DispatchPolicy, len(ruleSets))
	for i, rs := range ruleSets {
		ps[i] = gatewayv1alpha1.DispatchPolicy{Rules: rs}
	}
	uc := &gatewayv1alpha1.UpstreamCluster{Spec: gatewayv1alpha1.UpstreamClusterSpec{DispatchPolicies: ps}}
	gatewayv1alpha1.SetDefaults_UpstreamCluster(uc)
	return uc.Spec.DispatchPolicies
}

// res is a resource rule.
func res(verbs, groups, resources []string, more ...func(*specRule)) specRule {
	r := specRule{Verbs: verbs, APIGroups: groups, Resources: resources}
	for _, m := range more {
		m(&r)
	}
	return r
}

// anyRes matches every resource request (of these verbs), with more fields set.
func anyRes(more ...func(*specRule)) specRule { return res(star, star, star, more...) }

// nonRes is a non-resource rule.
func nonRes(verbs, urls []string, more ...func(*specRule)) specRule {
	r := specRule{Verbs: verbs, NonResourceURLs: urls}
	for _, m := range more {
		m(&r)
	}
	return r
}

func l(v ...string) []string { return v }

type probe struct {
	line string
	user user.Info
	want int
}

func TestMatch(t *testing.T) {
	tests := []struct {
		name     string
		policies []gatewayv1alpha1.DispatchPolicy
		probes   []probe
	}{
		{
			name:     "verbs: plain",
			policies: policies([]specRule{res(l("list", "watch"), star, star)}),
			probes: []probe{
				{"GET /api/v1/pods", alice, 0},
				{"GET /api/v1/pods?watch=true", alice, 0},
				{"GET /api/v1/watch/pods", alice, 0},
				{"GET /api/v1/namespaces/a/pods/p", alice, -1},
				{"POST /api/v1/namespaces/a/pods", alice, -1},
			},
		},
		{
			name: "verbs: every verb form",
			policies: policies(
				[]specRule{res(l("get"), star, star)}, []specRule{res(l("list"), star, star)}, []specRule{res(l("watch"), star, star)},
				[]specRule{res(l("create"), star, star)}, []specRule{res(l("update"), star, star)}, []specRule{res(l("patch"), star, star)},
				[]specRule{res(l("delete"), star, star)}, []specRule{res(l("deletecollection"), star, star)},
			),
			probes: []probe{
				{"GET /api/v1/namespaces/a/pods/p", alice, 0},
				{"HEAD /api/v1/namespaces/a/pods/p", alice, 0},
				{"GET /api/v1/namespaces/a/pods", alice, 1},
				{"GET /api/v1/namespaces/a/pods?watch=1", alice, 2},
				{"POST /api/v1/namespaces/a/pods", alice, 3},
				{"PUT /api/v1/namespaces/a/pods/p", alice, 4},
				{"PATCH /api/v1/namespaces/a/pods/p", alice, 5},
				{"DELETE /api/v1/namespaces/a/pods/p", alice, 6},
				{"DELETE /api/v1/namespaces/a/pods", alice, 7},
				{"OPTIONS /api/v1/namespaces/a/pods", alice, -1}, // verb ""
			},
		},
		{
			name:     "verbs: *",
			policies: policies([]specRule{res(star, star, star)}),
			probes: []probe{
				{"OPTIONS /api/v1/namespaces/a/pods", alice, 0},
				{"GET /api/v1/proxy/nodes/n1/x", alice, 0}, // legacy verb "proxy"
				{"DELETE /api/v1/namespaces/a/pods", alice, 0},
			},
		},
		{
			// KubeGateway ORs exclusions: [-get, -list] matches get (not list) and
			// list (not get). Ours matches neither.
			name:     "verbs: exclusions",
			policies: policies([]specRule{res(l("-get", "-list"), star, star)}),
			probes: []probe{
				{"GET /api/v1/namespaces/a/pods/p", alice, -1},
				{"GET /api/v1/namespaces/a/pods", alice, -1},
				{"GET /api/v1/namespaces/a/pods?watch=true", alice, 0},
				{"POST /api/v1/namespaces/a/pods", alice, 0},
				{"OPTIONS /api/v1/namespaces/a/pods", alice, 0}, // verb "": not named
			},
		},
		{
			name:     "verbs: non-resource methods",
			policies: policies([]specRule{nonRes(l("get", "head"), star)}, []specRule{nonRes(l("-get", "-head"), star)}),
			probes: []probe{
				{"GET /healthz", alice, 0},
				{"HEAD /healthz", alice, 0},
				{"POST /healthz", alice, 1},
				{"OPTIONS /", alice, 1},
				{"PROPFIND /x", alice, 1},
			},
		},
		{
			name: "apiGroups",
			policies: policies(
				[]specRule{res(star, l(""), star)},
				[]specRule{res(star, l("apps", "batch"), star)},
				[]specRule{res(star, l("-apps", "-"), star)},
			),
			probes: []probe{
				{"GET /api/v1/pods", alice, 0},
				{"GET /apis/apps/v1/deployments", alice, 1},
				{"GET /apis/batch/v1/jobs", alice, 1},
				{"GET /apis/rbac.authorization.k8s.io/v1/clusterroles", alice, 2},
			},
		},
		{
			name:     "apiGroups: exclusion of the core group",
			policies: policies([]specRule{res(star, l("-"), star)}),
			probes: []probe{
				{"GET /api/v1/pods", alice, -1},
				{"GET /apis/apps/v1/deployments", alice, 0},
			},
		},
		{
			name: "resources: resource, subresource, */sub",
			policies: policies(
				[]specRule{res(star, star, l("pods"))},
				[]specRule{res(star, star, l("pods/log", "deployments/scale"))},
				[]specRule{res(star, star, l("*/status"))},
			),
			probes: []probe{
				{"GET /api/v1/namespaces/a/pods/p", alice, 0},
				{"GET /api/v1/namespaces/a/pods", alice, 0},
				{"GET /api/v1/namespaces/a/pods/p/log", alice, 1},
				{"PATCH /apis/apps/v1/namespaces/a/deployments/d/scale", alice, 1},
				{"PUT /api/v1/namespaces/a/pods/p/status", alice, 2}, // pods does not match pods/status
				{"PATCH /api/v1/nodes/n1/status", alice, 2},
				{"PUT /apis/apps/v1/namespaces/a/deployments/d/status", alice, 2},
				{"GET /apis/apps/v1/namespaces/a/deployments/d", alice, -1},
				{"POST /api/v1/namespaces/a/pods/p/exec", alice, -1},
				{"PUT /api/v1/namespaces/ns1/finalize", alice, -1},
			},
		},
		{
			name:     "resources: *",
			policies: policies([]specRule{res(star, star, star)}),
			probes: []probe{
				{"POST /api/v1/namespaces/a/pods/p/exec", alice, 0},
				{"GET /apis/x.example.com/v1/widgets", alice, 0},
				{"GET /version", alice, -1}, // a resource rule never matches a non-resource request
				{"GET /apis/apps/v1", alice, -1},
			},
		},
		{
			name:     "resources: exclusions (KubeGateway: all but pods and deployments)",
			policies: policies([]specRule{res(star, star, l("-pods", "-deployments"))}),
			probes: []probe{
				{"GET /api/v1/namespaces/a/pods", alice, -1},
				{"GET /apis/apps/v1/namespaces/a/deployments/d", alice, -1},
				{"GET /api/v1/namespaces/a/services", alice, 0},
				// -pods excludes the pods resource, not its subresources.
				{"GET /api/v1/namespaces/a/pods/p/log", alice, 0},
			},
		},
		{
			name:     "resources: exclusion of subresources",
			policies: policies([]specRule{res(star, star, l("-*/status", "-pods/log"))}),
			probes: []probe{
				{"PUT /api/v1/namespaces/a/pods/p/status", alice, -1},
				{"GET /api/v1/namespaces/a/pods/p/log", alice, -1},
				{"GET /api/v1/namespaces/a/pods/p", alice, 0},
				{"GET /api/v1/namespaces/a/services/s/proxy/x", alice, 0},
			},
		},
		{
			name: "resourceNames",
			policies: policies(
				[]specRule{res(star, star, l("configmaps"), func(r *specRule) { r.ResourceNames = l("cfg", "other") })},
				[]specRule{res(star, star, l("secrets"), func(r *specRule) { r.ResourceNames = l("-token") })},
			),
			probes: []probe{
				{"GET /api/v1/namespaces/a/configmaps/cfg", alice, 0},
				{"PUT /api/v1/namespaces/a/configmaps/other", alice, 0},
				{"GET /api/v1/namespaces/a/configmaps/x", alice, -1},
				{"GET /api/v1/namespaces/a/configmaps", alice, -1},                                        // list: no name
				{"GET /api/v1/namespaces/a/configmaps?fieldSelector=metadata.name%3Dcfg", alice, 0},       // as in RBAC
				{"GET /api/v1/namespaces/a/configmaps?watch=1&fieldSelector=metadata.name=cfg", alice, 0}, // watch one
				{"GET /api/v1/namespaces/a/secrets/token", alice, -1},
				{"GET /api/v1/namespaces/a/secrets/x", alice, 1},
				{"GET /api/v1/namespaces/a/secrets", alice, 1}, // the name "" is not excluded
			},
		},
		{
			name: "namespaces",
			policies: policies(
				[]specRule{anyRes(func(r *specRule) { r.Namespaces = l("default", "web") })},
				[]specRule{anyRes(func(r *specRule) { r.Namespaces = l("") })},
				[]specRule{anyRes(func(r *specRule) { r.Namespaces = l("-kube-system") })},
			),
			probes: []probe{
				{"GET /api/v1/namespaces/default/pods", alice, 0},
				{"GET /apis/apps/v1/namespaces/web/deployments/d", alice, 0},
				{"GET /api/v1/namespaces/web", alice, 0}, // the namespace object itself
				{"GET /api/v1/nodes", alice, 1},
				{"GET /api/v1/pods", alice, 1}, // all namespaces: cluster-wide
				{"GET /api/v1/namespaces", alice, 1},
				{"GET /api/v1/namespaces/kube-system/pods", alice, -1},
				{"GET /api/v1/namespaces/other/pods", alice, 2},
			},
		},
		{
			name:     "namespaces: exclusions match cluster-scoped requests",
			policies: policies([]specRule{anyRes(func(r *specRule) { r.Namespaces = l("-kube-system") })}),
			probes: []probe{
				{"GET /api/v1/nodes", alice, 0},
				{"GET /api/v1/namespaces/kube-system", alice, -1},
			},
		},
		{
			name:     "namespaces: all but cluster-scoped",
			policies: policies([]specRule{anyRes(func(r *specRule) { r.Namespaces = l("-") })}),
			probes: []probe{
				{"GET /api/v1/nodes", alice, -1},
				{"GET /api/v1/namespaces/a/pods", alice, 0},
			},
		},
		{
			name: "users: exact, prefix glob, *",
			policies: policies(
				[]specRule{anyRes(func(r *specRule) { r.Users = l("alice") })},
				[]specRule{anyRes(func(r *specRule) { r.Users = l("system:node:*") })},
				[]specRule{anyRes(func(r *specRule) { r.Users = star })},
			),
			probes: []probe{
				{"GET /api/v1/pods", alice, 0},
				{"GET /api/v1/pods", node1, 1},
				{"GET /api/v1/pods", bob, 2},
				{"GET /api/v1/pods", nil, 2},
			},
		},
		{
			name:     "users: alice is not a prefix",
			policies: policies([]specRule{anyRes(func(r *specRule) { r.Users = l("alice") })}),
			probes: []probe{
				{"GET /api/v1/pods", &user.DefaultInfo{Name: "alice2"}, -1},
				{"GET /api/v1/pods", &user.DefaultInfo{Name: "alic"}, -1},
				{"GET /api/v1/pods", nil, -1},
			},
		},
		{
			name:     "users: exclusions with a glob",
			policies: policies([]specRule{anyRes(func(r *specRule) { r.Users = l("-system:*", "-root") })}),
			probes: []probe{
				{"GET /api/v1/pods", alice, 0},
				{"GET /api/v1/pods", admin, -1},
				{"GET /api/v1/pods", node1, -1},
				{"GET /api/v1/pods", coredns, -1},
				{"GET /api/v1/pods", nil, 0}, // the name "" is not excluded
			},
		},
		{
			name: "serviceAccounts",
			policies: policies([]specRule{anyRes(func(r *specRule) {
				r.ServiceAccounts = []gatewayv1alpha1.ServiceAccountReference{{Namespace: "kube-system", Name: "coredns"}}
			})}),
			probes: []probe{
				{"GET /api/v1/pods", coredns, 0},
				{"GET /api/v1/pods", alice, -1},
				{"GET /api/v1/pods", &user.DefaultInfo{Name: "system:serviceaccount:kube-system:coredns2"}, -1},
				{"GET /api/v1/pods", &user.DefaultInfo{Name: "system:serviceaccount:kube-systemx:coredns"}, -1},
				{"GET /api/v1/pods", nil, -1},
			},
		},
		{
			name: "users or serviceAccounts",
			policies: policies([]specRule{anyRes(func(r *specRule) {
				r.Users = l("alice")
				r.ServiceAccounts = []gatewayv1alpha1.ServiceAccountReference{{Namespace: "kube-system", Name: "coredns"}}
			})}),
			probes: []probe{
				{"GET /api/v1/pods", coredns, 0},
				{"GET /api/v1/pods", alice, 0},
				{"GET /api/v1/pods", bob, -1},
			},
		},
		{
			name: "userGroups",
			policies: policies(
				[]specRule{anyRes(func(r *specRule) { r.UserGroups = l("system:masters", "ops") })},
				[]specRule{anyRes(func(r *specRule) { r.UserGroups = l("-system:serviceaccounts", "-system:nodes") })},
				[]specRule{anyRes(func(r *specRule) { r.UserGroups = star })},
			),
			probes: []probe{
				{"GET /api/v1/pods", admin, 0},
				{"GET /api/v1/pods", bob, 0},
				{"GET /api/v1/pods", alice, 1},
				{"GET /api/v1/pods", nogroups, 1},
				// in an excluded group (and in others that are not): not matched
				{"GET /api/v1/pods", coredns, 2},
				{"GET /api/v1/pods", node1, 2},
				{"GET /api/v1/pods", nil, 1},
			},
		},
		{
			name:     "userGroups: * matches a user in no group",
			policies: policies([]specRule{anyRes(func(r *specRule) { r.UserGroups = star })}),
			probes:   []probe{{"GET /api/v1/pods", nogroups, 0}, {"GET /api/v1/pods", nil, 0}},
		},
		{
			name: "every field of one rule ANDed",
			policies: policies([]specRule{res(l("update", "patch"), l("apps"), l("deployments/scale"), func(r *specRule) {
				r.Namespaces = l("web")
				r.ResourceNames = l("api")
				r.Users = l("alice")
				r.UserGroups = l("dev")
			})}),
			probes: []probe{
				{"PATCH /apis/apps/v1/namespaces/web/deployments/api/scale", alice, 0},
				{"PUT /apis/apps/v1/namespaces/web/deployments/api/scale", alice, 0},
				{"GET /apis/apps/v1/namespaces/web/deployments/api/scale", alice, -1},                              // verb
				{"PATCH /apis/extensions/v1beta1/namespaces/web/deployments/api/scale", alice, -1},                 // group
				{"PATCH /apis/apps/v1/namespaces/web/statefulsets/api/scale", alice, -1},                           // resource
				{"PATCH /apis/apps/v1/namespaces/web/deployments/api", alice, -1},                                  // subresource
				{"PATCH /apis/apps/v1/namespaces/app/deployments/api/scale", alice, -1},                            // namespace
				{"PATCH /apis/apps/v1/namespaces/web/deployments/web/scale", alice, -1},                            // name
				{"PATCH /apis/apps/v1/namespaces/web/deployments/api/scale", bob, -1},                              // user
				{"PATCH /apis/apps/v1/namespaces/web/deployments/api/scale", &user.DefaultInfo{Name: "alice"}, -1}, // groups
			},
		},
		{
			name: "nonResourceURLs",
			policies: policies(
				[]specRule{nonRes(star, l("/healthz/*"))},
				[]specRule{nonRes(star, l("/version", "/openapi/*"))},
				[]specRule{nonRes(star, l("-/metrics", "-/livez/*"))},
			),
			probes: []probe{
				{"GET /healthz/etcd", alice, 0},
				{"GET /healthz/", alice, 0},
				{"GET /healthz/poststarthook/x", alice, 0},
				{"GET /healthz", alice, 2}, // /healthz/* is not /healthz
				{"GET /healthzx", alice, 2},
				{"GET /version", alice, 1},
				{"GET /version/", alice, 2}, // exact
				{"GET /openapi/v3/apis/apps/v1", alice, 1},
				{"GET /metrics", alice, -1},
				{"GET /livez/ping", alice, -1},
				{"GET /livez", alice, 2},
				{"GET /api/v1/pods", alice, -1}, // a non-resource rule never matches a resource request
			},
		},
		{
			name:     "nonResourceURLs: *, /*",
			policies: policies([]specRule{nonRes(star, l("/*"))}, []specRule{nonRes(star, star)}),
			probes: []probe{
				{"GET /", alice, 0},
				{"GET /anything/at/all", alice, 0},
				{"GET /apis", alice, 0},
				{"GET /api/v1/pods", alice, -1},
			},
		},
		{
			name:     "nonResourceURLs: discovery paths under /api and /apis are non-resource",
			policies: policies([]specRule{nonRes(l("get"), l("/api", "/api/*", "/apis", "/apis/*"))}),
			probes: []probe{
				{"GET /api", alice, 0},
				{"GET /api/v1", alice, 0},
				{"GET /apis", alice, 0},
				{"GET /apis/apps", alice, 0},
				{"GET /apis/apps/v1", alice, 0},
				{"GET /apis/apps/v1/deployments", alice, -1},
			},
		},
		{
			name: "rules of a policy are ORed; first policy wins",
			policies: policies(
				[]specRule{res(l("list"), l(""), l("pods")), nonRes(l("get"), l("/version"))},
				[]specRule{res(star, star, star)},
				[]specRule{res(l("list"), l(""), l("pods"))},
			),
			probes: []probe{
				{"GET /api/v1/pods", alice, 0},
				{"GET /version", alice, 0},
				{"GET /api/v1/nodes", alice, 1},
				{"GET /healthz", alice, -1},
			},
		},
		{
			// "freeze everything but node heartbeats": leases in kube-node-lease
			// and nodes/status go to an exempt schema; everything else to a
			// schema that admits (almost) nothing.
			name: "emergency brake",
			policies: policies(
				[]specRule{
					res(l("get", "create", "update", "patch"), l("coordination.k8s.io"), l("leases"), func(r *specRule) { r.Namespaces = l("kube-node-lease") }),
					res(l("get", "update", "patch"), l(""), l("nodes/status")),
				},
				[]specRule{anyRes(), nonRes(star, star)},
			),
			probes: []probe{
				{"PUT /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", node1, 0},
				{"PATCH /api/v1/nodes/n1/status", node1, 0},
				{"PUT /apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler", node1, 1},
				{"GET /api/v1/pods", alice, 1},
				{"GET /healthz", alice, 1},
			},
		},
		{
			name:     "no policies",
			policies: nil,
			probes:   []probe{{"GET /api/v1/pods", alice, -1}, {"GET /healthz", alice, -1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Compile(tt.policies)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			for _, p := range tt.probes {
				a := req(t, p.line, p.user)
				if got := m.Match(&a); got != p.want {
					name := "<nil>"
					if p.user != nil {
						name = p.user.GetName()
					}
					t.Errorf("%s as %s: policy %d, want %d (attributes %+v)", p.line, name, got, p.want, a)
				}
				if got, want := m.Match(&a), refMatch(tt.policies, &a); got != want {
					t.Errorf("%s: Match %d, reference %d", p.line, got, want)
				}
			}
		})
	}
}

// The examples of KubeGateway's documentation (docs/en/design.md and
// quick_start.md), in our API. Where our meaning differs, the probe says so.
func TestKubeGatewayExamples(t *testing.T) {
	t.Run("quick start: everything, resource and non-resource", func(t *testing.T) {
		m := mustCompile(t, policies([]specRule{res(star, star, star)}, []specRule{nonRes(star, star)}))
		expect(t, m, probe{"GET /api/v1/pods", alice, 0}, probe{"POST /apis/apps/v1/namespaces/a/deployments", alice, 0},
			probe{"GET /healthz", alice, 1}, probe{"GET /api", alice, 1})
	})
	t.Run("read-write separation", func(t *testing.T) {
		m := mustCompile(t, policies([]specRule{res(l("list", "get", "watch"), star, star)}, []specRule{res(star, star, star)}))
		expect(t, m, probe{"GET /api/v1/pods", alice, 0}, probe{"GET /api/v1/namespaces/a/pods/p", alice, 0},
			probe{"GET /api/v1/pods?watch=true", alice, 0}, probe{"POST /api/v1/namespaces/a/pods", alice, 1},
			probe{"DELETE /api/v1/namespaces/a/pods/p", alice, 1},
			// Non-resource requests are matched by no resource rule: they go
			// to every enabled server (KubeGateway: the same).
			probe{"GET /version", alice, -1})
	})
	t.Run("restricting list pods", func(t *testing.T) {
		m := mustCompile(t, policies([]specRule{res(l("list"), star, l("pods"))}))
		expect(t, m, probe{"GET /api/v1/pods", alice, 0}, probe{"GET /api/v1/namespaces/a/pods", alice, 0},
			probe{"GET /api/v1/pods?watch=true", alice, -1}, probe{"GET /api/v1/namespaces/a/pods/p", alice, -1})
	})
	t.Run("limiting user-a", func(t *testing.T) {
		m := mustCompile(t, policies([]specRule{res(star, star, star, func(r *specRule) { r.Users = l("user-a") })}))
		expect(t, m, probe{"GET /api/v1/pods", &user.DefaultInfo{Name: "user-a"}, 0}, probe{"GET /api/v1/pods", alice, -1})
	})
	t.Run("all operations on pods", func(t *testing.T) {
		m := mustCompile(t, policies([]specRule{res(star, star, l("pods"))}))
		// As in RBAC, "pods" names the resource, not its subresources.
		expect(t, m, probe{"DELETE /api/v1/namespaces/a/pods/p", alice, 0}, probe{"GET /api/v1/namespaces/a/pods/p/log", alice, -1})
	})
	t.Run("non-resource suffix glob", func(t *testing.T) {
		m := mustCompile(t, policies([]specRule{nonRes(l("get", "post"), l("/healthz", "/healthz/*"))}))
		expect(t, m, probe{"GET /healthz", alice, 0}, probe{"POST /healthz/etcd", alice, 0},
			probe{"PUT /healthz", alice, -1}, probe{"GET /healthzx", alice, -1})
	})
	t.Run("anti-selection: all but pods and deployments", func(t *testing.T) {
		m := mustCompile(t, policies([]specRule{res(star, star, l("-pods", "-deployments"))}))
		expect(t, m, probe{"GET /api/v1/pods", alice, -1}, probe{"GET /apis/apps/v1/deployments", alice, -1},
			probe{"GET /api/v1/services", alice, 0})
	})
	t.Run("anti-selection mixed with a plain entry is refused (KubeGateway drops -pods)", func(t *testing.T) {
		_, err := Compile(policies([]specRule{res(star, star, l("-pods", "deployments"))}))
		if err == nil || !strings.Contains(err.Error(), "spec.dispatchPolicies[0].rules[0].resources") {
			t.Fatalf("Compile = %v, want an error at resources", err)
		}
	})
	t.Run("ORed exclusions: [-get, -list] (KubeGateway matches both get and list)", func(t *testing.T) {
		m := mustCompile(t, policies([]specRule{res(l("-get", "-list"), star, star)}))
		expect(t, m, probe{"GET /api/v1/namespaces/a/pods/p", alice, -1}, probe{"GET /api/v1/pods", alice, -1},
			probe{"POST /api/v1/namespaces/a/pods", alice, 0})
	})
	t.Run("users empty, serviceAccounts empty: everyone", func(t *testing.T) {
		m := mustCompile(t, policies([]specRule{res(star, star, star)}))
		expect(t, m, probe{"GET /api/v1/pods", coredns, 0}, probe{"GET /api/v1/pods", alice, 0})
	})
}

func mustCompile(t *testing.T, ps []gatewayv1alpha1.DispatchPolicy) *Matcher {
	t.Helper()
	m, err := Compile(ps)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return m
}

func expect(t *testing.T, m *Matcher, probes ...probe) {
	t.Helper()
	for _, p := range probes {
		a := req(t, p.line, p.user)
		if got := m.Match(&a); got != p.want {
			t.Errorf("%s as %v: policy %d, want %d", p.line, p.user, got, p.want)
		}
	}
}

func TestCompileRefusesWhatValidationRefuses(t *testing.T) {
	for _, tt := range []struct {
		name  string
		rules []specRule
		path  string
	}{
		{"no rules", nil, "spec.dispatchPolicies[0].rules"},
		{"both kinds", []specRule{{Verbs: star, APIGroups: star, Resources: star, NonResourceURLs: star}}, "spec.dispatchPolicies[0].rules[0].apiGroups"},
		{"res/*", []specRule{res(star, star, l("pods/*"))}, "spec.dispatchPolicies[0].rules[0].resources[0]"},
		{"mixed", []specRule{res(l("get", "-list"), star, star)}, "spec.dispatchPolicies[0].rules[0].verbs:"},
		{"no verbs", []specRule{res(nil, star, star)}, "spec.dispatchPolicies[0].rules[0].verbs"},
		{"url glob", []specRule{nonRes(star, l("/healthz*"))}, "spec.dispatchPolicies[0].rules[0].nonResourceURLs[0]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Compile(policies(tt.rules))
			if err == nil || m != nil || !strings.Contains(err.Error(), tt.path) {
				t.Fatalf("Compile = %v, %v; want an error at %s", m, err, tt.path)
			}
		})
	}
	// Policy-level fields are not the matcher's business: a policy with an
	// unknown schema or subset still compiles (validation refuses it).
	ps := policies([]specRule{res(star, star, star)})
	ps[0].UpstreamSubset, ps[0].FlowControlSchemaName, ps[0].Strategy = l("https://nowhere"), "missing", ""
	if _, err := Compile(ps); err != nil {
		t.Fatalf("Compile: %v", err)
	}
}

func TestNilMatcher(t *testing.T) {
	var m *Matcher
	a := req(t, "GET /api/v1/pods", alice)
	if got := m.Match(&a); got != -1 {
		t.Fatalf("nil matcher matched %d", got)
	}
}

// Large lists are compiled into maps; they must behave as small ones.
func TestLargeLists(t *testing.T) {
	var many, manyRes, manyNeg []string
	for i := 0; i < 3*mapThreshold; i++ {
		n := string(rune('a'+i%26)) + strings.Repeat("x", i)
		many = append(many, n)
		manyRes = append(manyRes, n, n+"/status")
		manyNeg = append(manyNeg, "-"+n)
	}
	manyRes = append(manyRes, "*/scale")
	m := mustCompile(t, policies(
		[]specRule{res(star, star, manyRes, func(r *specRule) { r.Namespaces = many; r.UserGroups = append(l("dev"), many...) })},
		[]specRule{res(star, star, manyNeg, func(r *specRule) { r.Users = append(manyNeg, "-x*") })},
	))
	last := many[len(many)-1]
	expect(t, m,
		probe{"GET /api/v1/namespaces/" + many[3] + "/" + last, alice, 0},
		probe{"GET /api/v1/namespaces/" + many[3] + "/" + last + "/x/status", alice, 0},
		probe{"GET /api/v1/namespaces/" + many[3] + "/" + last + "/x/scale", alice, 0},
		probe{"GET /api/v1/namespaces/" + many[3] + "/" + last + "/x/log", alice, 1},
		probe{"GET /api/v1/namespaces/" + many[3] + "/" + last, bob, -1},             // not in the groups; excluded resource
		probe{"GET /api/v1/namespaces/" + many[3] + "/pods", bob, 1},                 // not excluded
		probe{"GET /api/v1/namespaces/nope/" + last, alice, -1},                      // namespace
		probe{"GET /api/v1/namespaces/nope/pods", &user.DefaultInfo{Name: "xy"}, -1}, // excluded user glob
	)
}

func TestMatchDoesNotAllocate(t *testing.T) {
	m, a := benchmarkMatcher(t, true)
	if got := testing.AllocsPerRun(100, func() { m.Match(&a) }); got != 0 {
		t.Errorf("Match allocates %v times per call", got)
	}
}
