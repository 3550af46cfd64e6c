// Package app wires the kube-gateway server: options and flags, the generic
// apiserver configuration, the UpstreamCluster API and the data plane.
package app

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/chain"
	"github.com/kubewharf/kube-gateway/proxy/controller/replicas"
	"github.com/kubewharf/kube-gateway/proxy/fanout"
	"github.com/kubewharf/kube-gateway/proxy/fleetcache"
	"github.com/kubewharf/kube-gateway/proxy/forward"
	"github.com/kubewharf/kube-gateway/proxy/frontproxy"
	"github.com/kubewharf/kube-gateway/proxy/longrunning"
	"github.com/kubewharf/kube-gateway/proxy/memberauthz"
	"github.com/kubewharf/kube-gateway/registry/upstreamcluster"
	gatewayopenapi "github.com/kubewharf/kube-gateway/registry/upstreamcluster/openapi"
)

const defaultEtcdPathPrefix = "/registry/gateway.kubewharf.io"

// SplitLimitsFlag divides flow-control limits among the gateway replicas.
const SplitLimitsFlag = "split-limits-across-replicas"

// ShareHealthChecksFlag shares the health checks of member servers among the
// gateway replicas.
const ShareHealthChecksFlag = "share-health-checks"

// MemberDoorPortFlag is the port of the member door.
const MemberDoorPortFlag = "member-door-port"

// DirectAccessFlag is the flag that lets hub credentials in without the hub.
const DirectAccessFlag = "direct-access"

// directAccessRefused is the message of the 401 for requests that do not come
// through the hub while direct access is off.
const directAccessRefused = "kube-gateway serves gateway.kubewharf.io only through the hub kube-apiserver: send the request to the hub, " +
	"or start kube-gateway with --" + DirectAccessFlag + " to accept hub credentials sent straight to it"

// Options are the command-line options of kube-gateway.
type Options struct {
	ServerRun   *genericoptions.ServerRunOptions
	Recommended *genericoptions.RecommendedOptions
	Logs        *logs.Options
	// SecretNamespace is the hub namespace of the credential Secrets: the only
	// Secrets the gateway reads, and the only namespace spec.clientConfig.secretRef
	// may name.
	SecretNamespace string
	// AuthorizeProxySubpath makes the hub authorize every inner request too.
	AuthorizeProxySubpath bool
	// MemberResponseHeaderTimeout bounds the wait for a member server's
	// response headers to a request that is not long-running.
	MemberResponseHeaderTimeout time.Duration
	// ProbeWithNewConnections makes the health probes of idle servers open a
	// connection of their own, so that idle clusters hold none.
	ProbeWithNewConnections bool
	// StatusLeaseName is the hub Lease, in SecretNamespace, whose holder
	// writes UpstreamCluster status and records Events.
	StatusLeaseName string
	// DirectAccess serves the gateway's API to hub credentials sent straight
	// to the gateway; otherwise only requests through the hub's front proxy.
	DirectAccess bool
	// MaxLongRunningPerUser caps the long-running proxied requests each hub
	// user holds open through this gateway; 0: no cap.
	MaxLongRunningPerUser int
	// SplitLimitsAcrossReplicas divides every flow-control limit among the live
	// gateway replicas, which announce themselves with Leases in SecretNamespace.
	SplitLimitsAcrossReplicas bool
	// ShareHealthChecks has only the replica that owns a cluster probe its
	// servers and write its status; the others follow its verdicts.
	ShareHealthChecks bool
	// FanOutParallel bounds the members a fan-out list asks at once;
	// FanOutMemberTimeout bounds each member's answer (and the opening of
	// each member's watch).
	FanOutParallel      int
	FanOutMemberTimeout time.Duration
	// FanOutListMemory bounds the member answers that the fan-out lists in
	// flight hold together; 0: no bound.
	FanOutListMemory resource.QuantityValue
	// FleetCacheMemory bounds what the caches of CachedResources hold
	// together; 0: no bound.
	FleetCacheMemory resource.QuantityValue
	// MemberAccessReviewTTL keeps members' allowed SubjectAccessReview
	// answers.
	MemberAccessReviewTTL time.Duration
	// MemberDoorPort serves the member door there (on the secure serving
	// bind address); 0: no member door.
	MemberDoorPort int

	scheme *runtime.Scheme
	codecs serializer.CodecFactory
}

// ownWatchTerminationGracePeriod is the default of
// --shutdown-watch-termination-grace-period: the longest a stopping gateway
// waits for the watches of its own API to end (they are told to at once).
const ownWatchTerminationGracePeriod = 5 * time.Second

// NewOptions returns the default options.
func NewOptions() *Options {
	// The logging options are gated by features of the process-wide gate that
	// k8s.io/apiserver itself consults; registering them twice is a no-op.
	utilruntime.Must(logsapi.AddFeatureGates(utilfeature.DefaultMutableFeatureGate))
	scheme := newScheme()
	codecs := serializer.NewCodecFactory(scheme)
	o := &Options{
		ServerRun:       genericoptions.NewServerRunOptions(),
		Recommended:     genericoptions.NewRecommendedOptions(defaultEtcdPathPrefix, codecs.LegacyCodec(gatewayv1alpha1.SchemeGroupVersion)),
		Logs:            logs.NewOptions(),
		SecretNamespace: "kube-gateway",
		StatusLeaseName: "kube-gateway-status",
		// 10,000 slots (open watches, or a third as many exec sessions): one
		// user at the cap fits the chart's memory limit with room for others
		// (docs/operations.md, capacity).
		MaxLongRunningPerUser:       10000,
		MemberResponseHeaderTimeout: forward.DefaultResponseHeaderTimeout,
		SplitLimitsAcrossReplicas:   true,
		ShareHealthChecks:           true,
		FanOutParallel:              fanout.DefaultParallel,
		FanOutMemberTimeout:         fanout.DefaultMemberTimeout,
		FanOutListMemory:            resource.QuantityValue{Quantity: resource.MustParse(fanout.DefaultListMemory)},
		FleetCacheMemory:            resource.QuantityValue{Quantity: resource.MustParse(fleetcache.DefaultMemory)},
		MemberAccessReviewTTL:       memberauthz.DefaultAllowTTL,
		scheme:                      scheme,
		codecs:                      codecs,
	}
	o.Recommended.Etcd.StorageConfig.EncodeVersioner = runtime.NewMultiGroupVersioner(gatewayv1alpha1.SchemeGroupVersion,
		schema.GroupKind{Group: gatewayv1alpha1.GroupName})
	// No priority and fairness here: every proxied request is long-running for
	// the gateway (and for the hub, which skips its own APF for the proxy
	// subresource), so APF would never see them; flow-control schemas on the
	// UpstreamCluster are what limits proxied traffic. APF would also need the
	// hub's flow schemas for the gateway's own small API.
	o.Recommended.Features.EnablePriorityAndFairness = false
	// Watches of the gateway's own API (the hub's garbage collector and quota
	// controllers watch UpstreamClusters, as informers of fleet tools do)
	// end cleanly when a shutdown begins, as proxied watches do; by default
	// the generic server would keep them open, and with them the process,
	// for its whole shutdown timeout (--request-timeout, 60 s).
	o.ServerRun.ShutdownWatchTerminationGracePeriod = ownWatchTerminationGracePeriod
	// The UID of the hub user arrives in X-Remote-Uid (1.33+ hubs send it); the
	// header names themselves are read from the hub's
	// extension-apiserver-authentication ConfigMap.
	return o
}

func newScheme() *runtime.Scheme { return buildScheme(upstreamcluster.AddToScheme) }

// buildScheme is the gateway's scheme with the API types that add registers.
func buildScheme(add func(*runtime.Scheme) error) *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(add(scheme))
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	scheme.AddUnversionedTypes(schema.GroupVersion{Group: "", Version: "v1"},
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
	return scheme
}

// Flags returns the flags of kube-gateway by section, for parsing and for --help.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	gw := fss.FlagSet("gateway")
	o.ServerRun.AddUniversalFlags(fss.FlagSet("generic"))
	gw.BoolVar(&o.AuthorizeProxySubpath, "authorize-proxy-subpath", o.AuthorizeProxySubpath,
		"Before forwarding, ask the hub (SubjectAccessReview, cached) whether the user may perform the proxied request itself: its real verb (list and watch stay list and watch), resource, namespace and name, or non-resource path. For operators who keep one RBAC on the hub; the member's RBAC still applies.")
	gw.BoolVar(&o.DirectAccess, DirectAccessFlag, o.DirectAccess,
		"Also serve gateway.kubewharf.io (UpstreamClusters and their proxy subresource) to hub credentials sent straight to the gateway: bearer tokens, checked by cached TokenReviews to the hub, and client certificates of the hub's client CA, authorized by cached SubjectAccessReviews to the hub as the hub would. Such requests skip the hub's API Priority and Fairness and its audit log; the gateway's own audit policy (--audit-policy-file) applies. Off: only requests that come through the hub (its front proxy) are served, others get 401.")
	gw.DurationVar(&o.MemberResponseHeaderTimeout, "member-response-header-timeout", o.MemberResponseHeaderTimeout,
		"How long to wait for a member server's response headers to a proxied request that is not long-running (watches, log follow, exec, attach, port-forward and proxy are never cut). A server that stays silent longer is counted as failed toward its health; the client gets a 504, or the answer of another server when the request may be retried (GET, HEAD, OPTIONS). Keep it above the members' --request-timeout (60s by default), so that a busy server answers with its own 504 first. 0 waits forever.")
	gw.BoolVar(&o.ProbeWithNewConnections, "probe-with-new-connections", o.ProbeWithNewConnections,
		"Probe a server that served no proxied request in the last 90s over a connection of its own, closed after the answer, instead of over the connection that proxied requests use. A cluster nobody sends requests to then holds no connection once its pooled one has been idle for 90s: about half the memory of an idle cluster, for a TLS handshake per probe of an idle server on the gateway and on the member, at every health check interval (docs/benchmark.md has the figures). Servers in use (open watches included) are probed over their pooled connection, as without this flag. For fleets with many rarely used clusters where memory is scarcer than CPU.")
	gw.StringVar(&o.SecretNamespace, "secret-namespace", o.SecretNamespace,
		"Hub namespace of the Secrets holding the gateway's credentials toward member clusters. The gateway reads Secrets only there, and UpstreamClusters may only reference Secrets there.")
	gw.StringVar(&o.StatusLeaseName, "status-lease-name", o.StatusLeaseName,
		"Name of the hub Lease, in --secret-namespace, whose holder among the gateway replicas writes UpstreamCluster status and records Events. Installations that share a secret namespace need different names.")
	gw.IntVar(&o.MaxLongRunningPerUser, longrunning.Flag, o.MaxLongRunningPerUser,
		"Most long-running proxied requests one hub user may hold open through this gateway process, over all upstream clusters: a watch or log stream counts 1, an exec, attach or port-forward session 3 (it holds connections of its own, about three times a watch's memory). Past it the gateway answers 429. Users are told apart by name: the replicas of a controller that share a service account share one budget. Neither the hub's priority and fairness nor --max-requests-inflight counts these requests, and each open watch costs the gateway memory (docs/benchmark.md): the limit bounds what one user can take. 0 means no limit.")
	gw.BoolVar(&o.SplitLimitsAcrossReplicas, SplitLimitsFlag, o.SplitLimitsAcrossReplicas,
		"Divide every flow-control limit of the UpstreamClusters among the live gateway replicas, so that a schema's qps, burst and max in-flight hold for the whole gateway rather than for each replica. Each replica keeps a hub Lease, in --secret-namespace, labeled "+replicas.LabelReplicaOf+"=<--status-lease-name>, and counts those of the others; one that cannot read or write them enforces whole limits. Off: every replica enforces whole limits.")
	gw.BoolVar(&o.ShareHealthChecks, ShareHealthChecksFlag, o.ShareHealthChecks,
		"Share the health checks of member servers among the live gateway replicas (those --"+SplitLimitsFlag+" counts; without it, or alone, this changes nothing): each cluster is owned by one replica, picked by hashing its name over the replicas' Leases, which probes its servers and writes its status; the others send no probe and follow status.servers, while still taking a server out at once when their own requests to it fail. Member servers then receive one probe per interval whatever the number of replicas. Off: every replica probes every server, and the holder of --status-lease-name writes all status.")
	gw.IntVar(&o.FanOutParallel, "fan-out-parallel", o.FanOutParallel,
		"Most members a fan-out list (a proxy path whose cluster name is * or a label selector) asks at once; a page of a list with limit asks as many as fit in the page, at most this. Every member is asked once whatever this is; it bounds the gateway's concurrent work for one list, and the list's time when members are far away: about members / this × the members' round trip. A fan-out watch opens every member's watch at once.")
	gw.DurationVar(&o.FanOutMemberTimeout, "fan-out-member-timeout", o.FanOutMemberTimeout,
		"How long a fan-out list waits for each member's complete answer, and a fan-out watch for each member's watch to open. A member that takes longer is left out with a warning (or fails the request with gateway.kubewharf.io/strict=true).")
	gw.Var(&o.FanOutListMemory, "fan-out-list-memory",
		"Most memory (a quantity: 256Mi, 1Gi) that the member answers of the fan-out lists in flight take together. A fan-out list holds every member's answer until it writes the merged list; one that would take more fails with 413 when it alone is larger (page it with limit: kubectl get --chunk-size, client-go's pager), with 429 when other fan-out lists hold the memory. Keep it well below the gateway's memory limit: the buffers holding the answers take up to twice this. 0 means no bound.")
	gw.Var(&o.FleetCacheMemory, "fleet-cache-memory",
		"Most memory (a quantity: 512Mi, 1Gi) that the caches of CachedResources take together: the objects of every cached resource of every selected member, kept as their JSON plus a little per object. A cache that would pass it drops its objects and stops, with reason MemoryLimit in its UpstreamCluster's status.caches, until its CachedResource or UpstreamCluster changes. Keep it well below the gateway's memory limit: decoding a list or an event takes a few times the object's size for a moment. 0 means no bound.")
	gw.DurationVar(&o.MemberAccessReviewTTL, "member-access-review-ttl", o.MemberAccessReviewTTL,
		"How long the gateway keeps a member's answer that a user may do something there (a SubjectAccessReview: reads served from the fleet cache, a client's impersonation at the member door); denied answers are kept 30s, or this when shorter. A user whose access the member takes away keeps it through the gateway for up to this long, and a watch served from the cache lasts between this and twice this before it is opened (and authorized) again. Shorter costs members more reviews.")
	gw.IntVar(&o.MemberDoorPort, MemberDoorPortFlag, o.MemberDoorPort,
		"Serve the member door on this port of --bind-address: a member's own clients (kubelets, controllers, kubectl with the member's credentials) reach that member through the gateway by one of its UpstreamCluster's spec.secureServing.serverNames, with a client certificate of the member's CA. The member authorizes them, as their own identity, which the gateway impersonates. 0: no member door.")
	o.Recommended.Etcd.AddFlags(fss.FlagSet("etcd"))
	o.Recommended.SecureServing.AddFlags(fss.FlagSet("secure serving"))
	o.Recommended.Authentication.AddFlags(fss.FlagSet("authentication"))
	o.Recommended.Authorization.AddFlags(fss.FlagSet("authorization"))
	o.Recommended.Audit.AddFlags(fss.FlagSet("auditing"))
	o.Recommended.Features.AddFlags(fss.FlagSet("features"))
	o.Recommended.CoreAPI.AddFlags(fss.FlagSet("hub"))
	o.Recommended.Admission.AddFlags(fss.FlagSet("admission"))
	o.Recommended.EgressSelector.AddFlags(fss.FlagSet("egress selector"))
	o.Recommended.Traces.AddFlags(fss.FlagSet("traces"))
	logsapi.AddFlags(o.Logs, fss.FlagSet("logs"))
	utilfeature.DefaultMutableFeatureGate.AddFlag(fss.FlagSet("features"))
	return fss
}

// Complete fills in options that default to others.
func (o *Options) Complete() error {
	if err := o.ServerRun.Complete(); err != nil {
		return err
	}
	if err := o.ServerRun.DefaultAdvertiseAddress(o.Recommended.SecureServing.SecureServingOptions); err != nil {
		return err
	}
	// Out of cluster, --kubeconfig names the hub; delegated authentication and
	// authorization talk to the same hub unless told otherwise.
	if kc := o.Recommended.CoreAPI.CoreAPIKubeconfigPath; kc != "" {
		if o.Recommended.Authentication.RemoteKubeConfigFile == "" {
			o.Recommended.Authentication.RemoteKubeConfigFile = kc
		}
		if o.Recommended.Authorization.RemoteKubeConfigFile == "" {
			o.Recommended.Authorization.RemoteKubeConfigFile = kc
		}
	}
	return nil
}

// Validate checks the options.
func (o *Options) Validate() error {
	errs := append(o.ServerRun.Validate(), o.Recommended.Validate()...)
	errs = append(errs, logsapi.ValidateAndApply(o.Logs, utilfeature.DefaultFeatureGate))
	if o.MemberResponseHeaderTimeout < 0 {
		errs = append(errs, fmt.Errorf("--member-response-header-timeout %s: must not be negative (0 waits forever)", o.MemberResponseHeaderTimeout))
	}
	for _, msg := range validation.IsDNS1123Label(o.SecretNamespace) {
		errs = append(errs, fmt.Errorf("--secret-namespace %q: %s", o.SecretNamespace, msg))
	}
	if o.MaxLongRunningPerUser < 0 {
		errs = append(errs, fmt.Errorf("--%s %d: must be 0 (no limit) or more", longrunning.Flag, o.MaxLongRunningPerUser))
	}
	errs = append(errs, o.validateFanOut()...)
	if o.MemberDoorPort < 0 || o.MemberDoorPort > 65535 {
		errs = append(errs, fmt.Errorf("--%s %d: must be a port, or 0 for no member door", MemberDoorPortFlag, o.MemberDoorPort))
	} else if o.MemberDoorPort != 0 && o.MemberDoorPort == o.Recommended.SecureServing.BindPort {
		errs = append(errs, fmt.Errorf("--%s %d: the gateway's --secure-port already serves it", MemberDoorPortFlag, o.MemberDoorPort))
	}
	for _, msg := range validation.IsDNS1123Subdomain(o.StatusLeaseName) {
		errs = append(errs, fmt.Errorf("--status-lease-name %q: %s", o.StatusLeaseName, msg))
	}
	if o.SplitLimitsAcrossReplicas {
		// It labels the replicas' Leases.
		for _, msg := range validation.IsValidLabelValue(o.StatusLeaseName) {
			errs = append(errs, fmt.Errorf("--status-lease-name %q: %s (it names the replicas' Leases with --%s; shorten it, or turn that off)", o.StatusLeaseName, msg, SplitLimitsFlag))
		}
	}
	return utilerrors.NewAggregate(errs)
}

func (o *Options) validateFanOut() []error {
	var errs []error
	if o.FanOutParallel < 1 {
		errs = append(errs, fmt.Errorf("--fan-out-parallel %d: must be 1 or more", o.FanOutParallel))
	}
	if o.FanOutMemberTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--fan-out-member-timeout %s: must be positive", o.FanOutMemberTimeout))
	}
	if o.FanOutListMemory.Sign() < 0 {
		errs = append(errs, fmt.Errorf("--fan-out-list-memory %s: must be 0 (no bound) or more", o.FanOutListMemory.String()))
	}
	if o.MemberAccessReviewTTL <= 0 {
		errs = append(errs, fmt.Errorf("--member-access-review-ttl %s: must be more than 0", o.MemberAccessReviewTTL))
	}
	if o.FleetCacheMemory.Sign() < 0 {
		errs = append(errs, fmt.Errorf("--fleet-cache-memory %s: must be 0 (no bound) or more", o.FleetCacheMemory.String()))
	}
	return errs
}

// Config builds the server configuration from the options.
func (o *Options) Config() (*Config, error) {
	serverConfig := genericapiserver.NewRecommendedConfig(o.codecs)
	if err := o.ServerRun.ApplyTo(&serverConfig.Config); err != nil {
		return nil, err
	}

	// OpenAPI definitions name the served version only: o.scheme also has the
	// internal one (the same Go types), which clients cannot ask for.
	namer := openapi.NewDefinitionNamer(buildScheme(gatewayv1alpha1.AddServedTypesToScheme))
	serverConfig.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(gatewayopenapi.GetOpenAPIDefinitions, namer)
	serverConfig.OpenAPIConfig.Info.Title = "kube-gateway"
	serverConfig.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(gatewayopenapi.GetOpenAPIDefinitions, namer)
	serverConfig.OpenAPIV3Config.Info.Title = "kube-gateway"

	// Every proxied request is long-running for the gateway: the member decides
	// how long a watch, a log stream or an exec session lasts, not the gateway's
	// request timeout or in-flight limit.
	serverConfig.LongRunningFunc = genericfilters.BasicLongRunningRequestCheck(sets.NewString("watch"), sets.NewString("proxy"))

	if err := o.Recommended.ApplyTo(serverConfig); err != nil {
		return nil, err
	}
	// The hub's front proxy sends every request with the same client
	// certificate: verify it once, not on every request, for authentication
	// and for the entry decision alike.
	frontProxy := frontproxy.NewVerifier(serverConfig.Authentication.RequestHeaderConfig)
	serverConfig.Authentication.Authenticator = frontProxy.Authenticator(serverConfig.Authentication.Authenticator)
	// Without direct access, requests for the gateway's API that do not come
	// through the front proxy are refused before authentication: a hub bearer
	// token or client certificate would otherwise authenticate here (the
	// delegated authenticator asks the hub) and skip the hub's priority and
	// fairness and audit.
	var entry *chain.Entry
	if !o.DirectAccess {
		entry = &chain.Entry{FromFrontProxy: frontProxy.FromFrontProxy, Message: directAccessRefused}
	}
	return &Config{
		Generic: serverConfig,
		Extra: ExtraConfig{
			Scheme:                      o.scheme,
			Codecs:                      o.codecs,
			SecretNamespace:             o.SecretNamespace,
			StatusLeaseName:             o.StatusLeaseName,
			AuthorizeProxySubpath:       o.AuthorizeProxySubpath,
			Tracing:                     o.Recommended.Traces.ConfigFile != "",
			Entry:                       entry,
			FrontProxy:                  frontProxy,
			LongRunning:                 longrunning.New(o.MaxLongRunningPerUser),
			ConnectAdmissionPlugins:     o.connectAdmissionPlugins(),
			MemberResponseHeaderTimeout: o.MemberResponseHeaderTimeout,
			ProbeWithNewConnections:     o.ProbeWithNewConnections,
			SplitLimitsAcrossReplicas:   o.SplitLimitsAcrossReplicas,
			ShareHealthChecks:           o.ShareHealthChecks,
			FanOutParallel:              o.FanOutParallel,
			FanOutMemberTimeout:         o.FanOutMemberTimeout,
			FanOutListMemory:            fanout.NewListMemory(o.FanOutListMemory.Value()),
			FleetCacheMemory:            fleetcache.NewMemory(o.FleetCacheMemory.Value()),
			MemberAccessReviewTTL:       o.MemberAccessReviewTTL,
			MemberDoorAddress:           o.memberDoorAddress(),
		},
	}, nil
}

// connectAdmissionPlugins returns the enabled admission plugins, of those
// registered, that can act on CONNECT requests; nil when an admission
// configuration file is given (it can add static policies and webhooks that
// no hub object shows), so that CONNECT admission always runs then.
func (o *Options) connectAdmissionPlugins() []string {
	a := o.Recommended.Admission
	if a == nil || a.ConfigFile != "" {
		return nil
	}
	disabled := sets.New(a.DisablePlugins...)
	enabled := []string{}
	for _, p := range a.RecommendedPluginOrder {
		if (!disabled.Has(p) && !a.DefaultOffPlugins.Has(p)) || slices.Contains(a.EnablePlugins, p) {
			enabled = append(enabled, p)
		}
	}
	return enabled
}

// memberDoorAddress is host:port of the member door; "" for none.
func (o *Options) memberDoorAddress() string {
	if o.MemberDoorPort == 0 {
		return ""
	}
	host := ""
	if ip := o.Recommended.SecureServing.BindAddress; ip != nil && !ip.IsUnspecified() {
		host = ip.String()
	}
	return net.JoinHostPort(host, strconv.Itoa(o.MemberDoorPort))
}
