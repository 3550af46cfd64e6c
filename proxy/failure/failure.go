// Package failure tells why a request to a member's server failed, once, for
// every part of the gateway that reacts to it: the forwarder's answer to the
// client and the health checker's reason.
package failure

import (
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"

	"github.com/kubewharf/kube-gateway/proxy/konnectivity"
	"github.com/kubewharf/kube-gateway/proxy/transport"
)

// Kind is where a request to a server failed.
type Kind uint8

const (
	// Other: the server was reached and the exchange failed later (a TLS
	// error, a connection that broke after the request went out, a response
	// that could not be read).
	Other Kind = iota
	// Connect: the server could not be reached: the dial failed, or the
	// connection was refused, reset or the host unreachable.
	Connect
	// Proxy: the egress proxy could not be reached, refused the gateway's
	// proxy credentials or did not open the tunnel (transport.ProxyError).
	Proxy
	// Tunnel: the konnectivity server or its agent could not open the
	// connection (konnectivity.Error).
	Tunnel
	// Timeout: the server did not answer in time (ErrTimedOut).
	Timeout
)

var kindNames = [...]string{Other: "Other", Connect: "Connect", Proxy: "Proxy", Tunnel: "Tunnel", Timeout: "Timeout"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// ErrTimedOut is what the error of a server that did not answer in time is
// (errors.Is): the forwarder's missing response headers, a probe's timeout.
// It is the gateway's own bound, not a deadline of the caller's context: a
// context.DeadlineExceeded alone says nothing about the server.
var ErrTimedOut = errors.New("no answer in time")

// Of returns where err, the error of a request to a server, happened. A
// timeout is checked first (it ends whatever was under way), then the path
// to the server from the outside in: an egress proxy's or a tunnel's error
// wraps the dial error that made it, which must not count as the server's.
func Of(err error) Kind {
	var proxyErr *transport.ProxyError
	var tunnelErr *konnectivity.Error
	var opErr *net.OpError
	switch {
	case err == nil:
		return Other
	case errors.Is(err, ErrTimedOut):
		return Timeout
	case errors.As(err, &proxyErr):
		return Proxy
	case errors.As(err, &tunnelErr):
		return Tunnel
	case errors.As(err, &opErr) && opErr.Op == "dial",
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EHOSTUNREACH):
		return Connect
	}
	return Other
}

// Broken reports whether err says that a connection the request went out on
// ended under it (end of file, reset, broken pipe, closed) before the answer,
// rather than that the server could not be reached or did not answer in
// time. The next request opens a new connection: all pooled connections to
// a server break at once when what carried them (a konnectivity server, an
// egress proxy) goes away, and a new one goes through what is left.
func Broken(err error) bool {
	switch Of(err) {
	case Proxy, Tunnel, Timeout:
		return false
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}
