// Package konnectivity opens the gateway's connections to a member's servers
// through konnectivity servers (the apiserver-network-proxy, gRPC mode, mutual
// TLS), which relay them to an agent that runs in the member and dialed out to
// them. A Dialer holds one gRPC connection to each konnectivity server: every
// dial is a new stream on one of them, and a connection redials by itself when
// its konnectivity server comes back, so neither a dial nor an agent restart
// costs a TLS handshake with a konnectivity server.
//
// With several konnectivity servers (HA: the member's agent connects to each
// of them), a dial goes through the server that took the last one, and a dial
// that fails there is tried through the next: only a dial tells whether a
// server is up and has the member's agent.
package konnectivity

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client/metrics"
)

// Config is how to reach the konnectivity servers of a member.
type Config struct {
	// Addresses are host:port of each server's frontend gRPC port, in the
	// order they are tried.
	Addresses []string
	// ServerName overrides the name verified in the servers' certificates;
	// default the host of each address.
	ServerName string
	// CertData and KeyData (PEM) are the gateway's client certificate; CAData
	// (PEM) verifies the konnectivity servers' certificates.
	CertData, KeyData, CAData []byte
}

// Equal reports whether dialers built from c and o are interchangeable.
func (c Config) Equal(o Config) bool {
	return slices.Equal(c.Addresses, o.Addresses) && c.ServerName == o.ServerName && bytes.Equal(c.CertData, o.CertData) &&
		bytes.Equal(c.KeyData, o.KeyData) && bytes.Equal(c.CAData, o.CAData)
}

// keepaliveTime pings an idle gRPC connection so that a konnectivity server that
// went away without closing it is noticed before the next dial waits on it.
// connectTimeout bounds a connection attempt to a konnectivity server, so that
// a dial waiting on one that does not answer moves on to the next within the
// transport's dial timeout; reconnectDelay caps the wait between attempts, so
// that a konnectivity server that comes back is used again soon.
const (
	keepaliveTime  = 30 * time.Second
	connectTimeout = 4 * time.Second
	reconnectDelay = 10 * time.Second
)

// Dialer dials through the konnectivity servers of one Config.
type Dialer struct {
	servers []server
	// preferred is the index of the server that took the last dial.
	preferred atomic.Int32

	mu      sync.Mutex
	open    int  // connections dialed and not closed yet
	retired bool // Retire was called: close the tunnels once open is 0
}

// server is one konnectivity server and the tunnel (gRPC connection) to it.
type server struct {
	address string
	tunnel  client.ReusableTunnel
}

// New builds the Dialer of cfg. It does not connect: a gRPC connection is
// opened by the first dial through its server and kept.
func New(cfg Config) (*Dialer, error) {
	if len(cfg.Addresses) == 0 {
		return nil, errors.New("no konnectivity server address")
	}
	cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	if err != nil {
		return nil, fmt.Errorf("client certificate and key: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(cfg.CAData) {
		return nil, errors.New("CA bundle: no PEM certificate")
	}
	reconnect := backoff.DefaultConfig
	reconnect.MaxDelay = reconnectDelay
	d := &Dialer{}
	for _, address := range cfg.Addresses {
		serverName := cfg.ServerName
		if serverName == "" {
			if serverName, _, err = net.SplitHostPort(address); err != nil {
				d.closeTunnels()
				return nil, fmt.Errorf("address %q: %v", address, err)
			}
		}
		tlsConfig := &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{cert},
			RootCAs:      roots,
			ServerName:   serverName,
		}
		tunnel, err := client.CreateGRPCTunnel(context.Background(), address,
			grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig)),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime}),
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnect, MinConnectTimeout: connectTimeout}))
		if err != nil {
			d.closeTunnels()
			return nil, fmt.Errorf("konnectivity server %s: %v", address, err)
		}
		d.servers = append(d.servers, server{address: address, tunnel: tunnel})
	}
	return d, nil
}

// DialContext opens a TCP connection to address (host:port, resolved by the
// agent) through the preferred konnectivity server, else through the others
// in turn. Failures are *net.OpError dial errors, as a direct dial's are,
// wrapping an *Error per server tried, whose text names the konnectivity path.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	first := int(d.preferred.Load())
	var errs []error
	for i := range d.servers {
		n := (first + i) % len(d.servers)
		s := d.servers[n]
		conn, err := s.tunnel.DialContext(ctx, "tcp", address)
		if err == nil {
			if n != first {
				d.preferred.Store(int32(n))
			}
			d.mu.Lock()
			d.open++
			d.mu.Unlock()
			return &trackedConn{Conn: conn, d: d}, nil
		}
		errs = append(errs, &Error{Server: s.address, Err: err})
		if ctx.Err() != nil {
			break // the caller gave up: no other server would be waited for
		}
	}
	var err error = failedThroughEach(errs)
	if len(errs) == 1 {
		err = errs[0]
	}
	return nil, &net.OpError{Op: "dial", Net: network, Err: err, Addr: addr(address)}
}

// Retire closes the gRPC connections once the connections dialed through them
// are closed: a replaced configuration lets requests in flight (watches, exec
// sessions) finish, as the transports do with their connections.
func (d *Dialer) Retire() {
	d.mu.Lock()
	d.retired = true
	closeNow := d.open == 0
	d.mu.Unlock()
	if closeNow {
		d.closeTunnels()
	}
}

func (d *Dialer) closed() {
	d.mu.Lock()
	d.open--
	closeNow := d.retired && d.open == 0
	d.mu.Unlock()
	if closeNow {
		d.closeTunnels()
	}
}

func (d *Dialer) closeTunnels() {
	for _, s := range d.servers {
		go s.tunnel.Close() // it waits for the streams to drain
	}
}

// trackedConn tells its Dialer when it is closed.
type trackedConn struct {
	net.Conn
	d    *Dialer
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.d.closed)
	return err
}

// Error is a dial that failed on the konnectivity path through one
// konnectivity server.
type Error struct {
	// Server is the konnectivity server's address.
	Server string
	Err    error
}

func (e *Error) Error() string {
	what := "the tunnel failed"
	switch _, reason := client.GetDialFailureReason(e.Err); reason {
	case metrics.DialFailureStreamSetup:
		what = "the konnectivity server could not be reached"
	case metrics.DialFailureEndpoint:
		what = "the konnectivity server or its agent could not open the connection (no agent of the member connected for this host, or the agent's dial failed)"
	case metrics.DialFailureTimeout, metrics.DialFailureContext:
		what = "no answer from the konnectivity server or its agent in time"
	}
	return fmt.Sprintf("konnectivity tunnel through konnectivity server %s (spec.clientConfig.konnectivity): %s: %v", e.Server, what, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// failedThroughEach is a dial that failed through each of several
// konnectivity servers: one *Error each, in the order they were tried.
type failedThroughEach []error

func (f failedThroughEach) Error() string {
	msgs := make([]string, len(f))
	for i, err := range f {
		msgs[i] = err.Error()
	}
	return fmt.Sprintf("the dial failed through each of %d konnectivity servers: %s", len(f), strings.Join(msgs, "; "))
}

func (f failedThroughEach) Unwrap() []error { return f }

// addr is the net.Addr of a dial target that is only a name to the gateway.
type addr string

func (a addr) Network() string { return "tcp" }
func (a addr) String() string  { return string(a) }
