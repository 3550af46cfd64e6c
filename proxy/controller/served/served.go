// Package served checks the API groups and resources that dispatch rules name
// against what a member cluster serves (its discovery). A rule naming a
// resource the member does not serve, such as the singular "namespace", is
// valid but never matches; admission cannot tell, the member's discovery can.
package served

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// Ref is one API group or resource a dispatch rule names.
type Ref struct {
	Policy string // the policy's name
	Rule   int    // index in its rules
	// Group is the API group ("" is core); Resource is empty when the ref is
	// the group itself, else "res" or "res/sub".
	Group, Resource string
	// AnyGroup: the rule names no group (or "*"), so the resource may be
	// served by any group.
	AnyGroup bool
}

func (r Ref) String() string {
	where := fmt.Sprintf("dispatch policy %q rule %d", r.Policy, r.Rule)
	switch {
	case r.Resource == "":
		return fmt.Sprintf("%s: API group %q", where, r.Group)
	case r.AnyGroup:
		return fmt.Sprintf("%s: resource %q", where, r.Resource)
	}
	return fmt.Sprintf("%s: resource %q of API group %q", where, r.Resource, r.Group)
}

// Named lists the API groups and resources the resource rules of policies name,
// exclusions included ("-pods" names pods): every entry but wildcards.
func Named(policies []gatewayv1alpha1.DispatchPolicy) []Ref {
	var out []Ref
	for _, p := range policies {
		for i, r := range p.Rules {
			if len(r.NonResourceURLs) > 0 {
				continue
			}
			// No group, a wildcard or a list of exclusions: a resource may
			// come from any group (but the excluded).
			anyGroup := len(r.APIGroups) == 0 || strings.HasPrefix(r.APIGroups[0], "-")
			var groups []string
			for _, g := range r.APIGroups {
				if g = strings.TrimPrefix(g, "-"); g == "*" {
					anyGroup = true
				} else {
					groups = append(groups, g)
				}
			}
			for _, g := range groups {
				out = append(out, Ref{Policy: p.Name, Rule: i, Group: g})
			}
			for _, res := range r.Resources {
				res = strings.TrimPrefix(res, "-")
				if name, _, _ := strings.Cut(res, "/"); name == "*" || res == "*" || strings.HasSuffix(res, "/*") {
					continue
				}
				if anyGroup {
					out = append(out, Ref{Policy: p.Name, Rule: i, Resource: res, AnyGroup: true})
					continue
				}
				for _, g := range groups {
					out = append(out, Ref{Policy: p.Name, Rule: i, Group: g, Resource: res})
				}
			}
		}
	}
	return out
}

// Unserved returns the refs the member does not serve, given its discovery:
// groups it does not serve, and resources served by none of the rule's
// groups. Groups the member failed to describe (failed) are given the benefit
// of the doubt.
func Unserved(refs []Ref, lists []*metav1.APIResourceList, failed map[schema.GroupVersion]error) []Ref {
	groups := map[string]bool{}
	resources := map[string]map[string]bool{} // group → resource names ("pods", "pods/log")
	anyGroup := map[string]bool{}
	for gv := range failed {
		groups[gv.Group] = true
		resources[gv.Group] = nil // unknown: everything passes
	}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		groups[gv.Group] = true
		if _, unknown := failed[gv]; unknown {
			continue
		}
		if resources[gv.Group] == nil {
			resources[gv.Group] = map[string]bool{}
		}
		for _, r := range l.APIResources {
			resources[gv.Group][r.Name] = true
			anyGroup[r.Name] = true
		}
	}
	var out []Ref
	for _, r := range refs {
		switch {
		case r.Resource == "":
			if !groups[r.Group] {
				out = append(out, r)
			}
		case r.AnyGroup:
			if !anyGroup[r.Resource] && len(failed) == 0 {
				out = append(out, r)
			}
		default:
			names, known := resources[r.Group]
			if known && names != nil && !names[r.Resource] {
				out = append(out, r)
			}
		}
	}
	// A resource named with two groups is unserved only if neither serves it.
	return slices.DeleteFunc(out, func(r Ref) bool {
		if r.Resource == "" || r.AnyGroup {
			return false
		}
		for _, o := range refs {
			if o.Policy == r.Policy && o.Rule == r.Rule && o.Resource == r.Resource && o.Group != r.Group && !o.AnyGroup &&
				resources[o.Group] != nil && resources[o.Group][r.Resource] {
				return true
			}
		}
		return false
	})
}
