package measure

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
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
	tc := &tls.Config{RootCAs: pool, NextProtos: []string{http2.NextProtoTLS}, MinVersion: tls.VersionTLS12}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: tc}
	conn, err := d.DialContext(ctx, "tcp", u.Host)
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
