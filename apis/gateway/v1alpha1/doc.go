// Package v1alpha1 is the gateway.kubewharf.io/v1alpha1 API: UpstreamCluster, the
// member clusters that kube-gateway proxies to, and the options of its proxy
// subresource.
//
// +k8s:deepcopy-gen=package
// +k8s:openapi-gen=true
// +groupName=gateway.kubewharf.io
package v1alpha1
