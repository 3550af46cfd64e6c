package validation

import (
	"fmt"
	"regexp"
	"strings"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// kubeVersion is the form of Kubernetes API versions: v1, v2beta3, v1alpha1.
var kubeVersion = regexp.MustCompile(`^v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?$`)

// maxNotSyncedMessageLen bounds each status.notSynced message, so that a full
// list stays a few hundred KiB at most.
const maxNotSyncedMessageLen = 1024

// ValidateCachedResource validates a whole CachedResource for create. That no
// other CachedResource names the same group, version and resource is checked
// against the stored ones (registry/cachedresource), not here.
func ValidateCachedResource(obj *gatewayv1alpha1.CachedResource) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&obj.ObjectMeta, false,
		apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(allErrs, validateCachedResourceSpec(&obj.Spec, field.NewPath("spec"))...)
}

// ValidateCachedResourceUpdate validates an update of the spec (and metadata).
func ValidateCachedResourceUpdate(obj, old *gatewayv1alpha1.CachedResource) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, validateCachedResourceSpec(&obj.Spec, field.NewPath("spec"))...)
}

func validateCachedResourceSpec(spec *gatewayv1alpha1.CachedResourceSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if spec.Group != "" {
		for _, msg := range validation.IsDNS1123Subdomain(spec.Group) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("group"), spec.Group, msg+` ("" is the core group)`))
		}
	}
	versionPath := fldPath.Child("version")
	switch {
	case spec.Version == "":
		allErrs = append(allErrs, field.Required(versionPath, "the API version of the resource, such as v1"))
	case !kubeVersion.MatchString(spec.Version):
		allErrs = append(allErrs, field.Invalid(versionPath, spec.Version, "must be an API version such as v1, v1beta1 or v2alpha1"))
	}
	allErrs = append(allErrs, ValidateCachedResourceName(spec.Group, spec.Resource, fldPath.Child("resource"))...)
	if spec.ClusterSelector != nil {
		allErrs = append(allErrs, metav1validation.ValidateLabelSelector(spec.ClusterSelector,
			metav1validation.LabelSelectorValidationOptions{}, fldPath.Child("clusterSelector"))...)
	}
	return allErrs
}

// ValidateCachedResourceName refuses what must never be cached with the reason,
// and anything that is not a resource's plural name as in its URL. `kube-gateway
// join --cache-resources` applies it too, to what it grants the cache identity.
func ValidateCachedResourceName(group, resource string, fldPath *field.Path) field.ErrorList {
	switch {
	case resource == "":
		return field.ErrorList{field.Required(fldPath, "the resource's lower-case plural name as in its URL, such as configmaps or deployments")}
	case strings.Contains(resource, "/"):
		return field.ErrorList{field.Forbidden(fldPath,
			fmt.Sprintf("%q is a subresource: subresources are never cached, name the resource only (such as pods, not pods/status)", resource))}
	case group == "" && resource == "secrets":
		return field.ErrorList{field.Forbidden(fldPath,
			"secrets are never cached: the gateway would keep every member's credentials in its memory")}
	}
	if msgs := validation.IsDNS1123Label(resource); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(fldPath, resource,
			"must be the resource's lower-case plural name as in its URL, such as configmaps or deployments: "+strings.Join(msgs, "; "))}
	}
	return nil
}

// ValidateCachedResourceStatusUpdate validates an update of the status.
func ValidateCachedResourceStatusUpdate(obj, old *gatewayv1alpha1.CachedResource) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	st, fldPath := &obj.Status, field.NewPath("status")
	allErrs = append(allErrs, nonNegative(fldPath.Child("observedGeneration"), st.ObservedGeneration)...)
	allErrs = append(allErrs, metav1validation.ValidateConditions(st.Conditions, fldPath.Child("conditions"))...)
	allErrs = append(allErrs, nonNegative(fldPath.Child("selectedClusters"), int64(st.SelectedClusters))...)
	allErrs = append(allErrs, nonNegative(fldPath.Child("syncedClusters"), int64(st.SyncedClusters))...)
	if st.SyncedClusters > st.SelectedClusters {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("syncedClusters"), st.SyncedClusters,
			fmt.Sprintf("must not exceed selectedClusters (%d)", st.SelectedClusters)))
	}
	allErrs = append(allErrs, nonNegative(fldPath.Child("objects"), st.Objects)...)
	allErrs = append(allErrs, nonNegative(fldPath.Child("bytes"), st.Bytes)...)

	listPath := fldPath.Child("notSynced")
	if len(st.NotSynced) > gatewayv1alpha1.MaxNotSyncedClusters {
		allErrs = append(allErrs, field.TooMany(listPath, len(st.NotSynced), gatewayv1alpha1.MaxNotSyncedClusters))
	}
	for i, c := range st.NotSynced {
		p := listPath.Index(i)
		switch {
		case c.Cluster == "":
			allErrs = append(allErrs, field.Required(p.Child("cluster"), "the name of the UpstreamCluster"))
		case i > 0 && c.Cluster == st.NotSynced[i-1].Cluster:
			allErrs = append(allErrs, field.Duplicate(p.Child("cluster"), c.Cluster))
		case i > 0 && c.Cluster < st.NotSynced[i-1].Cluster:
			allErrs = append(allErrs, field.Invalid(p.Child("cluster"), c.Cluster,
				fmt.Sprintf("must come after %q: the list is sorted by cluster name", st.NotSynced[i-1].Cluster)))
		}
		if len(c.Message) > maxNotSyncedMessageLen {
			allErrs = append(allErrs, field.TooLong(p.Child("message"), "", maxNotSyncedMessageLen))
		}
	}
	return allErrs
}

// validateCacheStatuses checks an UpstreamCluster's status.caches.
func validateCacheStatuses(caches []gatewayv1alpha1.UpstreamClusterCacheStatus, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	seen := sets.New[string]()
	for i, c := range caches {
		p := fldPath.Index(i)
		switch {
		case c.CachedResource == "":
			allErrs = append(allErrs, field.Required(p.Child("cachedResource"), "the name of the CachedResource"))
		case seen.Has(c.CachedResource):
			allErrs = append(allErrs, field.Duplicate(p.Child("cachedResource"), c.CachedResource))
		}
		seen.Insert(c.CachedResource)
		allErrs = append(allErrs, nonNegative(p.Child("objects"), c.Objects)...)
		allErrs = append(allErrs, nonNegative(p.Child("bytes"), c.Bytes)...)
	}
	return allErrs
}

func nonNegative(fldPath *field.Path, v int64) field.ErrorList {
	if v < 0 {
		return field.ErrorList{field.Invalid(fldPath, v, "must not be negative")}
	}
	return nil
}
