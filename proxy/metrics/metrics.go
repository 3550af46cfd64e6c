// Package metrics holds the Prometheus metrics of the proxy. The server creates one
// Metrics with New and registers it once on the registry behind its /metrics
// endpoint, the k8s.io/component-base legacy registry that k8s.io/apiserver serves:
//
//	m := metrics.New()
//	if err := m.Register(legacyregistry.Registerer()); err != nil { ... }
//
// (legacyregistry.Registerer() is the supported way to add raw client_golang
// collectors there; legacyregistry.RawMustRegister does the same but is
// deprecated.) There is no package-level state: tests use a fresh
// prometheus.Registry.
//
// # Metrics
//
// kube_gateway_proxy_requests_total{cluster,door,policy,schema,verb,resource,code}
// (counter): requests forwarded to a member cluster and finished, by the HTTP
// status code the client got (the member's, or the gateway's own for a request
// that failed on the way, e.g. 502). Long-running requests are counted when they
// end. Requests the gateway refused itself (flow control, no ready server) are
// not here: see kube_gateway_proxy_rejected_requests_total.
//
// kube_gateway_proxy_request_duration_seconds{cluster,door,policy,verb} (histogram):
// time from the request's arrival in the proxy to the end of the response, for
// requests that are not long-running. Long-running requests (watch, exec, attach,
// port-forward, log follow, recorded with ObserveLongRunning) are excluded: their
// duration is how long the client kept them open, which says nothing about
// latency. Buckets from 5ms to 60s.
//
// kube_gateway_proxy_inflight_requests{cluster,door,policy,schema} (gauge): requests
// being forwarded right now, long-running ones included.
//
// kube_gateway_proxy_rejected_requests_total{cluster,door,policy,schema,reason}
// (counter): requests the gateway refused without forwarding them, by reason:
// TokenBucket and MaxInflight (429 from flow control), NoReadyServer (503).
//
// kube_gateway_proxy_retries_total{cluster,endpoint} (counter): idempotent
// requests tried again on another server because endpoint failed them before
// answering anything (a connection that could not be made or broke before the
// response). The request itself is counted once, in requests_total, with the
// status of its last attempt.
//
// kube_gateway_upstream_server_healthy{cluster,endpoint} (gauge, see
// NewServerHealthCollector): 1 when an enabled server of a usable cluster
// receives requests, 0 when health checking took it out; read at scrape time.
//
// kube_gateway_health_probes_total{connection} (counter, see
// NewHealthProbesCollector): health probes of member servers sent, by the
// connection they went over, pooled or new (a TLS handshake each).
//
// kube_gateway_health_probes_skipped_total{reason} (counter, see
// NewHealthProbesSkippedCollector): health probes that fell due and were not
// sent, by reason.
//
// kube_gateway_object_encodings_total{response,result} (counter, see
// NewObjectEncodingsCollector): UpstreamCluster objects written in LIST and
// WATCH responses of the gateway's own API, by whether their JSON was kept
// from an earlier response or encoded.
//
// # Labels
//
// Every label set is bounded; no label ever holds a raw path or a user name.
//
//   - cluster: the UpstreamCluster name.
//   - door: whose identity the request carries: hub (a hub user, through the
//     hub or direct access) or member (a member's own client, through the
//     member door).
//   - policy: the name of the dispatch policy that matched, "" when none did.
//   - schema: the flow-control schema of that policy, "" when none.
//   - verb: the Kubernetes verb of the request (get, list, watch, create,
//     update, patch, delete, deletecollection), or for a non-resource request its
//     lower-cased HTTP method (get, post, put, patch, delete, head, options);
//     anything else is "<other>".
//   - resource: resource[/subresource] of a resource request (pods, pods/log,
//     deployments/scale), "" for non-resource requests. It is bounded by the
//     member's API, but a client can ask for resources that do not exist, so each
//     cluster records at most MaxResourcesPerCluster distinct values (and only
//     valid UTF-8 values of at most 128 bytes); further ones are "<other>".
//   - code: the HTTP status code, e.g. "200".
//   - reason: see kube_gateway_proxy_rejected_requests_total.
//   - endpoint: a server of spec.servers as written there (https://host:port).
//   - connection: pooled or new.
//   - response: list or watch; result: kept or encoded.
//
// ForgetCluster deletes every series of a deleted cluster.
package metrics

import (
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	namespace = "kube_gateway"
	subsystem = "proxy"
)

// Reasons of kube_gateway_proxy_rejected_requests_total.
const (
	ReasonTokenBucket   = "TokenBucket"
	ReasonMaxInflight   = "MaxInflight"
	ReasonNoReadyServer = "NoReadyServer"
	// ReasonLongRunningPerUser: the user holds as many long-running requests
	// open through this gateway as --max-long-running-requests-per-user allows
	// (an exec, attach or port-forward session counts 3).
	ReasonLongRunningPerUser = "LongRunningPerUser"
	// ReasonShuttingDown: a long-running request that reached a replica
	// after it ended its streams for a shutdown.
	ReasonShuttingDown = "ShuttingDown"
)

// Other is the label value standing for values that are not recorded as is.
const Other = "<other>"

// MaxResourcesPerCluster is the most distinct resource label values recorded per
// cluster; further ones are recorded as Other.
const MaxResourcesPerCluster = 1000

// maxLabelLen is the longest resource label value recorded as is.
const maxLabelLen = 128

// Metrics are the proxy's metrics. Safe for concurrent use.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inflight *prometheus.GaugeVec
	rejected *prometheus.CounterVec
	retries  *prometheus.CounterVec
	aborts   *prometheus.CounterVec
	// tokenReviews counts the member door's TokenReviews (cache misses).
	tokenReviews *prometheus.CounterVec
	// accessReviews counts the SubjectAccessReviews sent to members (cache
	// misses of memberauthz).
	accessReviews *prometheus.CounterVec
	// cacheReads counts members' parts of fan-out reads by how they were
	// answered (fleetcache.Reads).
	cacheReads *prometheus.CounterVec

	resources resourceLabels
}

// New creates the metrics, unregistered.
func New() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "requests_total",
			Help: "Requests forwarded to a member cluster and finished, by the HTTP status code the client got.",
		}, []string{"cluster", "door", "policy", "schema", "verb", "resource", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "request_duration_seconds",
			Help:    "Duration of proxied requests that are not long-running (watch, exec, attach, port-forward, log follow are excluded).",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"cluster", "door", "policy", "verb"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "inflight_requests",
			Help: "Requests being forwarded to a member cluster, long-running ones included.",
		}, []string{"cluster", "door", "policy", "schema"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "rejected_requests_total",
			Help: "Requests the gateway refused without forwarding them, by reason (TokenBucket, MaxInflight, NoReadyServer, LongRunningPerUser).",
		}, []string{"cluster", "door", "policy", "schema", "reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "retries_total",
			Help: "Idempotent requests tried again on another server because this endpoint failed them before answering.",
		}, []string{"cluster", "endpoint"}),
		aborts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "request_aborts_total",
			Help: "Proxied requests whose response broke off after it began, because the member's connection failed mid-body: the client got an incomplete answer. Also counted in requests_total, with the status the response began with.",
		}, []string{"cluster", "door", "policy", "schema", "verb", "resource"}),
		tokenReviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "member_door", Name: "tokenreviews_total",
			Help: "TokenReviews the member door sent to a member for bearer tokens it had no cached answer for, by result (authenticated, rejected, error).",
		}, []string{"cluster", "result"}),
		accessReviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "access_reviews_total",
			Help: "SubjectAccessReviews the gateway sent to a member for a question it had no cached answer for (the member door's impersonation, reads from the fleet cache).",
		}, []string{"cluster"}),
		cacheReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "fleet_cache", Name: "reads_total",
			Help: "Members' parts of fan-out lists and watches, by how they were answered: cache, forbidden (the member's review denied it), or by the member because of not_cached, query (a Table, a selector the cache does not apply), behind (the cache has not reached the resourceVersion asked for), authz_error.",
		}, []string{"cluster", "verb", "result"}),
		resources: resourceLabels{byCluster: map[string]map[string]struct{}{}},
	}
}

// Results of a member door's TokenReview.
const (
	TokenAuthenticated = "authenticated"
	TokenRejected      = "rejected"
	TokenReviewError   = "error"
)

// TokenReviewed records a TokenReview the member door sent to cluster.
func (m *Metrics) TokenReviewed(cluster, result string) {
	m.tokenReviews.WithLabelValues(safe(cluster), result).Inc()
}

// AccessReviewed records a SubjectAccessReview sent to cluster.
func (m *Metrics) AccessReviewed(cluster string) {
	m.accessReviews.WithLabelValues(safe(cluster)).Inc()
}

// CacheRead records how a member's part of a fan-out read was answered.
func (m *Metrics) CacheRead(cluster, verb, result string) {
	m.cacheReads.WithLabelValues(safe(cluster), verb, result).Inc()
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration, m.inflight, m.rejected, m.retries, m.aborts, m.tokenReviews, m.accessReviews, m.cacheReads}
}

// Register registers the metrics on reg, all or none: on error, those already
// registered are unregistered again.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	cs := m.collectors()
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return err
		}
	}
	return nil
}

// Doors: who the request's identity belongs to (the door label).
const (
	// DoorHub: a hub user, through the hub's front proxy or direct access.
	DoorHub = "hub"
	// DoorMember: a member's own client, through the member door.
	DoorMember = "member"
)

// Series names the series of one proxied request: its cluster, door, the
// dispatch policy that matched ("" when none) and that policy's flow-control
// schema ("" when none).
type Series struct {
	Cluster, Door, Policy, Schema string
}

func (s Series) safe() Series {
	return Series{Cluster: safe(s.Cluster), Door: safe(s.Door), Policy: safe(s.Policy), Schema: safe(s.Schema)}
}

// Observe records one finished proxied request that was not long-running:
// resource is resource[/subresource] ("" for non-resource requests, see
// ResourceLabel), code the status the client got, d the time from the request's
// arrival in the proxy to the end of the response.
func (m *Metrics) Observe(s Series, verb, resource string, code int, d time.Duration) {
	s, verb = s.safe(), verbLabel(verb)
	m.requests.WithLabelValues(s.Cluster, s.Door, s.Policy, s.Schema, verb, m.resources.label(s.Cluster, resource), codeLabel(code)).Inc()
	m.duration.WithLabelValues(s.Cluster, s.Door, s.Policy, verb).Observe(d.Seconds())
}

// ObserveLongRunning records one finished long-running request (watch, exec,
// attach, port-forward, log follow): counted in requests_total, kept out of the
// duration histogram.
func (m *Metrics) ObserveLongRunning(s Series, verb, resource string, code int) {
	s = s.safe()
	m.requests.WithLabelValues(s.Cluster, s.Door, s.Policy, s.Schema, verbLabel(verb), m.resources.label(s.Cluster, resource), codeLabel(code)).Inc()
}

// Aborted records that the response of a request (already observed) broke
// off mid-body because its member's connection failed.
func (m *Metrics) Aborted(s Series, verb, resource string) {
	s = s.safe()
	m.aborts.WithLabelValues(s.Cluster, s.Door, s.Policy, s.Schema, verbLabel(verb), m.resources.label(s.Cluster, resource)).Inc()
}

// InFlight returns the in-flight gauge of s. Keep the gauge for the life of
// the request: Inc when forwarding starts, Dec when it ends.
func (m *Metrics) InFlight(s Series) prometheus.Gauge {
	s = s.safe()
	return m.inflight.WithLabelValues(s.Cluster, s.Door, s.Policy, s.Schema)
}

// Rejected records a request refused by the gateway itself; reason is one of the
// Reason constants.
func (m *Metrics) Rejected(s Series, reason string) {
	s = s.safe()
	m.rejected.WithLabelValues(s.Cluster, s.Door, s.Policy, s.Schema, safe(reason)).Inc()
}

// Retried records that a request which endpoint (a server of spec.servers)
// failed before answering is tried again on another server.
func (m *Metrics) Retried(cluster, endpoint string) {
	m.retries.WithLabelValues(safe(cluster), safe(endpoint)).Inc()
}

// ForgetCluster deletes every series of cluster, to be called when the
// UpstreamCluster is deleted (after it stopped taking requests: a request of the
// cluster recorded later creates its series again).
func (m *Metrics) ForgetCluster(cluster string) {
	cluster = safe(cluster)
	match := prometheus.Labels{"cluster": cluster}
	m.requests.DeletePartialMatch(match)
	m.duration.DeletePartialMatch(match)
	m.inflight.DeletePartialMatch(match)
	m.rejected.DeletePartialMatch(match)
	m.retries.DeletePartialMatch(match)
	m.aborts.DeletePartialMatch(match)
	m.tokenReviews.DeletePartialMatch(match)
	m.accessReviews.DeletePartialMatch(match)
	m.cacheReads.DeletePartialMatch(match)
	m.resources.forget(cluster)
}

// ResourceLabel is the resource label of a request: resource[/subresource] of a
// resource request, "" for a non-resource request.
func ResourceLabel(isResourceRequest bool, resource, subresource string) string {
	switch {
	case !isResourceRequest:
		return ""
	case subresource == "":
		return resource
	default:
		return resource + "/" + subresource
	}
}

// resourceLabels bounds the resource label values per cluster.
type resourceLabels struct {
	mu        sync.RWMutex
	byCluster map[string]map[string]struct{}
}

func (r *resourceLabels) label(cluster, resource string) string {
	if resource == "" {
		return ""
	}
	if len(resource) > maxLabelLen || !utf8.ValidString(resource) {
		return Other
	}
	r.mu.RLock()
	_, known := r.byCluster[cluster][resource]
	r.mu.RUnlock()
	if known {
		return resource
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.byCluster[cluster]
	if set == nil {
		set = map[string]struct{}{}
		r.byCluster[cluster] = set
	}
	if _, known := set[resource]; known {
		return resource
	}
	if len(set) >= MaxResourcesPerCluster {
		return Other
	}
	// Own the key: resource may be a substring of a large request path.
	resource = strings.Clone(resource)
	set[resource] = struct{}{}
	return resource
}

func (r *resourceLabels) forget(cluster string) {
	r.mu.Lock()
	delete(r.byCluster, cluster)
	r.mu.Unlock()
}

// knownVerbs are the verb label values recorded as is.
var knownVerbs = map[string]struct{}{
	"get": {}, "list": {}, "watch": {}, "create": {}, "update": {}, "patch": {},
	"delete": {}, "deletecollection": {}, "post": {}, "put": {}, "head": {}, "options": {},
}

func verbLabel(verb string) string {
	if _, ok := knownVerbs[verb]; ok {
		return verb
	}
	return Other
}

// codeLabels are the code labels of 0-999, formatted once.
var codeLabels = func() (l [1000]string) {
	for i := range l {
		l[i] = strconv.Itoa(i)
	}
	return l
}()

func codeLabel(code int) string {
	if code < 0 || code >= len(codeLabels) {
		return Other
	}
	return codeLabels[code]
}

// safe makes a label value valid UTF-8: client_golang panics on anything else.
// Cluster, policy and schema names come from validated specs; this only guards.
func safe(v string) string {
	if utf8.ValidString(v) {
		return v
	}
	return Other
}
