package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	k8scache "k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/utils/clock"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1/validation"
	"github.com/kubewharf/kube-gateway/proxy/chain"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/controller/clusterset"
	"github.com/kubewharf/kube-gateway/proxy/controller/replicas"
	"github.com/kubewharf/kube-gateway/proxy/controller/status"
	"github.com/kubewharf/kube-gateway/proxy/door"
	"github.com/kubewharf/kube-gateway/proxy/fanout"
	"github.com/kubewharf/kube-gateway/proxy/fleetcache"
	"github.com/kubewharf/kube-gateway/proxy/flowcontrol"
	"github.com/kubewharf/kube-gateway/proxy/forward"
	"github.com/kubewharf/kube-gateway/proxy/frontproxy"
	"github.com/kubewharf/kube-gateway/proxy/handler"
	"github.com/kubewharf/kube-gateway/proxy/longrunning"
	"github.com/kubewharf/kube-gateway/proxy/memberauthz"
	"github.com/kubewharf/kube-gateway/proxy/metrics"
	"github.com/kubewharf/kube-gateway/proxy/transport"
	"github.com/kubewharf/kube-gateway/registry/cachedresource"
	"github.com/kubewharf/kube-gateway/registry/jsoncache"
	"github.com/kubewharf/kube-gateway/registry/upstreamcluster"
)

// jsonCacheBytes bounds the JSON kept of listed objects, and as much again
// of watched ones: enough for two generations of more than 10,000
// UpstreamClusters (about 2 KB each).
const jsonCacheBytes = 64 << 20

// Config is the whole configuration of a kube-gateway server: the generic
// apiserver's, and what the gateway adds.
type Config struct {
	Generic *genericapiserver.RecommendedConfig
	Extra   ExtraConfig
}

// ExtraConfig is what the gateway adds to the generic apiserver's
// configuration.
type ExtraConfig struct {
	Scheme          *runtime.Scheme
	Codecs          serializer.CodecFactory
	SecretNamespace string
	// StatusLeaseName: see Options.
	StatusLeaseName string
	// AuthorizeProxySubpath: see Options.
	AuthorizeProxySubpath bool
	// MemberResponseHeaderTimeout: see Options.
	MemberResponseHeaderTimeout time.Duration
	// ProbeWithNewConnections: see Options.
	ProbeWithNewConnections bool
	// Tracing is on: spans for proxied requests too.
	Tracing bool
	// Entry restricts the gateway's API to requests through the hub's front
	// proxy; nil with --direct-access.
	Entry *chain.Entry
	// FrontProxy verifies the hub's front-proxy certificates; the server is
	// not ready before its CA bundle is loaded.
	FrontProxy *frontproxy.Verifier
	// LongRunning caps each user's open long-running proxied requests; nil:
	// no cap.
	LongRunning *longrunning.Limiter
	// SplitLimitsAcrossReplicas and ShareHealthChecks: see Options.
	SplitLimitsAcrossReplicas bool
	ShareHealthChecks         bool
	// MemberAccessReviewTTL keeps members' allowed SubjectAccessReview
	// answers (memberauthz.Options.AllowTTL).
	MemberAccessReviewTTL time.Duration
	// FanOutParallel and FanOutMemberTimeout: see Options; 0 takes
	// package fanout's defaults.
	FanOutParallel      int
	FanOutMemberTimeout time.Duration
	// FanOutListMemory bounds what fan-out lists hold; nil: no bound.
	FanOutListMemory *fanout.ListMemory
	// FleetCacheMemory bounds what the caches of CachedResources hold; nil:
	// no bound.
	FleetCacheMemory *fleetcache.Memory
	// ConnectAdmissionPlugins are the enabled admission plugins whose
	// configuration objects decide whether CONNECT admission can refuse a proxy
	// request (handler.ConnectAdmissionGate); nil: always run it.
	ConnectAdmissionPlugins []string
	// MemberDoorAddress is where the member door listens; "" for none.
	MemberDoorAddress string
}

// CompletedConfig is a Config after Complete: only it can build a server.
type CompletedConfig struct {
	generic genericapiserver.CompletedConfig
	extra   *ExtraConfig
	hub     kubernetes.Interface
}

// Complete fills in the derived configuration.
func (c *Config) Complete() (CompletedConfig, error) {
	if c.Generic.ClientConfig == nil {
		return CompletedConfig{}, errors.New("a hub connection is required: set --kubeconfig, or run in a pod of the hub")
	}
	kube, err := kubernetes.NewForConfig(c.Generic.ClientConfig)
	if err != nil {
		return CompletedConfig{}, err
	}
	return CompletedConfig{generic: c.Generic.Complete(), extra: &c.Extra, hub: kube}, nil
}

// Server is a kube-gateway server, ready to run.
type Server struct {
	generic *genericapiserver.GenericAPIServer
}

// New builds the server: the UpstreamCluster and CachedResource APIs, the proxy
// subresource and the controller that compiles clusters for the data plane.
func (c CompletedConfig) New() (*Server, error) {
	// LISTs and WATCHes write unchanged objects' JSON from the last time.
	// The group is served with c.extra.Codecs (NewDefaultAPIGroupInfo, below).
	kept, err := jsoncache.New(c.extra.Codecs, gatewayv1alpha1.SchemeGroupVersion, jsonCacheBytes)
	if err != nil {
		return nil, err
	}
	storage, err := upstreamcluster.NewStorage(c.extra.Scheme, c.generic.RESTOptionsGetter, validation.Options{SecretNamespace: c.extra.SecretNamespace}, kept.Watch)
	if err != nil {
		return nil, err
	}
	cached, err := cachedresource.NewStorage(c.extra.Scheme, c.generic.RESTOptionsGetter)
	if err != nil {
		return nil, err
	}

	// Only the credential namespace is watched: the gateway never sees other Secrets.
	secretInformers := informers.NewSharedInformerFactoryWithOptions(c.hub, 0, informers.WithNamespace(c.extra.SecretNamespace),
		informers.WithTransform(clusterset.DropManagedFields))
	secrets := secretInformers.Core().V1().Secrets().Informer()
	// The proxy's metrics are served on /metrics with the apiserver's own.
	proxyMetrics := metrics.New()
	if err := proxyMetrics.Register(legacyregistry.Registerer()); err != nil {
		return nil, err
	}
	if err := legacyregistry.Registerer().Register(metrics.NewObjectEncodingsCollector(kept.Writes)); err != nil {
		return nil, err
	}
	// Every replica observes health; the leader writes it to status.
	statusWriter := status.NewWriter(storage.Status, clock.RealClock{})
	statusWriter.RecordEvents(c.hub.CoreV1()) // Events on the hub, by the leader only
	controller, err := clusterset.NewController(storage.UpstreamCluster.ListWatch(), secrets, clusterset.Hooks{
		Removed: func(name string) {
			proxyMetrics.ForgetCluster(name)
			statusWriter.Forget(name)
		},
		Observed: statusWriter.Observe,
		Invalid: func(name string, generation int64, err error) {
			statusWriter.ObserveInvalid(name, generation, cluster.ConfigErrorReason(err), err.Error())
		},
		Served: statusWriter.ObserveServed,
		Door:   statusWriter.ObserveDoor,
	})
	if err != nil {
		return nil, err
	}
	controller.ClusterOptions.ProbeOwnConnections = c.extra.ProbeWithNewConnections
	// Every replica keeps the caches of CachedResources; the writer of a
	// cluster's status reports them, the status Lease holder sums them up.
	cachedResources := k8scache.NewSharedIndexInformer(cached.CachedResource.ListWatch(), &gatewayv1alpha1.CachedResource{}, 0, k8scache.Indexers{})
	if err := cachedResources.SetTransform(clusterset.DropManagedFields); err != nil {
		return nil, err
	}
	fleetCaches, err := fleetcache.NewManager(fleetcache.Config{Clusters: controller.Clusters(), Secrets: secrets, Resources: cachedResources,
		Memory: c.extra.FleetCacheMemory, Report: statusWriter.ObserveCaches})
	if err != nil {
		return nil, err
	}
	cacheTotals, err := fleetcache.NewAggregator(controller.Clusters(), cachedResources, cached.Status, clock.RealClock{})
	if err != nil {
		return nil, err
	}
	controller.DoorOptions.Metrics = proxyMetrics
	controller.ClusterOptions.Authorization = memberauthz.Options{AllowTTL: c.extra.MemberAccessReviewTTL, Reviewed: proxyMetrics.AccessReviewed}
	probes := &transport.ProbeCount{}
	controller.ClusterOptions.ProbeCount = probes
	if err := legacyregistry.Registerer().Register(metrics.NewServerHealthCollector(controller.EachServer)); err != nil {
		return nil, err
	}
	if err := legacyregistry.Registerer().Register(metrics.NewHealthProbesCollector(probes)); err != nil {
		return nil, err
	}
	if err := legacyregistry.Registerer().Register(metrics.NewHealthProbesSkippedCollector(controller.ProbesSkipped)); err != nil {
		return nil, err
	}
	identity := status.Identity()
	// Flow-control limits hold across replicas: each enforces its share.
	var members *replicas.Membership
	liveReplicas := func() int { return 1 }
	if c.extra.SplitLimitsAcrossReplicas {
		share := flowcontrol.NewShare(clock.RealClock{})
		controller.ClusterOptions.FlowShare = share
		members = replicas.New(replicas.Config{Client: c.hub, Namespace: c.extra.SecretNamespace, Group: c.extra.StatusLeaseName,
			Identity: identity, OnChange: share.SetReplicas, OnMembers: func() {
				statusWriter.Reshard()
				controller.OwnersChanged()
			}})
		liveReplicas = members.Live
	}
	// Health checks shared: the owner of a cluster probes it and writes its
	// status. A replica that does not see the others (starting, or no
	// rights on Leases) probes everything and writes only while it holds the
	// status Lease, as without sharing.
	var leading atomic.Bool
	writeStatus := statusWriter.Run
	if c.extra.ShareHealthChecks && members != nil {
		controller.ProbeOwner = func(name string) bool {
			owns, _ := members.Owns(name)
			return owns
		}
		statusWriter.Owns = func(name string) bool {
			if owns, sees := members.Owns(name); sees {
				return owns
			}
			return leading.Load()
		}
		writeStatus = func(ctx context.Context) {
			leading.Store(true)
			statusWriter.Reshard()
			<-ctx.Done()
			leading.Store(false)
		}
	}
	if err := legacyregistry.Registerer().Register(metrics.NewReplicasCollector(liveReplicas)); err != nil {
		return nil, err
	}
	listMemory := c.extra.FanOutListMemory
	if listMemory == nil {
		listMemory = fanout.NewListMemory(0)
	}
	if err := legacyregistry.Registerer().Register(metrics.NewFanOutCollector(listMemory)); err != nil {
		return nil, err
	}

	forwarder := forward.NewForwarder(proxyMetrics)
	forwarder.LongRunning = c.extra.LongRunning
	forwarder.ResponseHeaderTimeout = c.extra.MemberResponseHeaderTimeout
	if c.extra.AuthorizeProxySubpath {
		// The delegating authorizer of the generic server: SubjectAccessReviews
		// to the hub, with its cache.
		forwarder.Authorizer = c.generic.Authorization.Authorizer
	}
	// Proxy requests take a short handler chain of their own (proxy/chain)
	// into the data plane's entry (proxy/handler); the generic chain serves
	// everything else. The entry decision is in front of both.
	var admissionGate *handler.ConnectAdmissionGate
	if c.extra.ConnectAdmissionPlugins != nil {
		admissionGate = handler.NewConnectAdmissionGate(c.generic.SharedInformerFactory, c.extra.ConnectAdmissionPlugins)
	}
	var doorHandler http.Handler
	var doorServer *door.Server
	c.generic.BuildHandlerChainFunc = func(apiHandler http.Handler, gc *genericapiserver.Config) http.Handler {
		proxy := handler.New(handler.Config{
			Clusters:      controller,
			Objects:       storage.UpstreamCluster,
			Forwarder:     forwarder,
			Admission:     c.generic.AdmissionControl,
			AdmissionGate: admissionGate,
			Scheme:        c.extra.Scheme,
			Serializer:    c.extra.Codecs,
			ViaHub:        c.extra.FrontProxy.Trusted,
			// "*" and label selectors in the name segment fan out.
			FanOut: &fanout.Handler{Clusters: storage.UpstreamCluster, Authorizer: gc.Authorization.Authorizer, Serializer: c.extra.Codecs,
				Parallel: c.extra.FanOutParallel, MemberTimeout: c.extra.FanOutMemberTimeout, ListMemory: listMemory},
			// Fan-out reads of cached resources, once admitted.
			Cache: &fleetcache.Reads{Manager: fleetCaches, Lookup: controller.Lookup, Served: proxyMetrics.CacheRead},
		})
		if c.extra.MemberDoorAddress != "" {
			doorServer = door.NewServer(controller, proxy.ServeDoor, c.extra.Codecs)
			doorHandler = door.Chain(doorServer, gc, c.extra.Tracing)
		}
		return chain.New(genericapiserver.DefaultBuildHandlerChain(apiHandler, gc), proxy.Serve, gc, chain.Options{Tracing: c.extra.Tracing, Entry: c.extra.Entry})
	}
	generic, err := c.generic.New("kube-gateway", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}

	apiGroupInfo := genericapiserver.NewDefaultAPIGroupInfo(gatewayv1alpha1.GroupName, c.extra.Scheme, runtime.NewParameterCodec(c.extra.Scheme), c.extra.Codecs)
	apiGroupInfo.NegotiatedSerializer = kept.NegotiatedSerializer()
	apiGroupInfo.VersionedResourcesStorageMap[gatewayv1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"upstreamclusters":        storage.UpstreamCluster,
		"upstreamclusters/status": storage.Status,
		"upstreamclusters/proxy":  upstreamcluster.ProxyREST{},
		"cachedresources":         cached.CachedResource,
		"cachedresources/status":  cached.Status,
	}
	if err := generic.InstallAPIGroup(&apiGroupInfo); err != nil {
		return nil, err
	}

	if doorServer != nil {
		// Listen now, so that a port in use fails the start.
		ln, err := net.Listen("tcp", c.extra.MemberDoorAddress)
		if err != nil {
			return nil, fmt.Errorf("member door: %w", err)
		}
		generic.AddPostStartHookOrDie("start-member-door", func(hookCtx genericapiserver.PostStartHookContext) error {
			go door.Serve(hookCtx, ln, doorServer, doorHandler, c.generic.SecureServing.HTTP2MaxStreamsPerConnection)
			return nil
		})
	}
	// This gateway's own readiness checks, beside the generic server's.
	clustersLoaded := func(*http.Request) error {
		if !controller.HasSynced() {
			return fmt.Errorf("upstream clusters not loaded yet")
		}
		return nil
	}
	frontProxyLoaded := func(*http.Request) error { return c.extra.FrontProxy.Loaded() }
	generic.AddPostStartHookOrDie("start-upstreamcluster-controller", func(hookCtx genericapiserver.PostStartHookContext) error {
		secretInformers.Start(hookCtx.Done())
		go controller.Run(hookCtx)
		if statusWriter.Owns != nil {
			go statusWriter.Run(hookCtx)
		}
		go fleetCaches.Run(hookCtx)
		go status.Lead(hookCtx, c.hub, c.extra.SecretNamespace, c.extra.StatusLeaseName, identity, func(ctx context.Context) {
			go cacheTotals.Run(ctx)
			writeStatus(ctx)
		})
		if members != nil {
			// Counted once ready: until then no load balancer sends this
			// replica anything, and the others would enforce smaller
			// shares for nothing.
			go func() {
				if wait.PollUntilContextCancel(hookCtx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
					return clustersLoaded(nil) == nil && frontProxyLoaded(nil) == nil, nil
				}) == nil {
					members.Start(hookCtx)
				}
			}()
		}
		return nil
	})
	// The other replicas take this one's share as soon as its Lease is gone.
	if members != nil {
		if err := generic.AddPreShutdownHook("remove-replica-lease", func() error {
			members.Stop()
			return nil
		}); err != nil {
			return nil, err
		}
	}
	// Proxied watches and log streams would hold the shutdown until its
	// timeout: end them when the shutdown delay is over, as the listener
	// closes and the hub's connections get GOAWAY, so that their clients
	// reconnect through the load balancer to another replica. Until then
	// /readyz fails and this replica serves as before, while load balancers
	// take it out. k8s.io/apiserver runs pre-shutdown hooks on SIGTERM, one
	// after the other: the hook must not wait itself.
	delay := c.generic.ShutdownDelayDuration
	if err := generic.AddPreShutdownHook("close-proxied-streams", func() error {
		time.AfterFunc(delay, forwarder.Stop)
		return nil
	}); err != nil {
		return nil, err
	}
	if err := generic.AddReadyzChecks(healthz.NamedCheck("upstreamclusters-loaded", clustersLoaded),
		healthz.NamedCheck("front-proxy-ca-loaded", frontProxyLoaded)); err != nil {
		return nil, err
	}
	return &Server{generic: generic}, nil
}

// Run serves until ctx ends, then shuts down gracefully.
func (s *Server) Run(ctx context.Context) error {
	return s.generic.PrepareRun().RunWithContext(ctx)
}
