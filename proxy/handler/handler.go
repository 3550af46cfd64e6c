// Package handler is the data plane's entry: it serves one request of the
// proxy subresource, .../upstreamclusters/{name}/proxy/{path}, once the short
// chain (proxy/chain) has authenticated and authorized it. A name that selects
// many clusters goes to the fan-out (proxy/fanout), which asks each member
// through this same entry; any other name is one member: CONNECT admission,
// the compiled cluster, then the forwarder (proxy/forward) and its stages.
package handler

import (
	"context"
	"errors"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/controller/clusterset"
	"github.com/kubewharf/kube-gateway/proxy/fanout"
	"github.com/kubewharf/kube-gateway/proxy/forward"
)

// Clusters looks up compiled clusters; clusterset.Controller is one.
type Clusters interface {
	Lookup(name string) (*cluster.Cluster, error)
}

// Objects reads UpstreamClusters from storage; the registry's store is one.
type Objects interface {
	Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error)
}

// Config is what a Handler is built from.
type Config struct {
	// Clusters are the compiled clusters requests are forwarded to.
	Clusters Clusters
	// Objects tells whether an UpstreamCluster the data plane does not know
	// yet exists, so that a just-created cluster is "retry", not "not found".
	Objects Objects
	// Forwarder carries a request to a member.
	Forwarder *forward.Forwarder
	// Admission runs CONNECT admission on upstreamclusters/proxy; nil: none.
	Admission admission.Interface
	// AdmissionGate, if set, tells when Admission can be skipped.
	AdmissionGate *ConnectAdmissionGate
	// Scheme and Serializer: admission's object interfaces, and errors as
	// Status objects in the encoding the client asked for.
	Scheme     *runtime.Scheme
	Serializer runtime.NegotiatedSerializer
	// ViaHub tells whether the hub's front proxy sends a request and passes
	// its response on (frontproxy.Verifier.Trusted); nil: never.
	ViaHub func(*http.Request) bool
	// FanOut serves names that select many clusters; its Member is set by
	// New. Nil: such names are looked up like any other (and not found).
	FanOut *fanout.Handler
	// Cache, if set, answers a fan-out's member reads from the fleet cache
	// when it can, once they are admitted as requests naming the member.
	Cache MemberCache
}

// MemberCache answers a fan-out's request to one member (a list or watch)
// from a cache; fleetcache.Reads is one.
type MemberCache interface {
	// ServeMember answers req, for path on member name, and reports true,
	// or reports false having written nothing.
	ServeMember(w http.ResponseWriter, req *http.Request, name, path string) bool
}

// Handler serves proxy subresource requests.
type Handler struct {
	clusters  Clusters
	objects   Objects
	forwarder *forward.Forwarder
	admit     admission.Interface
	// gate, if set, tells when admit can be skipped.
	gate       interface{ Needed() bool }
	interfaces admission.ObjectInterfaces
	serializer runtime.NegotiatedSerializer
	viaHub     func(*http.Request) bool
	fanOut     *fanout.Handler
	cache      MemberCache
}

// New returns the entry of the data plane.
func New(c Config) *Handler {
	h := &Handler{clusters: c.Clusters, objects: c.Objects, forwarder: c.Forwarder, serializer: c.Serializer, viaHub: c.ViaHub, fanOut: c.FanOut, cache: c.Cache}
	if c.Admission != nil {
		h.admit = admission.WithAudit(c.Admission)
		h.interfaces = admission.NewObjectInterfacesFromScheme(c.Scheme)
	}
	if c.AdmissionGate != nil {
		h.gate = c.AdmissionGate
	}
	if h.fanOut != nil {
		h.fanOut.Member = func(w http.ResponseWriter, req *http.Request, name, path string) {
			h.serve(w, req, name, path, h.cache)
		}
	}
	return h
}

// Serve serves one request for the name segment name and the member path
// path ("/" at least); it implements chain.ProxyFunc.
func (h *Handler) Serve(w http.ResponseWriter, req *http.Request, name, path string) {
	if h.fanOut != nil && fanout.IsFanOut(name) {
		if h.viaHub != nil && h.viaHub(req) {
			forward.DropHubHeaders(w.Header()) // as serve does
		}
		h.fanOut.Serve(w, req, name, path)
		return
	}
	h.serve(w, req, name, path, nil)
}

// serve serves a request for the one member cluster name: a request that
// names it, or the fan-out's request to it, which cache (if set) may answer
// once it is admitted.
func (h *Handler) serve(w http.ResponseWriter, req *http.Request, name, path string, cache MemberCache) {
	// The hub sets Audit-ID and Cache-Control on the response it passes on:
	// the gateway's chain set them too, and the member sends its own.
	viaHub := h.viaHub != nil && h.viaHub(req)
	if viaHub {
		forward.DropHubHeaders(w.Header())
	}
	errs := &statusWriter{w: w, req: req, serializer: h.serializer}
	if err := h.admitConnect(req.Context(), name, path); err != nil {
		errs.Error(err)
		return
	}
	if cache != nil && cache.ServeMember(w, req, name, path) {
		return
	}
	h.forward(w, req, errs, forward.Request{Path: path, RawQuery: req.URL.RawQuery, ViaHub: viaHub}, name)
}

// ServeDoor serves a request that came in by the member door of cluster
// name (proxy/door): the user in its context is the member's own identity,
// impersonated as it is; there is no fan-out and no CONNECT admission (the
// hub's admission speaks of hub users).
func (h *Handler) ServeDoor(w http.ResponseWriter, req *http.Request, name string) {
	errs := &statusWriter{w: w, req: req, serializer: h.serializer}
	h.forward(w, req, errs, forward.Request{Path: req.URL.Path, RawQuery: req.URL.RawQuery, MemberIdentity: true}, name)
}

// forward completes r with the compiled cluster name and the user of req's
// context, and forwards it.
func (h *Handler) forward(w http.ResponseWriter, req *http.Request, errs *statusWriter, r forward.Request, name string) {
	c, err := h.lookup(req.Context(), name)
	if err != nil {
		errs.Error(err)
		return
	}
	r.Cluster, r.Errors = c, errs
	r.User, _ = genericapirequest.UserFrom(req.Context())
	h.forwarder.Serve(w, req, r)
}

func (h *Handler) lookup(ctx context.Context, name string) (*cluster.Cluster, error) {
	c, err := h.clusters.Lookup(name)
	if errors.Is(err, clusterset.ErrUnknown) {
		if _, getErr := h.objects.Get(ctx, name, &metav1.GetOptions{}); getErr != nil {
			return nil, getErr // NotFound for an unknown cluster
		}
		err = errors.New("its configuration is being loaded, retry shortly")
	}
	if err != nil {
		return nil, forward.Unavailable(name, err)
	}
	return c, nil
}

// statusWriter writes errors as a metav1.Status in the encoding the client
// asked for.
type statusWriter struct {
	w          http.ResponseWriter
	req        *http.Request
	serializer runtime.NegotiatedSerializer
}

func (s *statusWriter) Error(err error) {
	responsewriters.ErrorNegotiated(err, s.serializer, gatewayv1alpha1.SchemeGroupVersion, s.w, s.req)
}
