package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"golang.org/x/net/proxy"
)

// Egress proxies. Every connection toward the member (pooled, probe and
// upgrade transports alike) is dialed through the proxy by the transports'
// DialContext, never by http.Transport.Proxy: the upgrade path
// (exec, attach, port-forward) dials with DialContext and ignores Proxy. The
// member's TLS runs inside the tunnel, end to end, so the proxy never sees the
// gateway's credential toward the member.

// ProxyError is the error of a connection that failed at the egress proxy:
// the proxy could not be reached, refused the gateway's proxy credentials, or
// did not open the tunnel. Its message names the proxy, never its password.
type ProxyError struct {
	// Proxy is the proxy's URL without credentials, e.g. http://192.0.2.20:3128.
	Proxy string
	Err   error
}

func (e *ProxyError) Error() string { return fmt.Sprintf("egress proxy %s: %v", e.Proxy, e.Err) }
func (e *ProxyError) Unwrap() error { return e.Err }

// IsProxyError reports whether err is, or wraps, a ProxyError.
func IsProxyError(err error) bool {
	var pe *ProxyError
	return errors.As(err, &pe)
}

type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// egressDialer returns what dials the member's servers: direct, or through
// cfg.ProxyURL.
func egressDialer(cfg Config, direct *net.Dialer) (dialFunc, error) {
	u := cfg.ProxyURL
	if u == nil {
		return direct.DialContext, nil
	}
	if u.User != nil || u.Hostname() == "" {
		return nil, fmt.Errorf("egress proxy URL must name a host and no user info")
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443", "socks5": "1080"}[u.Scheme]
	}
	addr := net.JoinHostPort(u.Hostname(), port)
	name := (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
	hasAuth := cfg.ProxyUsername != "" || cfg.ProxyPassword != ""

	switch u.Scheme {
	case "socks5":
		var auth *proxy.Auth
		if hasAuth {
			auth = &proxy.Auth{User: cfg.ProxyUsername, Password: cfg.ProxyPassword}
		}
		d, err := proxy.SOCKS5("tcp", addr, auth, direct)
		if err != nil {
			return nil, err
		}
		cd, ok := d.(proxy.ContextDialer)
		if !ok {
			return nil, fmt.Errorf("SOCKS5 dialer does not take a context")
		}
		return func(ctx context.Context, network, target string) (net.Conn, error) {
			// A silent proxy must not hold the dial forever when ctx has no
			// deadline (watches): bound the handshake as for CONNECT.
			ctx, cancel := context.WithTimeout(ctx, dialTimeout)
			defer cancel()
			conn, err := cd.DialContext(ctx, network, target)
			if err != nil {
				return nil, &ProxyError{Proxy: name, Err: err}
			}
			return conn, nil
		}, nil
	case "http", "https":
		d := &connectDialer{name: name, addr: addr, direct: direct, hasAuth: hasAuth}
		if hasAuth {
			d.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(cfg.ProxyUsername+":"+cfg.ProxyPassword))
		}
		if u.Scheme == "https" {
			d.tls = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
			if len(cfg.ProxyCAData) > 0 {
				pool, err := x509.SystemCertPool()
				if err != nil {
					pool = x509.NewCertPool()
				}
				if !pool.AppendCertsFromPEM(cfg.ProxyCAData) {
					return nil, fmt.Errorf("the egress proxy's CA data holds no PEM certificate")
				}
				d.tls.RootCAs = pool
			}
		}
		return d.DialContext, nil
	}
	return nil, fmt.Errorf("egress proxy scheme %q is not http, https or socks5", u.Scheme)
}

// connectDialer opens HTTP CONNECT tunnels. The stdlib writes the request and
// parses the answer; no library among the gateway's dependencies exports a
// CONNECT dialer (apimachinery and apiserver keep theirs unexported).
type connectDialer struct {
	name, addr string      // the proxy: URL without credentials, host:port
	tls        *tls.Config // set for an https proxy: the tunnel runs inside TLS to it
	auth       string      // Proxy-Authorization value, or ""
	hasAuth    bool
	direct     *net.Dialer
}

func (d *connectDialer) DialContext(ctx context.Context, network, target string) (net.Conn, error) {
	conn, err := d.direct.DialContext(ctx, "tcp", d.addr)
	if err != nil {
		return nil, &ProxyError{Proxy: d.name, Err: err}
	}
	tunnel, err := d.connect(ctx, conn, target)
	if err != nil {
		_ = conn.Close()
		return nil, &ProxyError{Proxy: d.name, Err: err}
	}
	return tunnel, nil
}

// connect runs the TLS handshake with an https proxy, then CONNECT, bounded by
// ctx: its deadline, and its end, which aborts the blocked I/O.
func (d *connectDialer) connect(ctx context.Context, conn net.Conn, target string) (net.Conn, error) {
	// A silent proxy must not hold the dial forever when ctx has no deadline.
	deadline := time.Now().Add(dialTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	if d.tls != nil {
		tc := tls.Client(conn, d.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			stop()
			return nil, fmt.Errorf("TLS handshake: %w", err)
		}
		conn = tc
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: target}, Host: target, Header: http.Header{}}
	if d.auth != "" {
		req.Header.Set("Proxy-Authorization", d.auth)
	}
	err := req.Write(conn)
	var resp *http.Response
	br := bufio.NewReader(conn)
	if err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if !stop() { // ctx ended: its error says why, not the aborted I/O's
		return nil, context.Cause(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("CONNECT %s: %w", target, err)
	}
	// The body is never read: a 200 has none (reading one would wait for
	// the tunnel to close), and any other answer closes the connection.
	// Some proxies (tinyproxy) answer a refused CONNECT with 401 rather than
	// 407; from a proxy, before any tunnel, both mean its own authentication.
	auth := resp.StatusCode == http.StatusProxyAuthRequired || resp.StatusCode == http.StatusUnauthorized
	switch {
	case auth && d.hasAuth:
		return nil, fmt.Errorf("CONNECT %s: %s: proxy authentication failed: check keys proxy-username and proxy-password of the credential Secret", target, resp.Status)
	case auth:
		return nil, fmt.Errorf("CONNECT %s: %s: the proxy requires credentials: set keys proxy-username and proxy-password of the credential Secret", target, resp.Status)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("CONNECT %s: the proxy answered %s", target, resp.Status)
	case br.Buffered() > 0:
		// Nothing may come before the gateway's TLS ClientHello to the member.
		return nil, fmt.Errorf("CONNECT %s: the proxy sent %d bytes after its answer", target, br.Buffered())
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}
