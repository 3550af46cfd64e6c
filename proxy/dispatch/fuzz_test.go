package dispatch

import (
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/request"
)

// split turns "a,b" into a list; "" is an empty list and "," a list of one "".
func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// FuzzMatch compiles a fuzzed rule (when valid) and checks the Matcher against
// refMatch, the plain reading of the rule semantics, on a fuzzed request.
func FuzzMatch(f *testing.F) {
	type seed struct {
		verbs, groups, resources, names, namespaces, users, userGroups, urls, saNamespace, saName string
		resourceRequest                                                                           bool
		verb, group, resource, subresource, namespace, name, path, userName, groupsOfUser         string
	}
	for _, s := range []seed{
		{verbs: "list", groups: ",", resources: "pods", resourceRequest: true, verb: "list", resource: "pods", namespace: "default", path: "/api/v1/namespaces/default/pods", userName: "alice"},
		{verbs: "-get,-list", groups: "*", resources: "*", resourceRequest: true, verb: "get", resource: "pods", name: "p"},
		{verbs: "*", groups: "apps", resources: "deployments/scale,*/status", names: "api", namespaces: "web", resourceRequest: true, verb: "patch", group: "apps", resource: "deployments", subresource: "scale", namespace: "web", name: "api"},
		{verbs: "*", groups: "-", resources: "-pods,-*/status", namespaces: "-", resourceRequest: true, verb: "get", group: "apps", resource: "pods", subresource: "log"},
		{verbs: "get", groups: "*", resources: "*", users: "system:node:*,alice", userGroups: "-system:masters", resourceRequest: true, verb: "get", resource: "nodes", userName: "system:node:n1", groupsOfUser: "system:nodes"},
		{verbs: "get", groups: "*", resources: "*", saNamespace: "kube-system", saName: "coredns", resourceRequest: true, verb: "get", resource: "pods", userName: "system:serviceaccount:kube-system:coredns"},
		{verbs: "get,head", urls: "/healthz,/healthz/*", verb: "get", path: "/healthz/etcd"},
		{verbs: "-post", urls: "-/metrics,-/livez/*", verb: "get", path: "/livez"},
		{verbs: "get", urls: "*", userGroups: "*", verb: "get", path: "/"},
		{verbs: "get", resources: "pods", urls: "/x", verb: "get", path: "/x"},
	} {
		f.Add(s.verbs, s.groups, s.resources, s.names, s.namespaces, s.users, s.userGroups, s.urls, s.saNamespace, s.saName,
			s.resourceRequest, s.verb, s.group, s.resource, s.subresource, s.namespace, s.name, s.path, s.userName, s.groupsOfUser)
	}
	f.Fuzz(func(t *testing.T, verbs, groups, resources, names, namespaces, users, userGroups, urls, saNamespace, saName string,
		resourceRequest bool, verb, group, resource, subresource, namespace, name, path, userName, groupsOfUser string) {
		r := gatewayv1alpha1.DispatchPolicyRule{
			Verbs: split(verbs), APIGroups: split(groups), Resources: split(resources), ResourceNames: split(names),
			Namespaces: split(namespaces), Users: split(users), UserGroups: split(userGroups), NonResourceURLs: split(urls),
		}
		if saNamespace != "" || saName != "" {
			r.ServiceAccounts = []gatewayv1alpha1.ServiceAccountReference{{Namespace: saNamespace, Name: saName}}
		}
		ps := policies([]gatewayv1alpha1.DispatchPolicyRule{r}, []gatewayv1alpha1.DispatchPolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"/fallback"}}})
		m, err := Compile(ps)
		if err != nil {
			if m != nil {
				t.Fatalf("Compile returned a matcher and %v", err)
			}
			return
		}
		if strings.Contains(resource, "/") || strings.Contains(subresource, "/") {
			return // no request has such attributes; the reference joins them with "/"
		}
		a := request.Attributes{
			IsResourceRequest: resourceRequest, Verb: verb, APIGroup: group, Resource: resource, Subresource: subresource,
			Namespace: namespace, Name: name, Path: path,
		}
		if userName != "" || groupsOfUser != "" {
			a.User = &user.DefaultInfo{Name: userName, Groups: split(groupsOfUser)}
		}
		got, want := m.Match(&a), refMatch(ps, &a)
		if got != want {
			t.Fatalf("rule %+v\nrequest %+v (user %v)\nMatch = %d, reference = %d", r, a, a.User, got, want)
		}
	})
}
