// Package v1alpha1 is the gateway.kubewharf.io/v1alpha1 API: UpstreamCluster, the
// member clusters that kube-gateway proxies to, and the options of its proxy
// subresource.
//
// +k8s:deepcopy-gen=package
// +k8s:openapi-gen=true
// +groupName=gateway.kubewharf.io
// +k8s:openapi-model-package=io.kubewharf.gateway.v1alpha1
package v1alpha1
