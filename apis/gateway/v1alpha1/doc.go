// Package v1alpha1 is the gateway.kubewharf.io/v1alpha1 API: UpstreamCluster, the
// member clusters that kube-gateway proxies to, and the options of its proxy
// subresource; CachedResource, the resources of members the gateway caches.
//
// +k8s:deepcopy-gen=package
// +k8s:defaulter-gen=TypeMeta
// +k8s:openapi-gen=true
// +groupName=gateway.kubewharf.io
// +k8s:openapi-model-package=com.github.kubewharf.kube-gateway.apis.gateway.v1alpha1
//
// The OpenAPI model names are the REST-friendly form of the Go package path:
// server-side apply keys models by them, and applyconfiguration-gen looks types
// up by the Go path, so the generated apply configurations (Extract, the fake
// clientset's Apply) and the served schema agree.
package v1alpha1
