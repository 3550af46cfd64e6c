package measure

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"time"

	"github.com/kubewharf/kube-gateway/test/harness"
)

// Target is one way to reach a member's apiserver: a base URL, a shared,
// reused HTTP client (keep-alive, HTTP/2 when offered) and the headers that
// authenticate the caller.
type Target struct {
	Key    string // direct | gateway | hub | floor | direct-mode
	Label  string
	Base   string // the member path is appended to it
	Client *http.Client
	Header http.Header
	Proto  string // negotiated protocol, seen on the first response
}

// NewClient returns a client that keeps connections alive and speaks HTTP/2
// whenever the server offers it over ALPN. Compression stays on (Go's
// default, as client-go's): a large LIST may arrive gzip-encoded. timeout
// bounds each request (0: none, for watches).
func NewClient(caPEM []byte, cert *tls.Certificate, timeout time.Duration) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in CA bundle")
	}
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	tr := &http.Transport{
		TLSClientConfig:     tc,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     5 * time.Minute,
	}
	return &http.Client{Transport: tr, Timeout: timeout}, nil
}

// Targets builds the three ways to member, each with its own client:
// direct (the member admin token on replica 0), gateway alone (the hub's
// front-proxy client certificate and the X-Remote-* headers the hub's
// aggregator sends for admin) and hub + gateway (the hub admin token).
// timeout bounds each request (0: none, for watches).
func Targets(env *harness.Env, member string, timeout time.Duration) (direct, gateway, hub *Target, err error) {
	m := env.Members[member]
	dc, err := NewClient(m.CAData, nil, timeout)
	if err != nil {
		return nil, nil, nil, err
	}
	certFile, keyFile := env.FrontProxyClientCert()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, nil, err
	}
	gc, err := gatewayClient(env, &cert, timeout)
	if err != nil {
		return nil, nil, nil, err
	}
	hc, err := NewClient(env.Hub.CAData, nil, timeout)
	if err != nil {
		return nil, nil, nil, err
	}
	direct = &Target{Key: "direct", Label: "direct", Base: m.Servers[0].URL, Client: dc,
		Header: http.Header{"Authorization": {"Bearer " + m.Tokens[harness.UserAdmin]}}}
	gateway = &Target{Key: "gateway", Label: "gateway alone", Base: env.GatewayURL + harness.ProxyPath(member), Client: gc,
		// What the hub's aggregator sends for admin (groups as the hub
		// authenticated them), next to its front-proxy client certificate.
		Header: harness.AdminFrontProxyHeader()}
	hub = &Target{Key: "hub", Label: "hub + gateway", Base: env.Hub.Servers[0].URL + harness.ProxyPath(member), Client: hc,
		Header: http.Header{"Authorization": {"Bearer " + env.Hub.Tokens[harness.UserAdmin]}}}
	return direct, gateway, hub, nil
}

// DirectModeTarget is the way to member through a gateway that runs with
// --direct-access, without the hub: the hub admin token sent straight to the
// gateway, which checks it with the hub (TokenReview, and SubjectAccessReview
// for users outside system:masters; both cached). The client trusts the
// gateway's CA and has no client certificate.
func DirectModeTarget(env *harness.Env, member string, timeout time.Duration) (*Target, error) {
	c, err := gatewayClient(env, nil, timeout)
	if err != nil {
		return nil, err
	}
	return &Target{Key: DirectModeKey, Label: "gateway (direct mode)", Base: env.GatewayURL + harness.ProxyPath(member), Client: c,
		Header: http.Header{"Authorization": {"Bearer " + env.Hub.Tokens[harness.UserAdmin]}}}, nil
}

// DirectModeKey is the Key of DirectModeTarget.
const DirectModeKey = "direct-mode"

// TunnelTarget is the way to cluster, a member registered through a
// konnectivity server and agent (harness.StartKonnectivity), as the gateway
// target goes: the hub's front-proxy client certificate and X-Remote headers.
func TunnelTarget(env *harness.Env, cluster string, timeout time.Duration) (*Target, error) {
	certFile, keyFile := env.FrontProxyClientCert()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	c, err := gatewayClient(env, &cert, timeout)
	if err != nil {
		return nil, err
	}
	return &Target{Key: TunnelKey, Label: "gateway via konnectivity", Base: env.GatewayURL + harness.ProxyPath(cluster), Client: c,
		Header: harness.AdminFrontProxyHeader()}, nil
}

// TunnelKey is the Key of TunnelTarget.
const TunnelKey = "konnectivity"

// gatewayClient returns a client that trusts the gateway's serving CA and
// presents cert (none when nil).
func gatewayClient(env *harness.Env, cert *tls.Certificate, timeout time.Duration) (*http.Client, error) {
	ca, err := os.ReadFile(env.GatewayCAFile)
	if err != nil {
		return nil, err
	}
	return NewClient(ca, cert, timeout)
}

// Result of one request.
type Result struct {
	Status       int
	Bytes        int64
	Uncompressed bool // the body came gzip-encoded and Go decoded it
	Proto        string
	FirstByte    time.Duration // time to the first response byte
	Encoding     string        // Content-Encoding left on the response (identity requests)
}

// NewRequest returns GET base+path with the target's headers, asking for JSON.
func (t *Target) NewRequest(ctx context.Context, path string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.Base+path, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range t.Header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	return req, nil
}

// Do sends GET base+path and reads the whole body.
func (t *Target) Do(ctx context.Context, path string) (Result, error) {
	return t.DoEnc(ctx, path, false, false)
}

// DoEnc is Do; identity asks for an uncompressed body (Accept-Encoding:
// identity) instead of Go's default gzip; trace records the time to the first
// response byte.
func (t *Target) DoEnc(ctx context.Context, path string, identity, trace bool) (Result, error) {
	start := time.Now()
	var firstByte time.Duration
	if trace {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotFirstResponseByte: func() { firstByte = time.Since(start) }})
	}
	req, err := t.NewRequest(ctx, path)
	if err != nil {
		return Result{}, err
	}
	if identity {
		req.Header.Set("Accept-Encoding", "identity")
	}
	resp, err := t.Client.Do(req)
	if err != nil {
		return Result{}, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	r := Result{Status: resp.StatusCode, Bytes: n, Uncompressed: resp.Uncompressed, Proto: resp.Proto, FirstByte: firstByte,
		Encoding: resp.Header.Get("Content-Encoding")}
	if err != nil {
		return r, err
	}
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("GET %s: %s", t.Base+path, resp.Status)
	}
	return r, nil
}

// Keys of DoorTargets.
const (
	DoorCertKey  = "door"
	DoorTokenKey = "door-token"
)

// DoorTargets are the ways to member through the gateway's member door
// (harness.Config.MemberDoors): the member's own admin client certificate,
// and the member's own admin token, which the door checks with a
// TokenReview on the member (cached). The client sends the door's server
// name for member and trusts the gateway's CA.
func DoorTargets(env *harness.Env, member string, timeout time.Duration) (cert, token *Target, err error) {
	certPEM, keyPEM, err := env.Members[member].ClientCertificate(harness.UserAdmin, "system:masters")
	if err != nil {
		return nil, nil, err
	}
	kp, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, err
	}
	client := func(c *tls.Certificate) (*http.Client, error) {
		hc, err := gatewayClient(env, c, timeout)
		if err != nil {
			return nil, err
		}
		hc.Transport.(*http.Transport).TLSClientConfig.ServerName = member + harness.MemberDoorDomain
		return hc, nil
	}
	cc, err := client(&kp)
	if err != nil {
		return nil, nil, err
	}
	tc, err := client(nil)
	if err != nil {
		return nil, nil, err
	}
	base := "https://" + env.MemberDoorAddress
	cert = &Target{Key: DoorCertKey, Label: "door, certificate", Base: base, Client: cc}
	token = &Target{Key: DoorTokenKey, Label: "door, token", Base: base, Client: tc,
		Header: http.Header{"Authorization": {"Bearer " + env.Members[member].Tokens[harness.UserAdmin]}}}
	return cert, token, nil
}
