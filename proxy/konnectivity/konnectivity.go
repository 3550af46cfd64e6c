// Package konnectivity opens the gateway's connections to a member's servers
// through a konnectivity server (the apiserver-network-proxy, gRPC mode, mutual
// TLS), which relays them to an agent that runs in the member and dialed out to
// it. One Dialer holds one gRPC connection to the konnectivity server: every
// dial is a new stream on it, and the connection redials by itself when the
// konnectivity server comes back, so neither a dial nor an agent restart costs
// a TLS handshake with the konnectivity server.
package konnectivity

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client/metrics"
)

// Config is how to reach one konnectivity server.
type Config struct {
	// Address is host:port of its frontend gRPC port.
	Address string
	// ServerName overrides the name verified in its certificate; default the
	// host of Address.
	ServerName string
	// CertData and KeyData (PEM) are the gateway's client certificate; CAData
	// (PEM) verifies the konnectivity server's certificate.
	CertData, KeyData, CAData []byte
}

// Equal reports whether dialers built from c and o are interchangeable.
func (c Config) Equal(o Config) bool {
	return c.Address == o.Address && c.ServerName == o.ServerName && bytes.Equal(c.CertData, o.CertData) &&
		bytes.Equal(c.KeyData, o.KeyData) && bytes.Equal(c.CAData, o.CAData)
}

// keepaliveTime pings an idle gRPC connection so that a konnectivity server that
// went away without closing it is noticed before the next dial waits on it.
const keepaliveTime = 30 * time.Second

// Dialer dials through one konnectivity server.
type Dialer struct {
	address string
	tunnel  client.ReusableTunnel

	mu      sync.Mutex
	open    int  // connections dialed and not closed yet
	retired bool // Retire was called: close the tunnel once open is 0
}

// New builds the Dialer of cfg. It does not connect: the gRPC connection is
// opened by the first dial and kept.
func New(cfg Config) (*Dialer, error) {
	cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	if err != nil {
		return nil, fmt.Errorf("client certificate and key: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(cfg.CAData) {
		return nil, errors.New("CA bundle: no PEM certificate")
	}
	serverName := cfg.ServerName
	if serverName == "" {
		if serverName, _, err = net.SplitHostPort(cfg.Address); err != nil {
			return nil, fmt.Errorf("address %q: %v", cfg.Address, err)
		}
	}
	tlsConfig := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		RootCAs:      roots,
		ServerName:   serverName,
	}
	tunnel, err := client.CreateGRPCTunnel(context.Background(), cfg.Address,
		grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime}))
	if err != nil {
		return nil, fmt.Errorf("konnectivity server %s: %v", cfg.Address, err)
	}
	return &Dialer{address: cfg.Address, tunnel: tunnel}, nil
}

// DialContext opens a TCP connection to address (host:port, resolved by the
// agent) through the tunnel. Failures are *net.OpError dial errors, as a direct
// dial's are, whose text names the konnectivity path.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	conn, err := d.tunnel.DialContext(ctx, "tcp", address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: &Error{Server: d.address, Err: err}, Addr: addr(address)}
	}
	d.mu.Lock()
	d.open++
	d.mu.Unlock()
	return &trackedConn{Conn: conn, d: d}, nil
}

// Retire closes the gRPC connection once the connections dialed through it are
// closed: a replaced configuration lets requests in flight (watches, exec
// sessions) finish, as the transports do with their connections.
func (d *Dialer) Retire() {
	d.mu.Lock()
	d.retired = true
	closeNow := d.open == 0
	d.mu.Unlock()
	if closeNow {
		go d.tunnel.Close() // it waits for the streams to drain
	}
}

func (d *Dialer) closed() {
	d.mu.Lock()
	d.open--
	closeNow := d.retired && d.open == 0
	d.mu.Unlock()
	if closeNow {
		go d.tunnel.Close()
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

// Error is a dial that failed on the konnectivity path.
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

// addr is the net.Addr of a dial target that is only a name to the gateway.
type addr string

func (a addr) Network() string { return "tcp" }
func (a addr) String() string  { return string(a) }
