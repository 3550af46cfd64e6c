package v1alpha1

import (
	"net/url"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/apiserver-runtime/pkg/builder/resource"
)

// The resource model of sigs.k8s.io/apiserver-runtime: what the generic
// etcd-backed store needs to know about UpstreamCluster.
var (
	_ resource.Object                      = &UpstreamCluster{}
	_ resource.ObjectList                  = &UpstreamClusterList{}
	_ resource.ObjectWithStatusSubResource = &UpstreamCluster{}
	_ resource.StatusSubResource           = &UpstreamClusterStatus{}
	_ resource.QueryParameterObject        = &UpstreamClusterProxyOptions{}
)

// GetObjectMeta implements resource.Object.
func (in *UpstreamCluster) GetObjectMeta() *metav1.ObjectMeta { return &in.ObjectMeta }

// NamespaceScoped implements resource.Object: UpstreamClusters are cluster-scoped.
func (in *UpstreamCluster) NamespaceScoped() bool { return false }

// New implements resource.Object.
func (in *UpstreamCluster) New() runtime.Object { return &UpstreamCluster{} }

// NewList implements resource.Object.
func (in *UpstreamCluster) NewList() runtime.Object { return &UpstreamClusterList{} }

// GetGroupVersionResource implements resource.Object.
func (in *UpstreamCluster) GetGroupVersionResource() schema.GroupVersionResource {
	return SchemeGroupVersion.WithResource("upstreamclusters")
}

// IsStorageVersion implements resource.Object: v1alpha1 is stored as is.
func (in *UpstreamCluster) IsStorageVersion() bool { return true }

// GetStatus implements resource.ObjectWithStatusSubResource.
func (in *UpstreamCluster) GetStatus() resource.StatusSubResource { return &in.Status }

// GetListMeta implements resource.ObjectList.
func (in *UpstreamClusterList) GetListMeta() *metav1.ListMeta { return &in.ListMeta }

// SubResourceName implements resource.SubResource.
func (in *UpstreamClusterStatus) SubResourceName() string { return "status" }

// CopyTo implements resource.StatusSubResource: it sets the parent's status.
func (in *UpstreamClusterStatus) CopyTo(parent resource.ObjectWithStatusSubResource) {
	parent.(*UpstreamCluster).Status = *in.DeepCopy()
}

// ConvertFromUrlValues implements resource.QueryParameterObject.
func (in *UpstreamClusterProxyOptions) ConvertFromUrlValues(values *url.Values) error {
	in.Path = values.Get("path")
	return nil
}
