package validation

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// Flow control.

// validateFlowControl checks the flow-control schemas and returns the names of the
// schemas declared (valid or not, so that a policy naming a broken schema is
// reported once, at the schema).
func validateFlowControl(fc *gatewayv1alpha1.FlowControl, fldPath *field.Path) (field.ErrorList, sets.Set[string]) {
	names := sets.New[string]()
	if fc == nil {
		return nil, names
	}
	var allErrs field.ErrorList
	for i := range fc.FlowControlSchemas {
		s := &fc.FlowControlSchemas[i]
		p := fldPath.Child("flowControlSchemas").Index(i)
		switch {
		case s.Name == "":
			allErrs = append(allErrs, field.Required(p.Child("name"), "dispatch policies refer to the schema by this name"))
		case names.Has(s.Name):
			allErrs = append(allErrs, field.Duplicate(p.Child("name"), s.Name))
		default:
			for _, msg := range utilvalidation.IsDNS1123Label(s.Name) {
				allErrs = append(allErrs, field.Invalid(p.Child("name"), s.Name, msg))
			}
		}
		names.Insert(s.Name)
		allErrs = append(allErrs, validateFlowControlSchema(s, p)...)
	}
	return allErrs, names
}

// maxQPS bounds a token bucket's rate, far above what one member serves, so
// that its thousandths fit an int64.
var maxQPS = resource.MustParse("1M")

func validateFlowControlSchema(s *gatewayv1alpha1.FlowControlSchema, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	var kinds []string // the limiter fields set, in declaration order
	if s.Exempt != nil {
		kinds = append(kinds, "exempt")
	}
	if m := s.MaxRequestsInflight; m != nil {
		kinds = append(kinds, "maxRequestsInflight")
		// 0 is allowed on purpose: it refuses every request, the emergency brake
		// of docs/dispatch.md.
		if m.Max < 0 {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("maxRequestsInflight", "max"), m.Max, "must not be negative (0 refuses every request)"))
		}
	}
	if tb := s.TokenBucket; tb != nil {
		kinds = append(kinds, "tokenBucket")
		switch {
		case tb.QPS.Sign() <= 0:
			allErrs = append(allErrs, field.Invalid(fldPath.Child("tokenBucket", "qps"), tb.QPS.String(), "must be greater than zero (a fraction such as 0.5 is one request every two seconds)"))
		case tb.QPS.Cmp(maxQPS) > 0:
			allErrs = append(allErrs, field.Invalid(fldPath.Child("tokenBucket", "qps"), tb.QPS.String(), "must be at most "+maxQPS.String()))
		}
		if tb.Burst <= 0 {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("tokenBucket", "burst"), tb.Burst, "must be greater than zero: a bucket of size 0 admits nothing"))
		}
	}
	switch {
	case len(kinds) == 0:
		allErrs = append(allErrs, field.Required(fldPath, "exactly one of exempt, maxRequestsInflight and tokenBucket must be set"))
	case len(kinds) > 1:
		for _, k := range kinds[1:] {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child(k), fmt.Sprintf("must not be set together with %s: exactly one of exempt, maxRequestsInflight and tokenBucket", kinds[0])))
		}
	}
	switch s.Distinguisher {
	case "":
	case gatewayv1alpha1.FlowDistinguisherUser, gatewayv1alpha1.FlowDistinguisherNamespace:
		if len(kinds) == 1 && kinds[0] == "exempt" {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child("distinguisher"), "an exempt schema limits nothing: there is no budget to split"))
		}
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("distinguisher"), s.Distinguisher,
			[]gatewayv1alpha1.FlowDistinguisher{gatewayv1alpha1.FlowDistinguisherUser, gatewayv1alpha1.FlowDistinguisherNamespace}))
	}
	return allErrs
}

// Dispatch policies.

var (
	// resourceVerbs are the verbs of resource requests.
	resourceVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	// nonResourceVerbs are the lower-cased HTTP methods of non-resource requests.
	nonResourceVerbs = []string{"get", "head", "post", "put", "patch", "delete", "options"}
	strategies       = []gatewayv1alpha1.Strategy{gatewayv1alpha1.RoundRobin, gatewayv1alpha1.Random, gatewayv1alpha1.LeastRequest}
)

func validateDispatchPolicies(policies []gatewayv1alpha1.DispatchPolicy, servers []gatewayv1alpha1.UpstreamServer, schemas sets.Set[string], fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	endpoints := make([]string, 0, len(servers))
	for _, s := range servers {
		endpoints = append(endpoints, s.Endpoint)
	}
	endpointSet := sets.New(endpoints...)
	names := sets.New[string]()
	for i := range policies {
		p := &policies[i]
		pp := fldPath.Index(i)
		switch {
		case p.Name == "":
			allErrs = append(allErrs, field.Required(pp.Child("name"), "names the policy in metrics and logs"))
		case names.Has(p.Name):
			allErrs = append(allErrs, field.Duplicate(pp.Child("name"), p.Name))
		default:
			for _, msg := range utilvalidation.IsDNS1123Label(p.Name) {
				allErrs = append(allErrs, field.Invalid(pp.Child("name"), p.Name, msg))
			}
		}
		names.Insert(p.Name)

		allErrs = append(allErrs, ValidateDispatchPolicyRules(p.Rules, pp.Child("rules"))...)

		// Compared as written, not canonically: the balancer picks servers by
		// these strings, so a subset entry must be spelled as in spec.servers.
		seen := sets.New[string]()
		for j, e := range p.UpstreamSubset {
			ep := pp.Child("upstreamSubset").Index(j)
			switch {
			case !endpointSet.Has(e):
				allErrs = append(allErrs, field.NotSupported(ep, e, endpoints))
			case seen.Has(e):
				allErrs = append(allErrs, field.Duplicate(ep, e))
			}
			seen.Insert(e)
		}
		switch p.Strategy {
		case gatewayv1alpha1.RoundRobin, gatewayv1alpha1.Random, gatewayv1alpha1.LeastRequest:
		default:
			allErrs = append(allErrs, field.NotSupported(pp.Child("strategy"), p.Strategy, strategies))
		}
		if p.FlowControlSchemaName != "" && !schemas.Has(p.FlowControlSchemaName) {
			allErrs = append(allErrs, field.NotFound(pp.Child("flowControlSchemaName"), p.FlowControlSchemaName))
		}
	}
	return allErrs
}

// ValidateDispatchPolicyRules checks the rules of one dispatch policy: all that can
// be said of them without the rest of the spec. The data plane's compiler calls it
// too, so that it refuses exactly what the API refuses and can trust the rest.
//
// The rules, as docs/dispatch.md ("Rules") states them:
//   - a rule is a resource rule (resources set) or a non-resource rule
//     (nonResourceURLs set), never both, never neither: apiGroups, resources,
//     resourceNames and namespaces are forbidden in a non-resource rule;
//   - as in Kubernetes RBAC, verbs are required in every rule and apiGroups in
//     resource rules ("" is the core group; "*" every group); resourceNames,
//     namespaces, users, serviceAccounts and userGroups may be empty (any);
//   - every string list holds plain entries (the values matched, "*" being every
//     value) or only "-" entries (every value but those), never both; "-*" would
//     match nothing and is refused;
//   - verbs are Kubernetes verbs in resource rules, lower-cased HTTP methods in
//     non-resource rules, so that a typo is an error rather than a rule that never
//     matches;
//   - resources: "res", "res/sub", "*/sub" or "*"; "res/*" is refused;
//   - namespaces: "" names cluster-scoped requests; apiGroups: "" the core group;
//     so "-" alone is the exclusion of either;
//   - users: a trailing "*" is a prefix glob, nowhere else; resourceNames and
//     userGroups have no glob ("*" alone only);
//   - nonResourceURLs begin with "/" and hold "*" only as a trailing "/*" (or are
//     "*");
//   - serviceAccounts name a namespace and a service account.
func ValidateDispatchPolicyRules(rules []gatewayv1alpha1.DispatchPolicyRule, fldPath *field.Path) field.ErrorList {
	if len(rules) == 0 {
		return field.ErrorList{field.Required(fldPath, "a policy without rules matches no request")}
	}
	var allErrs field.ErrorList
	for i := range rules {
		allErrs = append(allErrs, validateRule(&rules[i], fldPath.Index(i))...)
	}
	return allErrs
}

func validateRule(r *gatewayv1alpha1.DispatchPolicyRule, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	nonResource := len(r.NonResourceURLs) > 0
	resourceFields := []struct {
		name   string
		values []string
		check  entryCheck
	}{
		{"apiGroups", r.APIGroups, checkAPIGroup},
		{"resources", r.Resources, checkResource},
		{"resourceNames", r.ResourceNames, checkResourceName},
		{"namespaces", r.Namespaces, checkNamespace},
	}
	switch {
	case nonResource:
		for _, f := range resourceFields {
			if len(f.values) > 0 {
				allErrs = append(allErrs, field.Forbidden(fldPath.Child(f.name), "must be empty in a non-resource rule (nonResourceURLs is set): a rule matches resource requests or non-resource requests, never both"))
			}
		}
	case len(r.Resources) == 0 && (len(r.APIGroups) > 0 || len(r.ResourceNames) > 0 || len(r.Namespaces) > 0):
		allErrs = append(allErrs, field.Required(fldPath.Child("resources"), `a resource rule names the resources it matches, or "*"`))
	case len(r.Resources) == 0:
		allErrs = append(allErrs, field.Required(fldPath, "a rule sets resources (to match resource requests) or nonResourceURLs (to match non-resource requests)"))
	}

	verbs := resourceVerbs
	if nonResource {
		verbs = nonResourceVerbs
	}
	if len(r.Verbs) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("verbs"), `list the verbs the rule matches, or "*"`))
	}
	allErrs = append(allErrs, validateList(r.Verbs, fldPath.Child("verbs"), func(p *field.Path, raw, v string) *field.Error {
		for _, ok := range verbs {
			if v == ok {
				return nil
			}
		}
		return field.NotSupported(p, raw, append(slices.Clip(verbs), "*"))
	})...)

	if nonResource {
		allErrs = append(allErrs, validateList(r.NonResourceURLs, fldPath.Child("nonResourceURLs"), checkNonResourceURL)...)
	} else if len(r.Resources) > 0 {
		if len(r.APIGroups) == 0 {
			allErrs = append(allErrs, field.Required(fldPath.Child("apiGroups"), `list the API groups of the resources ("" is the core group), or "*"`))
		}
		for _, f := range resourceFields {
			allErrs = append(allErrs, validateList(f.values, fldPath.Child(f.name), f.check)...)
		}
	}

	allErrs = append(allErrs, validateList(r.Users, fldPath.Child("users"), checkUser)...)
	for i, sa := range r.ServiceAccounts {
		p := fldPath.Child("serviceAccounts").Index(i)
		if sa.Namespace == "" {
			allErrs = append(allErrs, field.Required(p.Child("namespace"), ""))
		} else {
			for _, msg := range apimachineryvalidation.ValidateNamespaceName(sa.Namespace, false) {
				allErrs = append(allErrs, field.Invalid(p.Child("namespace"), sa.Namespace, msg))
			}
		}
		if sa.Name == "" {
			allErrs = append(allErrs, field.Required(p.Child("name"), ""))
		} else {
			for _, msg := range apimachineryvalidation.ValidateServiceAccountName(sa.Name, false) {
				allErrs = append(allErrs, field.Invalid(p.Child("name"), sa.Name, msg))
			}
		}
	}
	allErrs = append(allErrs, validateList(r.UserGroups, fldPath.Child("userGroups"), checkUserGroup)...)
	return allErrs
}

// entryCheck validates one list entry v (raw without its "-" prefix; never "*").
type entryCheck func(p *field.Path, raw, v string) *field.Error

// validateList checks the entries of one rule list and that it does not mix plain
// entries and "-" exclusions.
func validateList(values []string, fldPath *field.Path, check entryCheck) field.ErrorList {
	var allErrs field.ErrorList
	firstPlain, firstExcluded := -1, -1
	for i, raw := range values {
		v, excluded := strings.CutPrefix(raw, "-")
		switch {
		case excluded && firstExcluded < 0:
			firstExcluded = i
		case !excluded && firstPlain < 0:
			firstPlain = i
		}
		switch {
		case v == "*" && excluded:
			allErrs = append(allErrs, field.Invalid(fldPath.Index(i), raw, `excludes every value: the rule could never match`))
		case v == "*":
		default:
			if err := check(fldPath.Index(i), raw, v); err != nil {
				allErrs = append(allErrs, err)
			}
		}
	}
	if firstPlain >= 0 && firstExcluded >= 0 {
		// The mix is the list's fault, not one entry's.
		allErrs = append(allErrs, field.Invalid(fldPath, values, fmt.Sprintf(
			`must not mix plain entries (%q) and "-" exclusions (%q) in one list: a list names the values it matches, or only "-" entries naming the values it excludes`,
			values[firstPlain], values[firstExcluded])))
	}
	return allErrs
}

func invalid(p *field.Path, raw string, msgs ...string) *field.Error {
	if len(msgs) == 0 {
		return nil
	}
	return field.Invalid(p, raw, strings.Join(msgs, "; "))
}

func checkAPIGroup(p *field.Path, raw, v string) *field.Error {
	if v == "" {
		return nil // the core group
	}
	return invalid(p, raw, utilvalidation.IsDNS1123Subdomain(v)...)
}

func checkNamespace(p *field.Path, raw, v string) *field.Error {
	if v == "" {
		return nil // cluster-scoped requests
	}
	return invalid(p, raw, utilvalidation.IsDNS1123Label(v)...)
}

func checkResource(p *field.Path, raw, v string) *field.Error {
	res, sub, hasSub := strings.Cut(v, "/")
	switch {
	case v == "":
		return invalid(p, raw, "must not be empty")
	case strings.Contains(sub, "/"):
		return invalid(p, raw, "must be a resource or resource/subresource")
	case hasSub && sub == "*":
		return invalid(p, raw, `a subresource wildcard is not supported: list the subresources (e.g. pods/log), use "*/sub" for a subresource of every resource, or "*"`)
	case res == "":
		return invalid(p, raw, "must name a resource (or *) before /")
	case hasSub && sub == "":
		return invalid(p, raw, "must name a subresource after /")
	case res != "*" && strings.Contains(res, "*") || strings.Contains(sub, "*"):
		return invalid(p, raw, `"*" is supported alone or as "*/subresource" only`)
	}
	return nil
}

func checkResourceName(p *field.Path, raw, v string) *field.Error {
	switch {
	case v == "":
		return invalid(p, raw, "must not be empty")
	case strings.Contains(v, "/"):
		return invalid(p, raw, "must not contain /")
	case strings.Contains(v, "*"):
		return invalid(p, raw, `"*" is supported alone only: resource names have no glob`)
	}
	return nil
}

func checkUser(p *field.Path, raw, v string) *field.Error {
	switch {
	case v == "":
		return invalid(p, raw, "must not be empty")
	case strings.Contains(strings.TrimSuffix(v, "*"), "*"):
		return invalid(p, raw, `"*" is supported only at the end, as a prefix glob`)
	}
	return nil
}

func checkUserGroup(p *field.Path, raw, v string) *field.Error {
	switch {
	case v == "":
		return invalid(p, raw, "must not be empty")
	case strings.Contains(v, "*"):
		return invalid(p, raw, `"*" is supported alone only: groups have no glob`)
	}
	return nil
}

func checkNonResourceURL(p *field.Path, raw, v string) *field.Error {
	switch {
	case !strings.HasPrefix(v, "/"):
		return invalid(p, raw, `must begin with / (or be "*")`)
	case strings.Contains(strings.TrimSuffix(v, "/*"), "*"):
		return invalid(p, raw, `"*" is supported only as a trailing "/*" (a prefix match), or alone`)
	}
	return nil
}

// checkQueryFragmentPort refuses what neither a server endpoint nor a proxy URL
// may have: a query, a fragment, an invalid port.
func checkQueryFragmentPort(u *url.URL) error {
	switch {
	case u.RawQuery != "" || u.ForceQuery:
		return fmt.Errorf("must not have a query")
	case u.Fragment != "":
		return fmt.Errorf("must not have a fragment")
	}
	if port := u.Port(); port != "" {
		if _, err := net.LookupPort("tcp", port); err != nil || strings.HasPrefix(port, "0") {
			return fmt.Errorf("has an invalid port %q", port)
		}
	}
	return nil
}
