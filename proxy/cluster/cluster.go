// Package cluster holds a compiled member cluster: what a proxied request needs,
// built once per UpstreamCluster generation and Secret version, immutable after.
package cluster

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/balance"
	"github.com/kubewharf/kube-gateway/proxy/dispatch"
	"github.com/kubewharf/kube-gateway/proxy/flowcontrol"
	"github.com/kubewharf/kube-gateway/proxy/health"
	"github.com/kubewharf/kube-gateway/proxy/impersonate"
	"github.com/kubewharf/kube-gateway/proxy/konnectivity"
	"github.com/kubewharf/kube-gateway/proxy/memberauthz"
	"github.com/kubewharf/kube-gateway/proxy/request"
	"github.com/kubewharf/kube-gateway/proxy/transport"
)

// Reasons of configuration problems: why Compile refused a cluster. They are the
// reason of the Ready condition (False) and of the Warning event that report it.
const (
	// ReasonSecretNotFound: the credential Secret does not exist in the
	// gateway's Secret namespace.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonInvalidSecret: the credential Secret holds no usable credential
	// (none, both a token and a client certificate, a certificate that does not
	// match its key, ...).
	ReasonInvalidSecret = "InvalidSecret"
	// ReasonInvalidCAData: spec.clientConfig.caData or the Secret's ca.crt is not
	// a PEM bundle of certificates.
	ReasonInvalidCAData = "InvalidCAData"
	// ReasonInvalidConfiguration: anything else Compile rejects.
	ReasonInvalidConfiguration = "InvalidConfiguration"
)

// ConfigError is a configuration problem that keeps a cluster from being used.
// Its message names the cluster's objects and fields, never credential data.
type ConfigError struct {
	// Reason is one of the Reason* constants above.
	Reason string
	Err    error
}

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func configError(reason string, format string, args ...any) error {
	return &ConfigError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// ConfigErrorReason returns the reason of a configuration problem returned by
// Compile: the ConfigError's, else ReasonInvalidConfiguration.
func ConfigErrorReason(err error) string {
	var ce *ConfigError
	if errors.As(err, &ce) && ce.Reason != "" {
		return ce.Reason
	}
	return ReasonInvalidConfiguration
}

// Cluster is a compiled member cluster.
type Cluster struct {
	Name string
	// Endpoints are the enabled servers, in spec order, each with its
	// transports and health.
	Endpoints []*balance.Endpoint
	// Impersonation maps the hub user to the member identity.
	Impersonation *impersonate.Policy
	// Authorizer asks the member what a user may do there, without sending
	// it the request (the member door, reads from the fleet cache).
	Authorizer *memberauthz.Authorizer

	dispatch *dispatch.Matcher
	// routes[i] serves the requests of spec.dispatchPolicies[i].
	routes []Route
	// fallback serves requests no policy matches: all enabled servers, round
	// robin, no flow control.
	fallback    Route
	flowControl *flowcontrol.Set
	// builder builds the transports of every server from the credential and
	// connection settings: while they stay the same, it is kept, and a server
	// that stays in spec.servers keeps its transports and health (and its
	// connections, unless another server leaves: see Release).
	builder *transport.Builder
	// tunnel dials the servers through spec.clientConfig.konnectivity (nil: direct),
	// built from tunnelConfig; shared by the transports of every server.
	tunnel       *konnectivity.Dialer
	tunnelConfig konnectivity.Config

	// Health checks the endpoints; Start it for the life of the cluster.
	Health *health.Checker
	// servers lists spec.servers in order, for status: enabled ones point to
	// their endpoint.
	servers []server
}

type server struct {
	endpoint string
	enabled  *balance.Endpoint // nil when disabled
}

// Route is how a request is served: which policy it matched, which servers may
// take it, how one is picked, and which flow-control schema admits it.
type Route struct {
	// Policy is the name of the matched policy; "" when none matched.
	Policy string
	// Candidates are the enabled servers of the policy's subset.
	Candidates []*balance.Endpoint
	Picker     balance.Picker
	// Schema admits the request; nil means not limited.
	Schema *flowcontrol.Schema
}

// PickServer returns a server for the gateway's own request to the member
// (not a proxied one: no dispatch policy applies), as Pick does for requests
// no policy matches; nil when the cluster has no enabled server.
func (c *Cluster) PickServer() *balance.Endpoint { return c.fallback.Pick(nil) }

// Pick returns the server for one request: a healthy candidate other than
// exclude (a server that just failed it; may be nil). When no candidate is
// healthy it picks among all of them but exclude, as Envoy does below its
// panic threshold: a member whose readiness check fails can often still answer
// (discovery, /version, reads from its cache), and its own answer, even an
// error, tells the client more than the gateway's 503. Health checking and
// status still say unhealthy. nil when no other candidate exists.
func (r *Route) Pick(exclude *balance.Endpoint) *balance.Endpoint {
	candidates := r.Candidates
	for _, e := range r.Candidates {
		if e == exclude || !e.Healthy() {
			// The uncommon case: build the list of the usable ones.
			candidates = usable(r.Candidates, exclude, true)
			if len(candidates) == 0 {
				candidates = usable(r.Candidates, exclude, false)
			}
			break
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	return r.Picker.Pick(candidates)
}

// usable returns the candidates other than exclude, only the healthy ones if
// healthyOnly.
func usable(candidates []*balance.Endpoint, exclude *balance.Endpoint, healthyOnly bool) []*balance.Endpoint {
	out := make([]*balance.Endpoint, 0, len(candidates))
	for _, e := range candidates {
		if e != exclude && (e.Healthy() || !healthyOnly) {
			out = append(out, e)
		}
	}
	return out
}

// Route returns the route of a request: its first matching policy, or the
// fallback.
func (c *Cluster) Route(a *request.Attributes) *Route {
	if i := c.dispatch.Match(a); i >= 0 {
		return &c.routes[i]
	}
	return &c.fallback
}

// Options are the gateway's settings that apply to every cluster.
type Options struct {
	// FlowShare is this replica's share of the flow-control limits (nil:
	// whole limits).
	FlowShare *flowcontrol.Share
	// ProbeOwnConnections: see transport.Config.
	ProbeOwnConnections bool
	// ProbeCount, when set, counts the cluster's health probes by the
	// connection they went over.
	ProbeCount *transport.ProbeCount
	// Authorization tunes the cluster's Authorizer.
	Authorization memberauthz.Options
}

// Compile builds the runtime form of uc with the credential in secret. prev, the
// cluster it replaces (or nil), lends what did not change: a server's endpoint
// and transports when neither the Secret nor the connection settings changed
// (its connections stay open, its health holds), and the limiters of unchanged
// flow-control schemas (their state stays).
//
// onTransition is told every change of an endpoint's health (from the health
// checker's goroutine), after the cluster recorded it.
//
// secret is nil when the referenced Secret does not exist. Errors are
// *ConfigError (see ConfigErrorReason).
func Compile(uc *gatewayv1alpha1.UpstreamCluster, secret *corev1.Secret, prev *Cluster, onTransition func(*Cluster, health.ServerHealth), opts Options) (*Cluster, error) {
	return CompileTunneled(uc, secret, nil, prev, onTransition, opts)
}

// CompileTunneled is Compile with tunnelSecret, the Secret of
// spec.clientConfig.konnectivity (nil when it does not exist or is not named).
func CompileTunneled(uc *gatewayv1alpha1.UpstreamCluster, secret, tunnelSecret *corev1.Secret, prev *Cluster, onTransition func(*Cluster, health.ServerHealth), opts Options) (*Cluster, error) {
	c, err := compile(uc, secret, tunnelSecret, prev, onTransition, opts)
	if err != nil {
		var ce *ConfigError
		if !errors.As(err, &ce) {
			err = &ConfigError{Reason: ReasonInvalidConfiguration, Err: err}
		}
		return nil, err
	}
	return c, nil
}

func compile(uc *gatewayv1alpha1.UpstreamCluster, secret, tunnelSecret *corev1.Secret, prev *Cluster, onTransition func(*Cluster, health.ServerHealth), opts Options) (_ *Cluster, retErr error) {
	if secret == nil {
		ref := uc.Spec.ClientConfig.SecretRef
		return nil, configError(ReasonSecretNotFound, "its credential Secret %s/%s was not found on the hub", ref.Namespace, ref.Name)
	}
	c := &Cluster{Name: uc.Name, Impersonation: impersonate.Compile(uc.Spec.Impersonation)}
	cfg, err := transportConfig(uc, secret)
	if err != nil {
		return nil, err
	}
	cfg.ProbeOwnConnections = opts.ProbeOwnConnections
	sameConnections := prev != nil && prev.builder.Config().Equal(cfg)
	if k := uc.Spec.ClientConfig.Konnectivity; k != nil {
		if c.tunnelConfig, err = tunnelConfig(k, tunnelSecret); err != nil {
			return nil, err
		}
		if sameConnections && prev.tunnel != nil && prev.tunnelConfig.Equal(c.tunnelConfig) {
			c.tunnel = prev.tunnel
		} else if c.tunnel, err = konnectivity.New(c.tunnelConfig); err != nil {
			return nil, configError(ReasonInvalidSecret, "konnectivity Secret %s/%s: %v", tunnelSecret.Namespace, tunnelSecret.Name, err)
		} else {
			defer func() {
				if retErr != nil { // a tunnel no cluster will use
					c.tunnel.Retire()
				}
			}()
		}
		cfg.Dial = c.tunnel.DialContext
	}
	sameConnections = sameConnections && (prev.tunnel == c.tunnel)
	if sameConnections {
		c.builder = prev.builder
		c.Authorizer = prev.Authorizer // same credential and servers: its answers hold
	} else if c.builder, err = transport.NewBuilder(cfg); err != nil {
		return nil, configError(ReasonInvalidSecret, "credential Secret %s/%s: %v", secret.Namespace, secret.Name, err)
	}

	byEndpoint := map[string]*balance.Endpoint{}
	for _, s := range uc.Spec.Servers {
		if s.Disabled {
			c.servers = append(c.servers, server{endpoint: s.Endpoint})
			continue
		}
		u, err := url.Parse(s.Endpoint)
		if err != nil {
			return nil, fmt.Errorf("server %q: %v", s.Endpoint, err)
		}
		if byEndpoint[s.Endpoint] != nil { // validation refuses duplicates; one endpoint, one transport
			return nil, fmt.Errorf("server %q is listed twice", s.Endpoint)
		}
		var e *balance.Endpoint
		// With the same connections and credential, the server keeps its pooled
		// connections, and what was learnt about its health still holds.
		if sameConnections {
			e = prev.endpoint(s.Endpoint)
		}
		if e == nil {
			e = balance.NewEndpoint(u)
			e.Transports = c.builder.New()
		}
		c.Endpoints = append(c.Endpoints, e)
		c.servers = append(c.servers, server{endpoint: s.Endpoint, enabled: e})
		byEndpoint[s.Endpoint] = e
	}

	if c.dispatch, err = dispatch.Compile(uc.Spec.DispatchPolicies); err != nil {
		return nil, err
	}
	var schemas []gatewayv1alpha1.FlowControlSchema
	if uc.Spec.FlowControl != nil {
		schemas = uc.Spec.FlowControl.FlowControlSchemas
	}
	var prevFlowControl *flowcontrol.Set
	if prev != nil {
		prevFlowControl = prev.flowControl
	}
	c.flowControl = flowcontrol.NewSet(prevFlowControl, schemas, clock.RealClock{}, opts.FlowShare)
	c.fallback = Route{Candidates: c.Endpoints, Picker: mustPicker(gatewayv1alpha1.RoundRobin)}
	for _, p := range uc.Spec.DispatchPolicies {
		r := Route{Policy: p.Name, Candidates: c.Endpoints}
		if len(p.UpstreamSubset) > 0 {
			r.Candidates = nil
			for _, endpoint := range p.UpstreamSubset {
				if e, ok := byEndpoint[endpoint]; ok { // disabled servers are no candidates
					r.Candidates = append(r.Candidates, e)
				}
			}
		}
		if r.Picker, err = balance.New(p.Strategy); err != nil {
			return nil, fmt.Errorf("dispatch policy %q: %v", p.Name, err)
		}
		if p.FlowControlSchemaName != "" {
			if r.Schema = c.flowControl.Schema(p.FlowControlSchemaName); r.Schema == nil {
				return nil, fmt.Errorf("dispatch policy %q: unknown flow-control schema %q", p.Name, p.FlowControlSchemaName)
			}
		}
		c.routes = append(c.routes, r)
	}

	// A server is busy while it serves requests: see ProbeWhile.
	probe := func(e *balance.Endpoint) http.RoundTripper {
		return e.Transports.ProbeWhile(e.BusyWithin, opts.ProbeCount)
	}
	hc := health.ConfigFrom(uc.Spec.HealthCheck)
	hc.Key = uc.Name // which replica probes it, when they share health checks
	c.Health = health.NewChecker(c.Endpoints, probe, hc, clock.RealClock{},
		func(t health.ServerHealth) {
			if e := c.endpoint(t.Endpoint); e != nil {
				e.RecordTransition(t)
			}
			if onTransition != nil {
				onTransition(c, t)
			}
		})
	if c.Authorizer == nil {
		c.Authorizer = memberauthz.New(c.Name, c.Create, opts.Authorization)
	}
	return c, nil
}

func (c *Cluster) endpoint(s string) *balance.Endpoint {
	for _, srv := range c.servers {
		if srv.endpoint == s {
			return srv.enabled
		}
	}
	return nil
}

// Servers returns the observed state of every server of spec.servers, in order.
// Disabled servers are not healthy, with reason Disabled; a server no transition
// was seen for yet is Unknown (it takes requests meanwhile).
func (c *Cluster) Servers() []health.ServerHealth {
	out := make([]health.ServerHealth, 0, len(c.servers))
	for _, srv := range c.servers {
		out = append(out, srv.health())
	}
	return out
}

func (srv server) health() health.ServerHealth {
	h := health.ServerHealth{Endpoint: srv.endpoint}
	if srv.enabled == nil {
		h.Reason, h.Message = gatewayv1alpha1.ServerReasonDisabled, "disabled in spec.servers"
		return h
	}
	// The latest delivered change; one still on its way is delivered, and
	// observed, next.
	if t, seen := srv.enabled.LastTransition(); seen {
		return t
	}
	h.Healthy, h.Unknown = srv.enabled.Healthy(), true
	h.Reason, h.Message = health.ReasonNotChecked, "no probe has answered yet; it takes requests meanwhile"
	return h
}

func mustPicker(s gatewayv1alpha1.Strategy) balance.Picker {
	p, err := balance.New(s)
	if err != nil {
		panic(err)
	}
	return p
}

// Transports returns the transports toward e, one of c.Endpoints.
func (c *Cluster) Transports(e *balance.Endpoint) *transport.Transports { return e.Transports }

// Release closes the idle connections of the transports of a cluster replaced
// by next (nil when deleted) that next does not reuse: all of them after a
// change of credential or connection settings, and when a server left
// spec.servers, since the servers share one pool (transport.Builder), its
// idle connections and those of the servers that stay, which reopen on their
// next request or probe. Requests in flight finish on their connections.
func (c *Cluster) Release(next *Cluster) {
	for _, e := range c.Endpoints {
		if next == nil || !slices.Contains(next.Endpoints, e) {
			e.Transports.CloseIdleConnections()
		}
	}
	if c.tunnel != nil && (next == nil || next.tunnel != c.tunnel) {
		c.tunnel.Retire()
	}
}

// CloseIdleConnections closes the idle connections toward every server.
func (c *Cluster) CloseIdleConnections() { c.Release(nil) }

// ReportFailure tells health checking that e failed a real request.
func (c *Cluster) ReportFailure(e *balance.Endpoint, err error) {
	if c.Health != nil {
		c.Health.ReportFailure(e, err)
	}
}

// ReportSuccess tells health checking that e answered a real request;
// ready: the answer shows e reaches its storage (see health.Checker).
func (c *Cluster) ReportSuccess(e *balance.Endpoint, ready bool) {
	if c.Health != nil {
		c.Health.ReportSuccess(e, ready)
	}
}
