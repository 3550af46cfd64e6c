package upstreamcluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/clusterset"
	"github.com/kubewharf/kube-gateway/proxy/forward"
)

// Clusters looks up compiled clusters; clusterset.Controller is one.
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
	_ rest.Connecter       = &ProxyREST{}
	_ rest.StorageMetadata = &ProxyREST{}
)

// NewProxyREST returns the proxy subresource over the compiled clusters.
func NewProxyREST(c Clusters, objects rest.Getter, f *forward.Forwarder) *ProxyREST {
	return &ProxyREST{clusters: c, objects: objects, forward: f}
}

var proxyMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

func (r *ProxyREST) New() runtime.Object { return &gatewayv1alpha1.UpstreamClusterProxyOptions{} }
func (r *ProxyREST) Destroy()            {}

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

// Connect implements rest.Connecter. The server serves proxy paths on a chain
// of its own (proxy/chain with ProxyHandler), so the generic Connect handler
// only reaches here if that chain is not installed; it refuses dryRun, which
// must reach members.
func (r *ProxyREST) Connect(_ context.Context, name string, opts runtime.Object, responder rest.Responder) (http.Handler, error) {
	proxyOpts, ok := opts.(*gatewayv1alpha1.UpstreamClusterProxyOptions)
	if !ok {
		return nil, fmt.Errorf("invalid options object: %#v", opts)
	}
	path := proxyOpts.Path
	if path == "" {
		path = "/"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.Serve(w, req, name, path, responder)
	}), nil
}

// Serve forwards req to the member path of upstream cluster name, with the
// client's query string; errors before the member answered go to errs.
func (r *ProxyREST) Serve(w http.ResponseWriter, req *http.Request, name, path string, errs forward.ErrorWriter) {
	c, err := r.lookup(req.Context(), name)
	if err != nil {
		errs.Error(err)
		return
	}
	u, _ := genericrequest.UserFrom(req.Context())
	r.forward.Serve(w, req, forward.Request{
		Cluster:  c,
		Path:     path,
		RawQuery: req.URL.RawQuery,
		User:     u,
		Errors:   errs,
	})
}

func (r *ProxyREST) lookup(ctx context.Context, name string) (*cluster.Cluster, error) {
	c, err := r.clusters.Lookup(name)
	if errors.Is(err, clusterset.ErrUnknown) {
		if _, getErr := r.objects.Get(ctx, name, &metav1.GetOptions{}); getErr != nil {
			return nil, getErr // NotFound for an unknown cluster
		}
		err = errors.New("its configuration is being loaded, retry shortly")
	}
	if err != nil {
		return nil, forward.Unavailable(name, err)
	}
	return c, nil
}

// ProxyHandler serves the proxy subresource on the short chain of proxy/chain:
// what the generic Connect handler does around Connect (CONNECT admission,
// errors as Status objects negotiated with the client), then ProxyREST.Serve.
type ProxyHandler struct {
	rest  *ProxyREST
	admit admission.Interface
	// gate, if set, tells when admit can be skipped (ConnectAdmissionGate).
	gate       interface{ Needed() bool }
	objects    admission.ObjectInterfaces
	serializer runtime.NegotiatedSerializer
}

// NewProxyHandler returns the handler of proxy requests over r; admit may be
// nil, and so may gate (admission always runs).
func NewProxyHandler(r *ProxyREST, admit admission.Interface, gate *ConnectAdmissionGate, scheme *runtime.Scheme, serializer runtime.NegotiatedSerializer) *ProxyHandler {
	if admit != nil {
		admit = admission.WithAudit(admit)
	}
	h := &ProxyHandler{rest: r, admit: admit, objects: admission.NewObjectInterfacesFromScheme(scheme), serializer: serializer}
	if gate != nil {
		h.gate = gate
	}
	return h
}

// ServeProxy implements chain.ProxyFunc.
func (h *ProxyHandler) ServeProxy(w http.ResponseWriter, req *http.Request, name, path string) {
	errs := &errorResponder{w: w, req: req, serializer: h.serializer}
	if err := h.admitConnect(req.Context(), name, path); err != nil {
		errs.Error(err)
		return
	}
	h.rest.Serve(w, req, name, path, errs)
}

var (
	proxyOptionsKind = gatewayv1alpha1.SchemeGroupVersion.WithKind("UpstreamClusterProxyOptions")
	clustersResource = gatewayv1alpha1.SchemeGroupVersion.WithResource("upstreamclusters")
)

// admitConnect runs CONNECT admission as the generic Connect handler does, so
// that admission webhooks and policies on upstreamclusters/proxy apply.
func (h *ProxyHandler) admitConnect(ctx context.Context, name, path string) error {
	if h.admit == nil || !h.admit.Handles(admission.Connect) || (h.gate != nil && !h.gate.Needed()) {
		return nil
	}
	u, _ := genericrequest.UserFrom(ctx)
	attrs := admission.NewAttributesRecord(&gatewayv1alpha1.UpstreamClusterProxyOptions{Path: path}, nil, proxyOptionsKind,
		"", name, clustersResource, "proxy", admission.Connect, nil, false, u)
	if m, ok := h.admit.(admission.MutationInterface); ok {
		if err := m.Admit(ctx, attrs, h.objects); err != nil {
			return err
		}
	}
	if v, ok := h.admit.(admission.ValidationInterface); ok {
		return v.Validate(ctx, attrs, h.objects)
	}
	return nil
}

// errorResponder writes errors as a metav1.Status in the encoding the client
// asked for.
type errorResponder struct {
	w          http.ResponseWriter
	req        *http.Request
	serializer runtime.NegotiatedSerializer
}

func (s *errorResponder) Error(err error) {
	responsewriters.ErrorNegotiated(err, s.serializer, gatewayv1alpha1.SchemeGroupVersion, s.w, s.req)
}
