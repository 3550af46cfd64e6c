package upstreamcluster

import (
	"context"
	"errors"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// ProxyREST is the proxy subresource as the API's discovery and OpenAPI
// show it. Its requests never reach it: the server serves every proxy path
// on a short chain of its own (proxy/chain) with the data plane's entry
// (proxy/handler), in front of the generic chain that would call Connect.
type ProxyREST struct{}

var (
	_ rest.Connecter       = ProxyREST{}
	_ rest.StorageMetadata = ProxyREST{}
)

var proxyMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

func (ProxyREST) New() runtime.Object { return &gatewayv1alpha1.UpstreamClusterProxyOptions{} }
func (ProxyREST) Destroy()            {}

// ConnectMethods implements rest.Connecter.
func (ProxyREST) ConnectMethods() []string { return proxyMethods }

// NewConnectOptions implements rest.Connecter: the path below proxy/ is
// UpstreamClusterProxyOptions.Path.
func (ProxyREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &gatewayv1alpha1.UpstreamClusterProxyOptions{}, true, "path"
}

// ProducesMIMETypes implements rest.StorageMetadata: the member decides.
func (ProxyREST) ProducesMIMETypes(string) []string { return []string{"*/*"} }

// ProducesObject implements rest.StorageMetadata.
func (ProxyREST) ProducesObject(string) interface{} { return "" }

// errNotOnProxyChain is what a proxy request gets if it ever takes the
// generic chain: a server built without proxy/chain in front, a bug.
var errNotOnProxyChain = apierrors.NewInternalError(errors.New("the proxy subresource is served by the gateway's proxy handler, which this request did not reach"))

// Connect implements rest.Connecter.
func (ProxyREST) Connect(context.Context, string, runtime.Object, rest.Responder) (http.Handler, error) {
	return nil, errNotOnProxyChain
}
