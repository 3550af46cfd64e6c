package failure_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/kubewharf/kube-gateway/proxy/failure"
	"github.com/kubewharf/kube-gateway/proxy/konnectivity"
	"github.com/kubewharf/kube-gateway/proxy/transport"
)

// timedOut is an error like the forwarder's when the response headers are late.
type timedOut struct{}

func (timedOut) Error() string { return "no response headers within 1m10s" }
func (timedOut) Unwrap() error { return failure.ErrTimedOut }

func TestOf(t *testing.T) {
	dial := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 10), Port: 6443}, Err: err}
	}
	inURL := func(err error) error { return &url.Error{Op: "Get", URL: "https://192.0.2.10:6443/api", Err: err} }
	refused := os.NewSyscallError("connect", syscall.ECONNREFUSED)
	proxyErr := &transport.ProxyError{Proxy: "http://192.0.2.20:3128", Err: dial(refused)}
	tunnelErr := dial(&konnectivity.Error{Server: "192.0.2.30:8090", Err: errors.New("No agent available")})

	for _, tc := range []struct {
		name string
		err  error
		want failure.Kind
	}{
		{"nil", nil, failure.Other},
		{"response headers late", timedOut{}, failure.Timeout},
		{"response headers late, in a url.Error", inURL(timedOut{}), failure.Timeout},
		{"timed out at the proxy", errors.Join(timedOut{}, proxyErr), failure.Timeout},
		{"egress proxy", inURL(proxyErr), failure.Proxy},
		{"egress proxy refused CONNECT", &transport.ProxyError{Proxy: "http://192.0.2.20:3128", Err: errors.New("CONNECT 192.0.2.10:6443: 407 Proxy Authentication Required")}, failure.Proxy},
		{"konnectivity", inURL(tunnelErr), failure.Tunnel},
		{"dial refused", inURL(dial(refused)), failure.Connect},
		{"dial timed out", dial(context.DeadlineExceeded), failure.Connect},
		{"dial, no such host", dial(&net.DNSError{Err: "no such host", Name: "member.invalid"}), failure.Connect},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, failure.Connect},
		{"refused", fmt.Errorf("write: %w", syscall.ECONNREFUSED), failure.Connect},
		{"host unreachable", os.NewSyscallError("connect", syscall.EHOSTUNREACH), failure.Connect},
		// The caller's own deadline says nothing about the server.
		{"caller's deadline", inURL(context.DeadlineExceeded), failure.Other},
		{"TLS", inURL(x509.UnknownAuthorityError{}), failure.Other},
		{"broken response", io.ErrUnexpectedEOF, failure.Other},
		// Text is never classified: an upgrade's dial error must be restored
		// (transport.DialError) to count.
		{"flattened upgrade dial", errors.New("error dialing backend: dial tcp 192.0.2.10:6443: connect: connection refused"), failure.Other},
		{"flattened upgrade proxy", fmt.Errorf("error dialing backend: %v", proxyErr), failure.Other},
	} {
		if got := failure.Of(tc.err); got != tc.want {
			t.Errorf("%s: Of(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// Broken: only a connection that ended under the request, never a dial, a
// tunnel or an egress proxy that failed, nor a timeout.
func TestBroken(t *testing.T) {
	inURL := func(err error) error { return &url.Error{Op: "Get", URL: "https://192.0.2.10:6443/api", Err: err} }
	dial := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 10), Port: 6443}, Err: err}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"end of file (a tunnel's write after its konnectivity server went)", inURL(io.EOF), true},
		{"unexpected end of file", io.ErrUnexpectedEOF, true},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{"broken pipe", &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, true},
		{"closed", fmt.Errorf("read: %w", net.ErrClosed), true},
		{"nil", nil, false},
		{"dial reset", dial(os.NewSyscallError("connect", syscall.ECONNRESET)), false},
		{"dial refused", inURL(dial(os.NewSyscallError("connect", syscall.ECONNREFUSED))), false},
		{"egress proxy closed", &transport.ProxyError{Proxy: "http://192.0.2.20:3128", Err: io.EOF}, false},
		{"konnectivity", dial(&konnectivity.Error{Server: "192.0.2.30:8090", Err: io.EOF}), false},
		{"late and broken", errors.Join(timedOut{}, io.EOF), false},
		{"TLS", inURL(x509.UnknownAuthorityError{}), false},
	} {
		if got := failure.Broken(tc.err); got != tc.want {
			t.Errorf("%s: Broken(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
