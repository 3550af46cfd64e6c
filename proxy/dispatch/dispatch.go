// Package dispatch compiles an UpstreamCluster's spec.dispatchPolicies into a
// Matcher that finds, for each proxied request, the first policy matching it.
//
// The semantics are those of docs/dispatch.md ("Rules"):
//
//   - Policies are tried in order and the first match wins; the rules of a policy
//     are ORed; the fields of a rule are ANDed.
//   - A rule is a resource rule (resources set) or a non-resource rule
//     (nonResourceURLs set). A resource rule never matches a non-resource request
//     and a non-resource rule never matches a resource request.
//   - In every list, "*" matches every value. A list made only of "-" entries
//     matches every value none of them names: [-get, -list] matches neither get nor
//     list (KubeGateway ORs exclusions, so that it matches get). Validation refuses
//     lists mixing plain and "-" entries, and "-*".
//   - verbs: required, as in RBAC (validation refuses an empty list). Resource
//     requests carry Kubernetes verbs, non-resource requests the lower-cased HTTP
//     method.
//   - apiGroups: required in resource rules, as in RBAC; "" is the core group.
//   - resources: "pods" matches the pods resource only, not pods/status; "pods/log"
//     the log subresource of pods; "*/status" the status subresource of every
//     resource; "*" every resource and subresource. So [-pods] matches pods/log:
//     exclude subresources by name. "pods/*" is invalid.
//   - resourceNames, namespaces, userGroups: empty matches any. The namespace of a
//     cluster-scoped request is "", so namespaces [""] selects cluster-scoped
//     requests, and a request for a namespace object itself has that namespace.
//     Requests without a name (list, create) have the name "", so resourceNames
//     [web-0] does not match them, unless a metadata.name field selector names it.
//   - userGroups [a, b]: the user is in a or b. [-a, -b]: the user is in neither.
//     ["*"]: any user, even one in no group.
//   - users and serviceAccounts: both empty matches any user. Otherwise a request
//     matches when its user matches users or is one of serviceAccounts (user
//     system:serviceaccount:<namespace>:<name>). A trailing "*" in users is a
//     prefix glob ("system:node:*"), also in exclusions ("-system:*").
//   - nonResourceURLs: an exact path, or "/p/*" matching every path beginning with
//     "/p/" ("/healthz/*" matches "/healthz/etcd" and "/healthz/", not "/healthz"
//     nor "/healthzx"; list "/healthz" too for both), or "*".
//
// Compile leaves every check to validation.ValidateDispatchPolicyRules, which it
// calls: it refuses exactly the rules the API refuses, and matches the rest.
package dispatch

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1/validation"
	"github.com/kubewharf/kube-gateway/proxy/request"
)

// Matcher is spec.dispatchPolicies compiled once per UpstreamCluster generation;
// immutable, safe for concurrent use. A nil Matcher matches nothing.
type Matcher struct {
	// rules of every policy, flattened in order.
	rules []rule
	// kinds[i] is the kind and verbs of rules[i], scanned before the rule itself:
	// most rules are told apart by those, and a dense slice of them stays in cache.
	kinds []kindMask
}

// Compile compiles policies. It fails only on rules validation refuses.
func Compile(policies []gatewayv1alpha1.DispatchPolicy) (*Matcher, error) {
	var errs field.ErrorList
	for i := range policies {
		errs = append(errs, validation.ValidateDispatchPolicyRules(policies[i].Rules,
			field.NewPath("spec", "dispatchPolicies").Index(i).Child("rules"))...)
	}
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	m := &Matcher{}
	for i := range policies {
		for j := range policies[i].Rules {
			r := compileRule(i, &policies[i].Rules[j])
			m.rules = append(m.rules, r)
			m.kinds = append(m.kinds, kindOf(r.nonResource, r.verbs))
		}
	}
	return m, nil
}

// Match returns the index of the first policy matching a, or -1. It does not
// allocate.
func (m *Matcher) Match(a *request.Attributes) int {
	if m == nil {
		return -1
	}
	kind := kindOf(!a.IsResourceRequest, verbBit(a.Verb))
	var userName string
	var groups []string
	if a.User != nil {
		userName, groups = a.User.GetName(), a.User.GetGroups()
	}
	for i, k := range m.kinds {
		if k&kind != 0 && m.rules[i].matches(a, userName, groups) {
			return m.rules[i].policy
		}
	}
	return -1
}

// kindMask holds the verbs of resource rules (or requests) in its upper half, and
// those of non-resource rules in its lower half: one AND tells whether a rule can
// match a request by kind and verb.
type kindMask uint32

func kindOf(nonResource bool, verbs verbMask) kindMask {
	if nonResource {
		return kindMask(verbs)
	}
	return kindMask(verbs) << 16
}

type rule struct {
	policy      int
	nonResource bool
	verbs       verbMask

	// resource rules, in the order checked
	resources                            resourceList
	apiGroups, namespaces, resourceNames list
	// non-resource rules
	urls list

	anySubject      bool   // users and serviceAccounts both empty
	users           list   // never matches when only serviceAccounts are set
	serviceAccounts values // user names system:serviceaccount:<ns>:<name>
	groups          list
}

func compileRule(policy int, r *gatewayv1alpha1.DispatchPolicyRule) rule {
	c := rule{
		policy:      policy,
		nonResource: len(r.NonResourceURLs) > 0,
		verbs:       compileVerbs(r.Verbs),
		anySubject:  len(r.Users) == 0 && len(r.ServiceAccounts) == 0,
		groups:      compileList(r.UserGroups, noGlob),
	}
	if c.nonResource {
		c.urls = compileList(r.NonResourceURLs, urlGlob)
	} else {
		c.apiGroups = compileList(r.APIGroups, noGlob)
		c.resources = compileResources(r.Resources)
		c.resourceNames = compileList(r.ResourceNames, noGlob)
		c.namespaces = compileList(r.Namespaces, noGlob)
	}
	if len(r.Users) > 0 {
		c.users = compileList(r.Users, userGlob)
	}
	sas := make([]string, 0, len(r.ServiceAccounts))
	for _, sa := range r.ServiceAccounts {
		sas = append(sas, serviceaccount.MakeUsername(sa.Namespace, sa.Name))
	}
	c.serviceAccounts = newValues(sas)
	return c
}

// matches tells whether the rule matches a request of its kind and verbs.
func (r *rule) matches(a *request.Attributes, userName string, groups []string) bool {
	if r.nonResource {
		if !r.urls.match(a.Path) {
			return false
		}
	} else if !r.resources.match(a.Resource, a.Subresource) ||
		!r.apiGroups.match(a.APIGroup) ||
		!r.namespaces.match(a.Namespace) ||
		!r.resourceNames.match(a.Name) {
		return false
	}
	if !r.anySubject && !r.users.match(userName) && !r.serviceAccounts.has(userName) {
		return false
	}
	return r.groups.matchAny(groups)
}

// verbMask has one bit per verb a rule can name, and one for every other verb.
type verbMask uint32

const (
	verbOther verbMask = 1 << iota
	verbGet
	verbList
	verbWatch
	verbCreate
	verbUpdate
	verbPatch
	verbDelete
	verbDeleteCollection
	verbHead
	verbPost
	verbPut
	verbOptions

	verbAll verbMask = 1<<iota - 1
)

func verbBit(v string) verbMask {
	switch v {
	case "get":
		return verbGet
	case "list":
		return verbList
	case "watch":
		return verbWatch
	case "create":
		return verbCreate
	case "update":
		return verbUpdate
	case "patch":
		return verbPatch
	case "delete":
		return verbDelete
	case "deletecollection":
		return verbDeleteCollection
	case "head":
		return verbHead
	case "post":
		return verbPost
	case "put":
		return verbPut
	case "options":
		return verbOptions
	}
	return verbOther
}

func compileVerbs(verbs []string) verbMask {
	var named verbMask
	excluded := false
	for _, raw := range verbs {
		v, ex := strings.CutPrefix(raw, "-")
		excluded = ex
		if v == "*" {
			return verbAll
		}
		named |= verbBit(v)
	}
	if excluded {
		return verbAll &^ named
	}
	return named
}

// list is a compiled string list: exact values and prefixes, either matched or,
// for a list of exclusions, all that is not.
type list struct {
	any      bool // empty list (where empty means any), or "*"
	exclude  bool
	values   values
	prefixes []string
}

// glob says whether an entry is a prefix glob, and its prefix.
type glob func(v string) (prefix string, ok bool)

func noGlob(string) (string, bool) { return "", false }

func userGlob(v string) (string, bool) { return strings.CutSuffix(v, "*") }

func urlGlob(v string) (string, bool) {
	if p, ok := strings.CutSuffix(v, "/*"); ok {
		return p + "/", true
	}
	return "", false
}

func compileList(entries []string, g glob) list {
	if len(entries) == 0 {
		return list{any: true}
	}
	var l list
	var exact []string
	for _, raw := range entries {
		v, ex := strings.CutPrefix(raw, "-")
		l.exclude = ex
		if v == "*" {
			return list{any: true}
		}
		if p, ok := g(v); ok {
			l.prefixes = append(l.prefixes, p)
		} else {
			exact = append(exact, v)
		}
	}
	l.values = newValues(exact)
	return l
}

// names reports whether the list names v (before exclusion).
func (l *list) names(v string) bool {
	if l.values.has(v) {
		return true
	}
	for _, p := range l.prefixes {
		if strings.HasPrefix(v, p) {
			return true
		}
	}
	return false
}

func (l *list) match(v string) bool {
	return l.any || l.names(v) != l.exclude
}

// matchAny matches a multi-valued attribute (the user's groups): a plain list
// matches when it names any of them, a list of exclusions when it names none.
func (l *list) matchAny(vs []string) bool {
	if l.any {
		return true
	}
	for _, v := range vs {
		if l.names(v) {
			return !l.exclude
		}
	}
	return l.exclude
}

// mapThreshold is the size from which a set is faster than a scan.
const mapThreshold = 8

// values is a set of strings: the first inline (most lists have one entry, and
// comparing with it needs no other memory than the rule's), the next few in a
// slice, a map beyond.
type values struct {
	n     int
	first string
	rest  []string
	large map[string]struct{}
}

func newValues(vs []string) values {
	switch {
	case len(vs) == 0:
		return values{}
	case len(vs) <= mapThreshold:
		return values{n: len(vs), first: vs[0], rest: vs[1:]}
	}
	m := make(map[string]struct{}, len(vs))
	for _, v := range vs {
		m[v] = struct{}{}
	}
	return values{n: len(vs), large: m}
}

func (s *values) has(v string) bool {
	switch {
	case s.n == 0:
		return false
	case s.large != nil:
		_, ok := s.large[v]
		return ok
	case s.first == v:
		return true
	}
	for _, x := range s.rest {
		if x == v {
			return true
		}
	}
	return false
}

// resourceList is a compiled resources list.
type resourceList struct {
	any     bool
	exclude bool
	// resources and subresources of "res" and "res/sub" entries, in order; the
	// first inline, as in values.
	n     int
	first resourceKey
	rest  []resourceKey
	large map[resourceKey]struct{}
	// subresources of every resource ("*/sub").
	anyResource values
}

type resourceKey struct{ resource, subresource string }

func compileResources(entries []string) resourceList {
	var l resourceList
	var subs []string
	var exact []resourceKey
	for _, raw := range entries {
		v, ex := strings.CutPrefix(raw, "-")
		l.exclude = ex
		if v == "*" {
			return resourceList{any: true}
		}
		res, sub, _ := strings.Cut(v, "/")
		if res == "*" {
			subs = append(subs, sub)
		} else {
			exact = append(exact, resourceKey{res, sub})
		}
	}
	l.anyResource = newValues(subs)
	l.n = len(exact)
	switch {
	case len(exact) == 0:
	case len(exact) <= mapThreshold:
		l.first, l.rest = exact[0], exact[1:]
	default:
		l.large = make(map[resourceKey]struct{}, len(exact))
		for _, k := range exact {
			l.large[k] = struct{}{}
		}
	}
	return l
}

func (l *resourceList) names(resource, subresource string) bool {
	if subresource != "" && l.anyResource.has(subresource) {
		return true
	}
	switch {
	case l.n == 0:
		return false
	case l.large != nil:
		_, ok := l.large[resourceKey{resource, subresource}]
		return ok
	case l.first.resource == resource && l.first.subresource == subresource:
		return true
	}
	for _, k := range l.rest {
		if k.resource == resource && k.subresource == subresource {
			return true
		}
	}
	return false
}

func (l *resourceList) match(resource, subresource string) bool {
	return l.any || l.names(resource, subresource) != l.exclude
}
