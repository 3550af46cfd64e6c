package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of kube-gateway.
const GroupName = "gateway.kubewharf.io"

// Version is the version of this package's API.
const Version = "v1alpha1"

// SchemeGroupVersion is the group version of this package.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: Version}

// UpstreamClustersPath is the path of the upstreamclusters collection on the
// hub (and on the gateway): UpstreamClustersPath + "/NAME/proxy" is the proxy
// prefix of member NAME.
const UpstreamClustersPath = "/apis/" + GroupName + "/" + Version + "/upstreamclusters"

// Resource returns the group-qualified resource of this group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder registers the types of this package and their defaults
	// (RegisterDefaults, zz_generated.defaults.go). Decoding the proxy options
	// from a query string is the server's: registry/upstreamcluster.AddToScheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes, RegisterDefaults)
	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func knownTypes() []runtime.Object {
	return []runtime.Object{
		&UpstreamCluster{},
		&UpstreamClusterList{},
		&UpstreamClusterProxyOptions{},
		&CachedResource{},
		&CachedResourceList{},
	}
}

// AddServedTypesToScheme adds the types of the served version only, without the
// internal version AddToScheme registers too: what OpenAPI documents may name
// (clients ask for served versions).
func AddServedTypesToScheme(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, knownTypes()...)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}

func addKnownTypes(scheme *runtime.Scheme) error {
	if err := AddServedTypesToScheme(scheme); err != nil {
		return err
	}
	// The API has one version, so the internal version is the same Go types: no
	// conversion code, and the generic registry still finds an internal kind.
	scheme.AddKnownTypes(schema.GroupVersion{Group: GroupName, Version: runtime.APIVersionInternal}, knownTypes()...)
	return nil
}
