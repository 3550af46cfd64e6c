package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// CachedResource declares a resource of member clusters that the gateway keeps
// in a cache per member, filled by list and watch with the member's
// spec.clientConfig.cacheSecretRef identity, to answer fan-out lists and
// watches (upstreamclusters/*/proxy/...) with each member's RBAC still deciding
// per user. One CachedResource per group, version and resource. The state of
// each member's cache is in that UpstreamCluster's status.caches; the status
// here holds only totals, so that it stays small with many members.
type CachedResource struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec says which resource is cached, and on which clusters.
	Spec CachedResourceSpec `json:"spec"`
	// Status is the state of the caches, summed over the selected clusters.
	// +optional
	Status CachedResourceStatus `json:"status,omitempty"`
}

// CachedResourceSpec names the cached resource and the clusters it is cached on.
type CachedResourceSpec struct {
	// Group is the API group of the resource; "" (or unset) is the core group.
	// +optional
	Group string `json:"group,omitempty"`
	// Version is the API version of the resource, such as v1 or v1beta1.
	Version string `json:"version"`
	// Resource is the resource's lower-case plural name as in its URL, such
	// as configmaps or deployments. Not a subresource, and never the core
	// group's secrets.
	Resource string `json:"resource"`
	// ClusterSelector selects the UpstreamClusters, by their labels, whose
	// members cache the resource. Unset or empty: every UpstreamCluster.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
}

// MaxNotSyncedClusters is how many clusters status.notSynced lists at most.
const MaxNotSyncedClusters = 100

// CachedResourceStatus sums up the caches of the selected clusters. The state
// of each cluster's cache is in its UpstreamCluster's status.caches.
type CachedResourceStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready is True when the cache of every selected cluster is
	// synced.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// SelectedClusters is how many UpstreamClusters the clusterSelector
	// selects.
	// +optional
	SelectedClusters int32 `json:"selectedClusters,omitempty"`
	// SyncedClusters is how many of them have a synced cache.
	// +optional
	SyncedClusters int32 `json:"syncedClusters,omitempty"`
	// Objects is how many objects the caches hold, over all selected clusters.
	// +optional
	Objects int64 `json:"objects,omitempty"`
	// Bytes is about how much memory those objects take in the gateway.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// NotSynced lists selected clusters whose cache is not synced, sorted by
	// cluster name, at most MaxNotSyncedClusters (100) of them: the first by
	// name. selectedClusters - syncedClusters is how many there are.
	// +optional
	// +listType=map
	// +listMapKey=cluster
	NotSynced []NotSyncedCluster `json:"notSynced,omitempty"`
	// NotSyncedTruncated is true when more clusters are not synced than
	// notSynced lists.
	// +optional
	NotSyncedTruncated bool `json:"notSyncedTruncated,omitempty"`
}

// NotSyncedCluster is a selected cluster whose cache is not synced.
type NotSyncedCluster struct {
	// Cluster is the name of the UpstreamCluster.
	Cluster string `json:"cluster"`
	// Reason is a CamelCase reason why the cache is not synced.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is a human-readable detail, at most 1024 characters.
	// +optional
	Message string `json:"message,omitempty"`
	// StaleSince is when the cache stopped being synced; unset for a cache
	// that has never been.
	// +optional
	StaleSince *metav1.Time `json:"staleSince,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// CachedResourceList is a list of CachedResources.
type CachedResourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the CachedResources.
	Items []CachedResource `json:"items"`
}
