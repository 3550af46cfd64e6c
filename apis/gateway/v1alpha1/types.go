package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// UpstreamCluster is a member cluster reachable through the gateway at
// /apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/{name}/proxy/{path}: its
// apiserver endpoints, the credential the gateway uses toward it, and how requests
// are dispatched, limited and balanced among its endpoints.
type UpstreamCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired configuration of the member cluster.
	Spec UpstreamClusterSpec `json:"spec"`
	// Status is what the gateway observed about the member cluster.
	// +optional
	Status UpstreamClusterStatus `json:"status,omitempty"`
}

// UpstreamClusterSpec is the configuration of a member cluster.
type UpstreamClusterSpec struct {
	// Servers are the member's kube-apiserver endpoints. At least one is required.
	// +listType=map
	// +listMapKey=endpoint
	Servers []UpstreamServer `json:"servers"`

	// ClientConfig says how the gateway connects and authenticates to the servers.
	ClientConfig ClientConfig `json:"clientConfig"`

	// HealthCheck configures active health checking of the servers.
	// +optional
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`

	// Impersonation maps the hub identity to the identity impersonated on the member.
	// Empty: the member sees the hub user as is (name, groups, UID, extras).
	// +optional
	Impersonation *ImpersonationPolicy `json:"impersonation,omitempty"`

	// FlowControl declares the flow-control schemas dispatch policies refer to.
	// +optional
	FlowControl *FlowControl `json:"flowControl,omitempty"`

	// DispatchPolicies are matched in order against each proxied request; the first
	// match decides the server subset, the balancing strategy and the flow-control
	// schema. No match: all enabled servers, RoundRobin, no flow control.
	// +optional
	// +listType=atomic
	DispatchPolicies []DispatchPolicy `json:"dispatchPolicies,omitempty"`

	// SecureServing opens the member door for this cluster: the member's own
	// clients (kubelets, controllers, kubectl with the member's credentials)
	// reach it on the gateway's member-door port under one of ServerNames,
	// authenticated against this member only. Nil: the door is closed.
	// +optional
	SecureServing *SecureServing `json:"secureServing,omitempty"`
}

// SecureServing is how the member door serves one cluster.
type SecureServing struct {
	// ServerNames are the hostnames the cluster is served under: the TLS
	// server name (SNI) a client sends picks the cluster. Lower-case DNS
	// names, not IP addresses; a name belongs to one cluster only.
	// +listType=set
	ServerNames []string `json:"serverNames"`
	// SecretRef names the hub Secret with the door's serving certificate for
	// these names, keys `tls.crt` and `tls.key`, and `ca.crt`: the CA bundle
	// that verifies client certificates (the member's client CA, so that the
	// member's own certificates authenticate here). It must live in the
	// gateway's Secret namespace, like spec.clientConfig.secretRef.
	SecretRef SecretReference `json:"secretRef"`
	// ClientCA says which CAs verify client certificates at the door: Secret
	// (the default), the ca.crt of secretRef; or Member, the member's own
	// client CA, the client-ca-file of its
	// kube-system/extension-apiserver-authentication ConfigMap, read with the
	// gateway's credential and kept current (with ca.crt too when the Secret
	// has one).
	// +optional
	ClientCA ClientCASource `json:"clientCA,omitempty"`
	// TokenReview says how bearer tokens are authenticated at the door: by a
	// TokenReview on the member, whose answer is kept. Defaulted: on, with
	// the default lifetimes.
	// +optional
	TokenReview *TokenReview `json:"tokenReview,omitempty"`
}

// ClientCASource is where the member door's client CAs come from.
type ClientCASource string

// Sources of spec.secureServing.clientCA.
const (
	ClientCAFromSecret ClientCASource = "Secret"
	ClientCAFromMember ClientCASource = "Member"
)

// TokenReview configures the member door's bearer token authentication.
type TokenReview struct {
	// Disabled refuses bearer tokens at the door (401): only client
	// certificates authenticate.
	// +optional
	Disabled bool `json:"disabled,omitempty"`
	// CacheTTLSeconds is how long the member's answer for a token it
	// authenticated is kept. Default 600.
	// +optional
	CacheTTLSeconds int32 `json:"cacheTTLSeconds,omitempty"`
	// FailureCacheTTLSeconds is how long the member's answer for a token it
	// did not authenticate is kept, so that a flood of bad tokens reaches the
	// member once per token and lifetime. Default 10.
	// +optional
	FailureCacheTTLSeconds int32 `json:"failureCacheTTLSeconds,omitempty"`
}

// UpstreamServer is one kube-apiserver endpoint of a member cluster.
type UpstreamServer struct {
	// Endpoint is the https URL of the apiserver: scheme, host and optional port,
	// without path, query or fragment, e.g. https://192.0.2.10:6443.
	Endpoint string `json:"endpoint"`
	// Disabled takes the endpoint out of rotation without removing it.
	// +optional
	Disabled bool `json:"disabled,omitempty"`
}

// ClientConfig says how the gateway connects to a member's apiservers. Credentials
// never sit in the UpstreamCluster: they are read from a Secret on the hub.
type ClientConfig struct {
	// SecretRef names the hub Secret holding the gateway's credential toward the
	// member: key `token` (a bearer token), or keys `tls.crt` and `tls.key` (a client
	// certificate); optionally `ca.crt` (PEM CA bundle of the member's apiservers).
	// The Secret must live in the namespace the gateway is configured to read
	// (flag --secret-namespace).
	SecretRef SecretReference `json:"secretRef"`
	// CAData is a PEM CA bundle to verify the member's serving certificates. Optional
	// when the Secret has `ca.crt`; when both are set, both are trusted.
	// +optional
	CAData []byte `json:"caData,omitempty"`
	// ServerName overrides the name used to verify the servers' certificates (SNI).
	// +optional
	ServerName string `json:"serverName,omitempty"`
	// Insecure skips verification of the servers' certificates. Never use it outside
	// tests: anyone on the path can read the gateway's credential.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
	// ProxyURL is a forward proxy every connection to the servers goes through:
	// http://host:port or https://host:port (HTTP CONNECT tunnel), or
	// socks5://host:port. No path, query, fragment or user info: proxy
	// credentials, if any, are keys `proxy-username` and `proxy-password` of the
	// Secret of secretRef (`proxy-ca.crt` adds CAs trusted for an https proxy).
	// The member's TLS runs inside the tunnel. Empty: the servers are dialed directly.
	// +optional
	ProxyURL string `json:"proxyURL,omitempty"`
	// Konnectivity reaches the servers through a konnectivity server (the
	// apiserver-network-proxy) that an agent in the member dials out to, for
	// members the gateway cannot dial; not with proxyURL. Every connection to
	// the servers, health probes and upgrades included, is opened through it;
	// endpoints may then name hosts only the agent resolves.
	// +optional
	Konnectivity *KonnectivityConfig `json:"konnectivity,omitempty"`
	// CacheSecretRef names the hub Secret holding the identity that fills the
	// gateway's cache of this member (see CachedResource): an identity that
	// may only list and watch the cached resources on the member, never the
	// impersonating credential of secretRef. Same keys as secretRef (`token`,
	// or `tls.crt` and `tls.key`; optionally `ca.crt`), in the same
	// namespace, and a Secret other than secretRef's. The cache connects as
	// requests do (servers, caData, serverName, proxyURL, konnectivity); only
	// the credential differs. Unset: this member is not cached.
	// +optional
	CacheSecretRef *SecretReference `json:"cacheSecretRef,omitempty"`
}

// KonnectivityConfig names the konnectivity server (gRPC mode, mutual TLS) that
// tunnels the gateway's connections to a member's servers.
type KonnectivityConfig struct {
	// Address is host:port of the konnectivity server's frontend gRPC port, the
	// one clients dial (its --server-port), e.g. konnectivity.gateway.svc:8090.
	// Set address or addresses, not both.
	// +optional
	Address string `json:"address,omitempty"`
	// Addresses are host:port of several konnectivity servers' frontend gRPC
	// ports, each one server (not a Service that balances over them), for
	// konnectivity servers that run with --server-count so that the member's
	// agent connects to each of them: a connection goes through the server
	// that took the last one, and one that fails there is tried through the
	// next, so the member stays reachable while a konnectivity server is
	// down. Set address or addresses, not both.
	// +optional
	// +listType=atomic
	Addresses []string `json:"addresses,omitempty"`
	// SecretRef names the hub Secret with the gateway's client certificate toward
	// the konnectivity server: keys `tls.crt`, `tls.key` and `ca.crt` (the CA of
	// the konnectivity server's serving certificate). It must live in the
	// gateway's Secret namespace, like spec.clientConfig.secretRef.
	SecretRef SecretReference `json:"secretRef"`
	// ServerName overrides the name verified in the konnectivity servers'
	// certificates. Default: the host of each address.
	// +optional
	ServerName string `json:"serverName,omitempty"`
}

// SecretReference names a Secret on the hub.
type SecretReference struct {
	// Namespace of the Secret.
	Namespace string `json:"namespace"`
	// Name of the Secret.
	Name string `json:"name"`
}

// HealthCheck configures active health checking of a member's servers.
type HealthCheck struct {
	// Path probed on each server with the gateway's credential. Default /readyz.
	// +optional
	Path string `json:"path,omitempty"`
	// IntervalSeconds between probes. Default 5.
	// +optional
	IntervalSeconds int32 `json:"intervalSeconds,omitempty"`
	// TimeoutSeconds of one probe. Default 2; must be less than IntervalSeconds.
	// +optional
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// UnhealthyThreshold is how many consecutive failures mark a server unhealthy.
	// Default 2.
	// +optional
	UnhealthyThreshold int32 `json:"unhealthyThreshold,omitempty"`
	// HealthyThreshold is how many consecutive successes mark a server healthy.
	// Default 1.
	// +optional
	HealthyThreshold int32 `json:"healthyThreshold,omitempty"`
}

// ImpersonationPolicy maps the hub identity to the identity the gateway
// impersonates on the member.
type ImpersonationPolicy struct {
	// UserPrefix is prepended to the user name, e.g. "hub:", so that hub users
	// cannot act as the member's own users of the same name.
	// +optional
	UserPrefix string `json:"userPrefix,omitempty"`
	// GroupPrefix is prepended to every forwarded group name.
	// +optional
	GroupPrefix string `json:"groupPrefix,omitempty"`
	// Groups filters the forwarded groups by their hub names. Empty: all.
	// +optional
	Groups *NameFilter `json:"groups,omitempty"`
	// Extras filters the forwarded user extra keys. Empty: all.
	// +optional
	Extras *NameFilter `json:"extras,omitempty"`
}

// NameFilter keeps names that Allow lists (all if Allow is empty) and that Deny
// does not list.
type NameFilter struct {
	// Allow lists the names kept. Empty: all names.
	// +optional
	// +listType=set
	Allow []string `json:"allow,omitempty"`
	// Deny lists names dropped, even if allowed.
	// +optional
	// +listType=set
	Deny []string `json:"deny,omitempty"`
}

// FlowControl declares named flow-control schemas.
type FlowControl struct {
	// FlowControlSchemas are the schemas dispatch policies refer to by name.
	// +listType=map
	// +listMapKey=name
	FlowControlSchemas []FlowControlSchema `json:"flowControlSchemas"`
}

// FlowControlSchema is one limiter. Exactly one of Exempt, MaxRequestsInflight and
// TokenBucket is set.
type FlowControlSchema struct {
	// Name of the schema, referred to by dispatchPolicies[].flowControlSchemaName.
	Name string `json:"name"`
	// Exempt requests are never limited.
	// +optional
	Exempt *ExemptFlowControl `json:"exempt,omitempty"`
	// MaxRequestsInflight bounds concurrent requests.
	// +optional
	MaxRequestsInflight *MaxRequestsInflightFlowControl `json:"maxRequestsInflight,omitempty"`
	// TokenBucket bounds the request rate.
	// +optional
	TokenBucket *TokenBucketFlowControl `json:"tokenBucket,omitempty"`
	// Distinguisher splits the schema's budget into one flow per user or per
	// namespace, so that one of them cannot use up the budget of the others.
	// Empty: one flow for every request of the schema. Idle flows are forgotten.
	// +optional
	Distinguisher FlowDistinguisher `json:"distinguisher,omitempty"`
}

// FlowDistinguisher says what gets a budget of its own within a schema.
type FlowDistinguisher string

const (
	// FlowDistinguisherUser gives every hub user a budget of its own.
	FlowDistinguisherUser FlowDistinguisher = "User"
	// FlowDistinguisherNamespace gives every namespace a budget of its own;
	// cluster-scoped and non-resource requests share one.
	FlowDistinguisherNamespace FlowDistinguisher = "Namespace"
)

// ExemptFlowControl marks requests as never limited.
type ExemptFlowControl struct{}

// MaxRequestsInflightFlowControl bounds the number of concurrent requests.
type MaxRequestsInflightFlowControl struct {
	// Max concurrent requests.
	Max int32 `json:"max"`
	// CountLongRunning makes long-running requests (watch, exec, attach,
	// port-forward, log follow) hold a slot for their whole life. Default false:
	// they are admitted by the limit but do not occupy it, so a few watches
	// cannot starve every other request.
	// +optional
	CountLongRunning bool `json:"countLongRunning,omitempty"`
}

// TokenBucketFlowControl bounds the request rate with a token bucket.
type TokenBucketFlowControl struct {
	// QPS is the sustained rate in requests per second: a whole number (50)
	// or a fraction (0.5, or 500m: one request every two seconds).
	QPS resource.Quantity `json:"qps"`
	// Burst is the bucket size.
	Burst int32 `json:"burst"`
}

// Strategy is how a server is picked among the candidates of a request.
type Strategy string

const (
	// RoundRobin cycles through the candidates.
	RoundRobin Strategy = "RoundRobin"
	// Random picks a candidate uniformly at random.
	Random Strategy = "Random"
	// LeastRequest picks the candidate with fewer requests in flight (power of two
	// choices).
	LeastRequest Strategy = "LeastRequest"
)

// DispatchPolicy routes the requests that match any of its rules.
type DispatchPolicy struct {
	// Name identifies the policy in metrics and logs; unique within the cluster.
	// Default: "policy-<index>".
	// +optional
	Name string `json:"name,omitempty"`
	// Rules are ORed: a request matching any rule matches the policy.
	// +listType=atomic
	Rules []DispatchPolicyRule `json:"rules"`
	// UpstreamSubset restricts the candidate servers to these endpoints (each must be
	// one of spec.servers). Empty: all enabled servers.
	// +optional
	// +listType=set
	UpstreamSubset []string `json:"upstreamSubset,omitempty"`
	// Strategy picks a server among the candidates. Default RoundRobin.
	// +optional
	Strategy Strategy `json:"strategy,omitempty"`
	// FlowControlSchemaName names the flow-control schema applied to matching
	// requests. Empty: not limited.
	// +optional
	FlowControlSchemaName string `json:"flowControlSchemaName,omitempty"`
}

// DispatchPolicyRule matches requests; its fields are ANDed. A rule is a resource
// rule (resources set) or a non-resource rule (nonResourceURLs set), never both.
// In every list, "*" matches everything, and a list made only of "-"-prefixed
// entries matches every value none of them names.
type DispatchPolicyRule struct {
	// Verbs: get, list, watch, create, update, patch, delete, deletecollection;
	// non-resource requests use the lower-cased HTTP method.
	// +optional
	// +listType=atomic
	Verbs []string `json:"verbs,omitempty"`
	// APIGroups of the resource ("" is the core group).
	// +optional
	// +listType=atomic
	APIGroups []string `json:"apiGroups,omitempty"`
	// Resources such as "pods", "pods/log" or "*/status".
	// +optional
	// +listType=atomic
	Resources []string `json:"resources,omitempty"`
	// ResourceNames of the objects. Empty: any.
	// +optional
	// +listType=atomic
	ResourceNames []string `json:"resourceNames,omitempty"`
	// Namespaces of the request. Empty: any.
	// +optional
	// +listType=atomic
	Namespaces []string `json:"namespaces,omitempty"`
	// Users by name; a trailing "*" is a prefix glob. Empty (with serviceAccounts
	// empty): any.
	// +optional
	// +listType=atomic
	Users []string `json:"users,omitempty"`
	// ServiceAccounts by namespace and name. A request matching users or
	// serviceAccounts matches.
	// +optional
	// +listType=atomic
	ServiceAccounts []ServiceAccountReference `json:"serviceAccounts,omitempty"`
	// UserGroups the user must belong to (any of them). Empty: any.
	// +optional
	// +listType=atomic
	UserGroups []string `json:"userGroups,omitempty"`
	// NonResourceURLs: exact paths, or a trailing "/*" prefix match.
	// +optional
	// +listType=atomic
	NonResourceURLs []string `json:"nonResourceURLs,omitempty"`
}

// ServiceAccountReference names a service account of the hub.
type ServiceAccountReference struct {
	// Namespace of the service account.
	Namespace string `json:"namespace"`
	// Name of the service account.
	Name string `json:"name"`
}

// UpstreamClusterStatus is what the gateway observed about a member cluster.
type UpstreamClusterStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready says whether any server can serve requests (False also
	// when the configuration cannot be used, e.g. a missing credential Secret);
	// InsecureTransport is True when the servers' certificates are not verified
	// (spec.clientConfig.insecure).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Servers is the observed state of each server.
	// +optional
	// +listType=map
	// +listMapKey=endpoint
	Servers []ServerStatus `json:"servers,omitempty"`
	// Caches is the state of the gateway's cache of this member, one entry
	// per CachedResource that selects it.
	// +optional
	// +listType=map
	// +listMapKey=cachedResource
	Caches []UpstreamClusterCacheStatus `json:"caches,omitempty"`
}

// UpstreamClusterCacheStatus is the state of the cache of one cached resource
// on one member.
type UpstreamClusterCacheStatus struct {
	// CachedResource is the name of the CachedResource this entry is for.
	CachedResource string `json:"cachedResource"`
	// Group of the cached resource, as in the CachedResource ("" is the core
	// group).
	// +optional
	Group string `json:"group,omitempty"`
	// Version of the cached resource, as in the CachedResource.
	Version string `json:"version"`
	// Resource of the cached resource, as in the CachedResource.
	Resource string `json:"resource"`
	// Synced is true while the cache holds a complete list of the member's
	// objects and follows its watch: reads may be answered from it.
	Synced bool `json:"synced"`
	// ResourceVersion is the member's resourceVersion the cache has reached
	// (of its last list, or of the last watch event or bookmark since).
	// +optional
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// Objects is how many objects the cache holds for this member.
	// +optional
	Objects int64 `json:"objects,omitempty"`
	// Bytes is about how much memory those objects take in the gateway.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// LastSyncTime is when the cache last became synced (its last complete
	// list).
	// +optional
	LastSyncTime *metav1.Time `json:"lastSyncTime,omitempty"`
	// StaleSince is when the cache stopped being synced; unset while synced.
	// +optional
	StaleSince *metav1.Time `json:"staleSince,omitempty"`
	// Reason is a CamelCase reason for the state, e.g. why it is not synced.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is a human-readable detail of the state.
	// +optional
	Message string `json:"message,omitempty"`
}

// ServerStatus is the observed state of one server.
type ServerStatus struct {
	// Endpoint of the server, as in spec.servers.
	Endpoint string `json:"endpoint"`
	// Healthy says whether health checking found the server fit to receive
	// requests; unset while its health is not known yet (a new server before
	// its first probe answers or fails often enough, see reason NotChecked).
	// A server receives requests while this is true or unset.
	// +optional
	Healthy *bool `json:"healthy,omitempty"`
	// Reason is a CamelCase reason for the last transition.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is a human-readable detail of the last transition.
	// +optional
	Message string `json:"message,omitempty"`
	// LastTransitionTime is when Healthy last changed (or was first set).
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
}

// ConditionReady is the condition type saying whether an UpstreamCluster has a
// server that can serve, and whether a CachedResource's caches are synced on
// every cluster it selects.
const ConditionReady = "Ready"

// ServerReasonDisabled is the reason in status.servers of a server disabled in
// spec.servers.
const ServerReasonDisabled = "Disabled"

// ConditionInsecureTransport is the condition type saying whether the gateway
// skips the verification of the servers' certificates: True when
// spec.clientConfig.insecure is set (reason InsecureSkipVerify, the message names
// the servers), False otherwise (reason CertificatesVerified).
const ConditionInsecureTransport = "InsecureTransport"

// ConditionDispatchResourcesServed is the condition type saying whether the
// member serves every API group and resource that the dispatch rules name, as
// its discovery tells: False (reason UnservedResources, the message names the
// rules) when a rule names something the member does not serve, such as the
// singular "namespace", so that it never matches it; True (reason
// ResourcesServed) otherwise. Absent while no rule names a concrete group or
// resource, or before the member's discovery could be read.
const ConditionDispatchResourcesServed = "DispatchResourcesServed"

// ConditionMemberDoorReady is the condition type saying whether the member
// door serves spec.secureServing: True (reason Serving) when it does, False
// with the reason of what keeps it from serving (SecretNotFound,
// InvalidSecret) and a message saying what to fix. Absent without
// spec.secureServing.
const ConditionMemberDoorReady = "MemberDoorReady"

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// UpstreamClusterList is a list of UpstreamClusters.
type UpstreamClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the UpstreamClusters.
	Items []UpstreamCluster `json:"items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// UpstreamClusterProxyOptions are the options of the proxy subresource.
type UpstreamClusterProxyOptions struct {
	metav1.TypeMeta `json:",inline"`
	// Path is the member path the request is forwarded to.
	// +optional
	Path string `json:"path,omitempty"`
}
