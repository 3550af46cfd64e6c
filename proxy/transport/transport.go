// Package transport builds the pooled transports the gateway uses toward the
// servers of a member cluster: one for ordinary requests (HTTP/2, many streams
// over few connections) and one for protocol upgrades (exec, attach,
// port-forward), which need HTTP/1.1. Both carry the gateway's credential; they
// are built once per cluster and credential generation and shared by every
// request to its servers.
package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	proxyutil "k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/client-go/transport"

	"github.com/kubewharf/kube-gateway/proxy/impersonate"
)

// Config is the connection and credential configuration toward a member.
type Config struct {
	// CAData is the PEM bundle trusted for the member's serving certificates;
	// empty means the host's roots.
	CAData []byte
	// ServerName overrides the name verified in the serving certificates.
	ServerName string
	// Insecure skips verification of serving certificates.
	Insecure bool
	// BearerToken authenticates the gateway, or CertData and KeyData (PEM) do.
	BearerToken       string
	CertData, KeyData []byte
	// ProbeOwnConnections makes each probe of an idle server open a
	// connection of its own and close it after the answer, instead of using
	// the pooled connection; see New and ProbeWhile.
	ProbeOwnConnections bool
	// ProxyURL, when set, is the egress proxy every connection goes through
	// (http, https: CONNECT; socks5), with optional credentials; ProxyCAData
	// adds CAs trusted for an https proxy to the host's roots.
	ProxyURL                     *url.URL
	ProxyUsername, ProxyPassword string
	ProxyCAData                  []byte
	// Dial opens the connections to the server instead of a direct or proxied
	// dial, e.g. through a konnectivity tunnel (package konnectivity); not
	// with ProxyURL. Equal does not compare it: the caller compares what it
	// built it from.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// Equal reports whether c and o describe the same credential and connection
// settings: transports built from either are interchangeable.
func (c Config) Equal(o Config) bool {
	return bytes.Equal(c.CAData, o.CAData) && c.ServerName == o.ServerName && c.Insecure == o.Insecure &&
		c.BearerToken == o.BearerToken && bytes.Equal(c.CertData, o.CertData) && bytes.Equal(c.KeyData, o.KeyData) &&
		c.ProbeOwnConnections == o.ProbeOwnConnections &&
		(c.ProxyURL == nil) == (o.ProxyURL == nil) && (c.ProxyURL == nil || c.ProxyURL.String() == o.ProxyURL.String()) &&
		c.ProxyUsername == o.ProxyUsername && c.ProxyPassword == o.ProxyPassword && bytes.Equal(c.ProxyCAData, o.ProxyCAData)
}

// Transports are the round trippers toward the servers of a member. The
// servers of a cluster share them, and their pool of connections (a
// connection serves one server), unless probes have connections of their own
// (Config.ProbeOwnConnections): then each server has its own Transports with
// the pool still shared.
type Transports struct {
	// RoundTripper carries ordinary requests; it adds the gateway's credential and
	// impersonates the identity of the request's context (impersonate.WithIdentity).
	RoundTripper http.RoundTripper
	// Upgrade carries upgrade requests: its connection side dials with the TLS
	// client configuration (HTTP/1.1 only), its request side adds the credential.
	Upgrade proxyutil.UpgradeRequestRoundTripper
	// Probe carries the gateway's own requests, such as health checks: the
	// gateway's credential, no impersonation, the pooled connections or, with
	// Config.ProbeOwnConnections, a connection per request (see ProbeWhile).
	Probe http.RoundTripper
	// Pooled carries requests whose credential and identity headers the
	// caller set on a request of its own (Authorize, impersonate.Apply):
	// the pooled connections with the gateway's client certificate, if any,
	// and nothing else.
	Pooled http.RoundTripper

	pooled, probe *http.Transport
	upgrade       *upgradeConnections
	bearer        string // "Bearer <token>", or "" with a client certificate
	// pooledProbe is Probe over the pooled connections, for ProbeWhile.
	pooledProbe http.RoundTripper
}

// ProbeWhile returns the round tripper of the server's health probes. It is
// Probe, except that with Config.ProbeOwnConnections a probe goes over the
// pooled connection while busy(idleConnTimeout) reports that the server
// serves requests or served one within that time: the pooled connection is
// open then anyway, kept by the requests, and the probe spares a TLS handshake
// on the gateway and on the member. Once the requests stop, the probes stop
// keeping it: it closes at most twice idleConnTimeout after the last one.
// Every probe is counted in count, unless it is nil.
func (t *Transports) ProbeWhile(busy func(time.Duration) bool, count *ProbeCount) http.RoundTripper {
	r := probeRouter{busy: busy, count: count, pooled: t.pooledProbe, bearer: t.bearer}
	if t.probe != t.pooled {
		r.own = t.Probe
	}
	return r
}

// probeRouter sends a probe over the pooled connection, or over one of its
// own (when it has one) while the server is idle.
type probeRouter struct {
	busy        func(time.Duration) bool
	count       *ProbeCount
	pooled, own http.RoundTripper
	bearer      string
}

// Authorize sets the credential on h, the headers of a probe built once and
// sent many times: the credential round trippers then pass it on as it is
// instead of copying the request to add it.
func (p probeRouter) Authorize(h http.Header) {
	if p.bearer != "" {
		h["Authorization"] = []string{p.bearer}
	}
}

func (p probeRouter) RoundTrip(req *http.Request) (*http.Response, error) {
	rt, own := p.pooled, p.own != nil && !p.busy(idleConnTimeout)
	if own {
		rt = p.own
	}
	if p.count != nil {
		p.count.add(own)
	}
	return rt.RoundTrip(req)
}

// ProbeCount counts health probes by the connection they went over. The zero
// value is ready; it is safe for concurrent use.
type ProbeCount struct{ pooled, own atomic.Uint64 }

func (c *ProbeCount) add(own bool) {
	if own {
		c.own.Add(1)
	} else {
		c.pooled.Add(1)
	}
}

// Sent returns how many probes went over a pooled connection and how many
// over a connection of their own.
func (c *ProbeCount) Sent() (pooled, own uint64) { return c.pooled.Load(), c.own.Load() }

// Authorize sets the gateway's bearer token, if it authenticates with one, on
// h, the headers of a request of the caller's own that goes through Pooled.
func (t *Transports) Authorize(h http.Header) {
	if t.bearer != "" {
		h["Authorization"] = []string{t.bearer}
	}
}

// Timeouts of connection set-up. Responses have none here: watches and log
// streams last as long as the client wants, and they share these connections
// with other requests; the forwarder bounds the wait for the response headers
// of the requests that are not long-running, per request.
const (
	dialTimeout         = 10 * time.Second
	tlsHandshakeTimeout = 10 * time.Second
	keepAlive           = 30 * time.Second
	idleConnTimeout     = 90 * time.Second
	maxIdleConnsPerHost = 100
	// sessionCacheSize: TLS sessions kept for probes on connections of their
	// own; one server, known by one or two names.
	sessionCacheSize = 4
	// responseHeaderTable is the HPACK table each HTTP/2 connection keeps for
	// the member's response headers (SETTINGS_HEADER_TABLE_SIZE), a quarter
	// of the default. A kube-apiserver's Audit-Id and Date change with every
	// response, so a probed connection soon fills any table: the default's
	// costs an idle cluster's connections more memory than the bytes it saves
	// per response are worth (docs/benchmark.md, "Per registered
	// UpstreamCluster").
	responseHeaderTable = 1024
)

// Builder builds the transports of the servers of one cluster from one Config,
// once: the TLS configuration with the CA pool and client certificate, the
// dialer, the pooled transport and the round trippers over it. The servers
// differ only in their connections, which one pool keeps apart by address.
// One pool per cluster rather than per server spares an idle cluster a
// transport's and an HTTP/2 pool's maps (docs/benchmark.md, "Per registered
// UpstreamCluster"); the price is that a server leaving spec.servers closes
// the idle connections of the servers that stay too (see Release in package
// cluster), which reopen on their next request or probe.
type Builder struct {
	cfg Config
	// tlsConfig is shared by the transports: http.Transport clones its
	// configuration per connection, and HTTP/2 set-up leaves one alone that
	// offers h2 and http/1.1 already.
	tlsConfig *tls.Config
	dial      dialFunc
	// shared are the transports of every server.
	shared *Transports
}

// NewBuilder checks cfg and builds what its transports share.
func NewBuilder(cfg Config) (*Builder, error) {
	hasToken, hasCert := cfg.BearerToken != "", len(cfg.CertData) > 0 || len(cfg.KeyData) > 0
	if hasToken == hasCert {
		return nil, fmt.Errorf("exactly one credential is required: a bearer token or a client certificate and key")
	}
	var cert *tls.Certificate
	if hasCert {
		c, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
		if err != nil {
			return nil, err
		}
		// The parsed leaf serves a server choosing among its certificates; a
		// client only sends the certificate, and would keep the leaf with
		// every idle cluster (docs/benchmark.md, "Per registered
		// UpstreamCluster").
		c.Leaf = nil
		cert = &c
	}
	tlsConfig, err := transport.TLSConfigFor(&transport.Config{TLS: transport.TLSConfig{
		CAData: cfg.CAData, ServerName: cfg.ServerName, Insecure: cfg.Insecure}})
	if err != nil {
		return nil, err
	}
	if tlsConfig == nil { // no CA, verification on: host roots
		tlsConfig = &tls.Config{}
	}
	tlsConfig.MinVersion = tls.VersionTLS12
	if cert != nil {
		// Sent whatever CAs the member names, as client-go sends it; set here
		// rather than through TLSConfigFor, whose callback keeps the whole
		// transport.Config it was given with every cluster.
		tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}

	// Every transport dials through dial: directly, or through the egress
	// proxy (egress.go).
	dial, err := egressDialer(cfg, &net.Dialer{Timeout: dialTimeout, KeepAlive: keepAlive})
	if err != nil {
		return nil, err
	}
	if cfg.Dial != nil {
		if cfg.ProxyURL != nil {
			return nil, fmt.Errorf("an egress proxy and a dial function exclude each other")
		}
		dial = withTimeout(cfg.Dial, dialTimeout)
	}
	tlsConfig.NextProtos = []string{"h2", "http/1.1"}
	b := &Builder{cfg: cfg, tlsConfig: tlsConfig, dial: dial}
	b.shared = b.transports()
	return b, nil
}

// http1TLS returns a copy of the TLS configuration that offers HTTP/1.1 only.
func (b *Builder) http1TLS() *tls.Config {
	c := b.tlsConfig.Clone()
	c.NextProtos = []string{"http/1.1"}
	return c
}

// transports builds the transports every server of b shares.
func (b *Builder) transports() *Transports {
	pooled := utilnet.SetTransportDefaults(&http.Transport{
		DialContext:         b.dial,
		TLSClientConfig:     b.tlsConfig,
		TLSHandshakeTimeout: tlsHandshakeTimeout,
		IdleConnTimeout:     idleConnTimeout,
		MaxIdleConnsPerHost: maxIdleConnsPerHost,
		HTTP2:               &http.HTTP2Config{MaxDecoderHeaderTableSize: responseHeaderTable},
	})
	// SetTransportDefaults fills a nil Proxy with the environment's: members
	// are reached directly or through spec.clientConfig.proxyURL, never
	// through an environment proxy.
	pooled.Proxy = nil

	// Credential and impersonation are added by round trippers, on the way out:
	// for upgrades on the request written to the dialed connection.
	withIdentity := func(rt http.RoundTripper) http.RoundTripper {
		return b.withCredential(impersonate.NewRoundTripper(rt))
	}
	upgrade := &upgradeConnections{build: b.upgradeTransport}
	// By default probes share the pooled connection, and keep it open: a
	// handshake costs more CPU, on the gateway and on the member, than the
	// connection's memory is worth (ProbeOwnConnections: see New).
	probe := b.withCredential(pooled)
	return &Transports{
		RoundTripper: withIdentity(pooled),
		Probe:        probe,
		Upgrade:      proxyutil.NewUpgradeRequestRoundTripper(upgrade, withIdentity(proxyutil.MirrorRequest)),
		Pooled:       pooled,
		pooled:       pooled,
		upgrade:      upgrade,
		probe:        pooled,
		bearer:       b.bearer(),
		pooledProbe:  probe,
	}
}

// bearer is the Authorization value with a token, "" with a client certificate.
func (b *Builder) bearer() string {
	if b.cfg.BearerToken == "" {
		return ""
	}
	return "Bearer " + b.cfg.BearerToken
}

// withCredential adds the gateway's bearer token, if it has one, to the
// requests of rt; a client certificate is in the TLS configuration.
func (b *Builder) withCredential(rt http.RoundTripper) http.RoundTripper {
	if b.cfg.BearerToken != "" {
		rt = transport.NewBearerAuthRoundTripper(b.cfg.BearerToken, rt)
	}
	return rt
}

// upgradeTransport builds the connection side of upgrades. Without
// ForceAttemptHTTP2 an http.Transport with a TLS configuration leaves it as it
// is: upgrades speak HTTP/1.1.
func (b *Builder) upgradeTransport() *http.Transport {
	return &http.Transport{
		DialContext:         keepDialError(b.dial),
		TLSClientConfig:     b.http1TLS(),
		TLSHandshakeTimeout: tlsHandshakeTimeout,
	}
}

// upgradeConnections is the connection side of upgrades: UpgradeAwareHandler
// takes only the dialer and the TLS configuration of its transport, found
// through utilnet.RoundTripperWrapper, and dials each upgrade itself. The
// transport is built on first use: most clusters never see an exec, attach or
// port-forward, and every idle one would hold it.
type upgradeConnections struct {
	build func() *http.Transport
	once  sync.Once
	built atomic.Pointer[http.Transport]
}

func (u *upgradeConnections) transport() *http.Transport {
	u.once.Do(func() { u.built.Store(u.build()) })
	return u.built.Load()
}

// WrappedRoundTripper returns the transport, for utilnet.DialerFor and
// utilnet.TLSClientConfig.
func (u *upgradeConnections) WrappedRoundTripper() http.RoundTripper { return u.transport() }

func (u *upgradeConnections) RoundTrip(req *http.Request) (*http.Response, error) {
	return u.transport().RoundTrip(req)
}

func (u *upgradeConnections) closeIdleConnections() {
	if t := u.built.Load(); t != nil {
		t.CloseIdleConnections()
	}
}

// Config is the configuration b was built from.
func (b *Builder) Config() Config { return b.cfg }

// New builds the transports of cfg, for one server.
func New(cfg Config) (*Transports, error) {
	b, err := NewBuilder(cfg)
	if err != nil {
		return nil, err
	}
	return b.New(), nil
}

// New returns the transports toward one server: those every server of b
// shares, with, under Config.ProbeOwnConnections, a probe transport of the
// server's own.
func (b *Builder) New() *Transports {
	if !b.cfg.ProbeOwnConnections {
		return b.shared
	}
	// With ProbeOwnConnections a probe leaves no connection behind, so a
	// cluster nobody sends requests to holds none once the pooled one has
	// been idle for idleConnTimeout; its memory (TLS and HTTP/2 state, a
	// reader goroutine) is most of an idle cluster's. The price is a TLS
	// handshake per probe, resumed to spare what it can (the session cache is
	// the server's own, since the servers of a cluster may share a name:
	// spec.clientConfig.serverName, or one host), and paid only while the
	// server is idle (ProbeWhile).
	probeTLS := b.http1TLS()
	probeTLS.ClientSessionCache = tls.NewLRUClientSessionCache(sessionCacheSize)
	own := &http.Transport{
		DialContext:         b.dial,
		TLSClientConfig:     probeTLS,
		TLSHandshakeTimeout: tlsHandshakeTimeout,
		DisableKeepAlives:   true,
	}
	t := *b.shared
	t.Probe, t.probe = b.withCredential(own), own
	return &t
}

// withTimeout bounds dial as net.Dialer.Timeout bounds a direct dial.
func withTimeout(dial dialFunc, timeout time.Duration) dialFunc {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return dial(ctx, network, address)
	}
}

// CloseIdleConnections closes the idle pooled connections, those of every
// server that shares them; requests in flight finish on theirs. Called when a
// newer configuration replaces these transports or removes a server.
func (t *Transports) CloseIdleConnections() {
	t.pooled.CloseIdleConnections()
	t.upgrade.closeIdleConnections()
	t.probe.CloseIdleConnections()
}

// StripURL drops the request URL from a transport error (*url.Error): it repeats
// what the client sent, and error messages about a server stay short and about
// the server. Other errors are returned as they are.
func StripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}
