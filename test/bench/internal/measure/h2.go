package measure

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"golang.org/x/net/http2"
)

// MaxConcurrentStreams returns the SETTINGS_MAX_CONCURRENT_STREAMS an HTTP/2
// server at serverURL announces to a new connection: how many requests (and
// so watches) a client can multiplex over one connection to it.
func MaxConcurrentStreams(ctx context.Context, serverURL string, caPEM []byte, cert *tls.Certificate) (uint32, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return 0, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return maxConcurrentStreams(ctx, serverURL, u.Host, tc)
}

// MaxConcurrentStreams returns the SETTINGS_MAX_CONCURRENT_STREAMS the server
// at t.Base announces to a new connection of t's client (its CA, client
// certificate and TLS server name: a member door answers only by name).
func (t *Target) MaxConcurrentStreams(ctx context.Context) (uint32, error) {
	tr, ok := t.Client.Transport.(*http.Transport)
	if !ok || tr.TLSClientConfig == nil {
		return 0, fmt.Errorf("target %s: no TLS transport", t.Key)
	}
	u, err := url.Parse(t.Base)
	if err != nil {
		return 0, err
	}
	return maxConcurrentStreams(ctx, t.Base, u.Host, tr.TLSClientConfig.Clone())
}

// maxConcurrentStreams dials addr with tc, speaks HTTP/2 and returns the
// stream limit of the server's first SETTINGS frame; serverURL names it in
// errors.
func maxConcurrentStreams(ctx context.Context, serverURL, addr string, tc *tls.Config) (uint32, error) {
	tc.NextProtos = []string{http2.NextProtoTLS}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: tc}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if p := conn.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != http2.NextProtoTLS {
		return 0, fmt.Errorf("%s does not speak HTTP/2 (ALPN %q)", serverURL, p)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		return 0, err
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		return 0, err
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return 0, err
		}
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			v, ok := s.Value(http2.SettingMaxConcurrentStreams)
			if !ok {
				return 0, fmt.Errorf("%s announces no stream limit", serverURL)
			}
			return v, nil
		}
	}
}
