package dispatch

import (
	"strings"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/request"
)

// refMatch is the rule semantics of docs/dispatch.md written as plainly as possible, on
// strings, to check the compiled Matcher against (in the table tests and the fuzz
// test). It assumes validated policies.
func refMatch(ps []gatewayv1alpha1.DispatchPolicy, a *request.Attributes) int {
	for i := range ps {
		for j := range ps[i].Rules {
			if refRule(&ps[i].Rules[j], a) {
				return i
			}
		}
	}
	return -1
}

func refRule(r *gatewayv1alpha1.DispatchPolicyRule, a *request.Attributes) bool {
	nonResource := len(r.NonResourceURLs) > 0
	if nonResource == a.IsResourceRequest {
		return false
	}
	if !refList(r.Verbs, a.Verb, false, equal) {
		return false
	}
	if nonResource {
		if !refList(r.NonResourceURLs, a.Path, false, urlEqual) {
			return false
		}
	} else {
		key := a.Resource
		if a.Subresource != "" {
			key += "/" + a.Subresource
		}
		if !refList(r.APIGroups, a.APIGroup, false, equal) ||
			!refList(r.Resources, key, false, resourceEqual) ||
			!refList(r.ResourceNames, a.Name, true, equal) ||
			!refList(r.Namespaces, a.Namespace, true, equal) {
			return false
		}
	}
	var name string
	var groups []string
	if a.User != nil {
		name, groups = a.User.GetName(), a.User.GetGroups()
	}
	if len(r.Users) > 0 || len(r.ServiceAccounts) > 0 {
		subject := len(r.Users) > 0 && refList(r.Users, name, false, userEqual)
		for _, sa := range r.ServiceAccounts {
			subject = subject || name == "system:serviceaccount:"+sa.Namespace+":"+sa.Name
		}
		if !subject {
			return false
		}
	}
	switch {
	case len(r.UserGroups) == 0 || refHasStar(r.UserGroups):
		return true
	case strings.HasPrefix(r.UserGroups[0], "-"):
		for _, g := range groups {
			for _, e := range r.UserGroups {
				if g == e[1:] {
					return false
				}
			}
		}
		return true
	default:
		for _, g := range groups {
			for _, e := range r.UserGroups {
				if g == e {
					return true
				}
			}
		}
		return false
	}
}

func refHasStar(entries []string) bool {
	for _, e := range entries {
		if e == "*" {
			return true
		}
	}
	return false
}

// refList: empty is emptyAny; "*" is anything; only exclusions: none names v;
// otherwise: one names v.
func refList(entries []string, v string, emptyAny bool, eq func(entry, v string) bool) bool {
	if len(entries) == 0 {
		return emptyAny
	}
	if refHasStar(entries) {
		return true
	}
	if strings.HasPrefix(entries[0], "-") {
		for _, e := range entries {
			if eq(e[1:], v) {
				return false
			}
		}
		return true
	}
	for _, e := range entries {
		if eq(e, v) {
			return true
		}
	}
	return false
}

func equal(entry, v string) bool { return entry == v }

func userEqual(entry, v string) bool {
	if p, ok := strings.CutSuffix(entry, "*"); ok {
		return strings.HasPrefix(v, p)
	}
	return entry == v
}

func urlEqual(entry, v string) bool {
	if p, ok := strings.CutSuffix(entry, "*"); ok { // validated: only as "/*"
		return strings.HasPrefix(v, p)
	}
	return entry == v
}

// resourceEqual compares an entry with "resource" or "resource/subresource".
func resourceEqual(entry, key string) bool {
	if sub, ok := strings.CutPrefix(entry, "*/"); ok {
		_, keySub, hasSub := strings.Cut(key, "/")
		return hasSub && keySub == sub
	}
	return entry == key
}
