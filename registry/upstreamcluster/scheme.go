package upstreamcluster

import (
	"net/url"

	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// AddToScheme adds the API to a server's scheme: what clients register too
// (gatewayv1alpha1.AddToScheme: the types and their defaults), and the decoding
// of the proxy subresource's options from the query string, which the generic
// Connect handler asks the scheme for. Only a server needs that conversion, so
// it stays out of the types package.
func AddToScheme(scheme *runtime.Scheme) error {
	if err := gatewayv1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	return scheme.AddConversionFunc((*url.Values)(nil), (*gatewayv1alpha1.UpstreamClusterProxyOptions)(nil),
		func(a, b interface{}, _ conversion.Scope) error {
			b.(*gatewayv1alpha1.UpstreamClusterProxyOptions).Path = a.(*url.Values).Get("path")
			return nil
		})
}
