package upstreamcluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/apiserver-runtime/pkg/builder/resource"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/clusters"
	"github.com/kubewharf/kube-gateway/proxy/forward"
)

// Clusters looks up compiled clusters; clusters.Controller is one.
type Clusters interface {
	Lookup(name string) (*cluster.Cluster, error)
}

// ProxyREST is the proxy subresource: a Connecter that hands each request to the
// data plane with the compiled cluster it names.
type ProxyREST struct {
	clusters Clusters
	// objects answers whether an UpstreamCluster the data plane does not know yet
	// exists, so that a just-created cluster is "retry" and not "not found".
	objects rest.Getter
	forward *forward.Forwarder
}

var (
	_ rest.Connecter                = &ProxyREST{}
	_ resource.ConnectorSubResource = &ProxyREST{}
	_ rest.StorageMetadata          = &ProxyREST{}
)

// NewProxyREST returns the proxy subresource over the compiled clusters.
func NewProxyREST(c Clusters, objects rest.Getter, f *forward.Forwarder) *ProxyREST {
	return &ProxyREST{clusters: c, objects: objects, forward: f}
}

var proxyMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

func (r *ProxyREST) New() runtime.Object { return &gatewayv1alpha1.UpstreamClusterProxyOptions{} }
func (r *ProxyREST) Destroy()            {}

// SubResourceName implements resource.SubResource.
func (r *ProxyREST) SubResourceName() string { return "proxy" }

// ConnectMethods implements rest.Connecter.
func (r *ProxyREST) ConnectMethods() []string { return proxyMethods }

// NewConnectOptions implements rest.Connecter: the path below proxy/ becomes
// UpstreamClusterProxyOptions.Path.
func (r *ProxyREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &gatewayv1alpha1.UpstreamClusterProxyOptions{}, true, "path"
}

// ProducesMIMETypes implements rest.StorageMetadata: the member decides.
func (r *ProxyREST) ProducesMIMETypes(string) []string { return []string{"*/*"} }

// ProducesObject implements rest.StorageMetadata.
func (r *ProxyREST) ProducesObject(string) interface{} { return "" }

// Connect implements rest.Connecter.
func (r *ProxyREST) Connect(ctx context.Context, name string, opts runtime.Object, responder rest.Responder) (http.Handler, error) {
	proxyOpts, ok := opts.(*gatewayv1alpha1.UpstreamClusterProxyOptions)
	if !ok {
		return nil, fmt.Errorf("invalid options object: %#v", opts)
	}
	c, err := r.clusters.Lookup(name)
	if errors.Is(err, clusters.ErrUnknown) {
		if _, getErr := r.objects.Get(ctx, name, &metav1.GetOptions{}); getErr != nil {
			return nil, getErr // NotFound for an unknown cluster
		}
		err = errors.New("its configuration is being loaded, retry shortly")
	}
	if err != nil {
		return nil, forward.Unavailable(name, err)
	}
	u, _ := genericrequest.UserFrom(ctx)
	path := proxyOpts.Path
	if path == "" {
		path = "/"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rawQuery, ok := rawQueryFrom(req.Context())
		if !ok {
			responder.Error(apierrors.NewInternalError(errors.New("the proxy query filter is not installed")))
			return
		}
		r.forward.Serve(w, req, forward.Request{
			Cluster:  c,
			Path:     path,
			RawQuery: rawQuery,
			User:     u,
			Errors:   responder,
		})
	}), nil
}
