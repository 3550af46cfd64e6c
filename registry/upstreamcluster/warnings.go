package upstreamcluster

import (
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/scheme"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// pluralOf maps the singular name of every built-in Kubernetes resource
// ("namespace") to its resource name ("namespaces"), from client-go's scheme.
// Built once, read only.
var pluralOf = sync.OnceValue(func() map[string]string {
	m := map[string]string{}
	for gvk := range scheme.Scheme.AllKnownTypes() {
		if strings.HasSuffix(gvk.Kind, "List") || strings.HasSuffix(gvk.Kind, "Options") {
			continue
		}
		plural, singular := meta.UnsafeGuessKindToResource(gvk)
		if plural.Resource != singular.Resource {
			m[singular.Resource] = plural.Resource
		}
	}
	return m
})

// dispatchWarnings warns about what validation cannot refuse but a user
// certainly did not mean: a rule naming the singular of a built-in resource
// ("namespace"), which never matches, since requests name resources in the
// plural. The gateway checks every name against the member's discovery later
// (the DispatchResourcesServed condition); this catches the common case at
// once, in kubectl's output.
func dispatchWarnings(uc *gatewayv1alpha1.UpstreamCluster) []string {
	var out []string
	for i, p := range uc.Spec.DispatchPolicies {
		for j, r := range p.Rules {
			for k, res := range r.Resources {
				name, sub, _ := strings.Cut(strings.TrimPrefix(res, "-"), "/")
				plural, ok := pluralOf()[name]
				if !ok {
					continue
				}
				if sub != "" {
					plural += "/" + sub
				}
				path := field.NewPath("spec", "dispatchPolicies").Index(i).Child("rules").Index(j).Child("resources").Index(k)
				out = append(out, fmt.Sprintf("%s: %q is a singular: requests name resources in the plural, so this never matches; did you mean %q?", path, res, plural))
			}
		}
	}
	return out
}
