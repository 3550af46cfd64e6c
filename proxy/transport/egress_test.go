package transport

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	proxyutil "k8s.io/apimachinery/pkg/util/proxy"
)

const proxyPassword = "proxy-pass-7f3e"

// connectProxy is a test forward proxy: it answers CONNECT with a tunnel when
// the request carries user:proxyPassword in Proxy-Authorization (or always,
// without want), 407 otherwise; it records the targets it tunneled to.
type connectProxy struct {
	wantAuth bool
	mu       sync.Mutex
	targets  []string
}

func (p *connectProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
		return
	}
	if user, pass, ok := proxyAuth(r); p.wantAuth && (!ok || user != "user" || pass != proxyPassword) {
		w.Header().Set("Proxy-Authenticate", `Basic realm="test"`)
		w.WriteHeader(http.StatusProxyAuthRequired)
		return
	}
	upstream, err := net.Dial("tcp", r.Host)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	p.mu.Lock()
	p.targets = append(p.targets, r.Host)
	p.mu.Unlock()
	w.WriteHeader(http.StatusOK)
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		upstream.Close()
		return
	}
	_ = buf.Flush()
	go func() { _, _ = io.Copy(upstream, buf); upstream.Close() }()
	_, _ = io.Copy(conn, upstream)
	conn.Close()
}

func (p *connectProxy) tunnels() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.targets)
}

func proxyAuth(r *http.Request) (user, pass string, ok bool) {
	h := r.Header.Get("Proxy-Authorization")
	fake := &http.Request{Header: http.Header{"Authorization": {h}}}
	return fake.BasicAuth()
}

func startProxy(t *testing.T, p *connectProxy, useTLS bool) (*url.URL, []byte) {
	t.Helper()
	s := httptest.NewUnstartedServer(p)
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	var caPEM []byte
	if useTLS {
		s.StartTLS()
		caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u, caPEM
}

// Every transport (probe, pooled with identity, upgrade) goes through the
// proxy, with its credentials; the member's TLS runs inside the tunnel.
func TestEgressConnect(t *testing.T) {
	memberURL, memberCA := member(t, tls.VersionTLS12, tls.VersionTLS13)
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[useTLS], func(t *testing.T) {
			p := &connectProxy{wantAuth: true}
			proxyURL, proxyCA := startProxy(t, p, useTLS)
			tr, err := New(Config{CAData: memberCA, BearerToken: token, ProxyURL: proxyURL,
				ProxyUsername: "user", ProxyPassword: proxyPassword, ProxyCAData: proxyCA})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.CloseIdleConnections()
			if err := probe(tr, memberURL); err != nil {
				t.Fatalf("probe through the proxy: %v", err)
			}
			if n := p.tunnels(); n != 1 {
				t.Fatalf("proxy opened %d tunnels after the probe, want 1", n)
			}
			// The upgrade path dials with the transport's dialer and TLS
			// configuration, as UpgradeAwareHandler does.
			u, _ := url.Parse(memberURL)
			conn, err := proxyutil.DialURL(context.Background(), u, tr.Upgrade)
			if err != nil {
				t.Fatalf("upgrade dial through the proxy: %v", err)
			}
			conn.Close()
			if n := p.tunnels(); n != 2 {
				t.Fatalf("proxy opened %d tunnels after the upgrade dial, want 2", n)
			}
		})
	}
}

// Failures at the proxy are ProxyErrors that name the proxy and never its
// password: wrong credentials, none, a refused connection, a failed tunnel.
func TestEgressProxyErrors(t *testing.T) {
	memberURL, memberCA := member(t, tls.VersionTLS12, tls.VersionTLS13)
	authProxy, _ := startProxy(t, &connectProxy{wantAuth: true}, false)
	openProxy, _ := startProxy(t, &connectProxy{}, false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := ln.Addr().String()
	ln.Close()
	deadMember := "https://" + closedAddr // nothing listens: the proxy cannot connect

	for _, tc := range []struct {
		name       string
		proxy      *url.URL
		user, pass string
		target     string
		want       string
	}{
		{"wrong password", authProxy, "user", "wrong-" + proxyPassword, memberURL, "proxy authentication failed"},
		{"no credentials", authProxy, "", "", memberURL, "the proxy requires credentials"},
		{"proxy down", &url.URL{Scheme: "http", Host: closedAddr}, "user", proxyPassword, memberURL, "connection refused"},
		{"tunnel refused", openProxy, "", "", deadMember, "the proxy answered 502"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := New(Config{CAData: memberCA, BearerToken: token, ProxyURL: tc.proxy, ProxyUsername: tc.user, ProxyPassword: tc.pass})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.CloseIdleConnections()
			err = probe(tr, tc.target)
			var pe *ProxyError
			if !errors.As(err, &pe) {
				t.Fatalf("error = %v, want a ProxyError", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "egress proxy http://"+tc.proxy.Host) || !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not name the proxy %s and %q", msg, tc.proxy.Host, tc.want)
			}
			if strings.Contains(msg, proxyPassword) {
				t.Errorf("error %q reveals the proxy password", msg)
			}
		})
	}
}

// Without proxyURL the transports dial directly: no environment proxy
// (utilnet.SetTransportDefaults would install one; loopback members never
// show it, so the check is on the transports), and a refused connection to a
// member is not a ProxyError.
func TestNoEgressProxy(t *testing.T) {
	memberURL, memberCA := member(t, tls.VersionTLS12, tls.VersionTLS13)
	tr, err := New(Config{CAData: memberCA, BearerToken: token})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	if tr.pooled.Proxy != nil || tr.upgrade.transport().Proxy != nil {
		t.Fatal("a transport has a Proxy function: members would be reached through an environment proxy")
	}
	if err := probe(tr, memberURL); err != nil {
		t.Fatalf("direct probe: %v", err)
	}
	if err := probe(tr, "https://127.0.0.1:1"); err == nil || IsProxyError(err) {
		t.Fatalf("direct probe of a closed port: %v, want a dial error that is not a ProxyError", err)
	}
}

// Transports are rebuilt when any of the proxy settings changes.
func TestEqualComparesProxy(t *testing.T) {
	u1, _ := url.Parse("http://192.0.2.20:3128")
	u2, _ := url.Parse("socks5://192.0.2.20:3128")
	base := Config{BearerToken: token, ProxyURL: u1, ProxyUsername: "u", ProxyPassword: "p", ProxyCAData: []byte("ca")}
	same := base
	same.ProxyURL, _ = url.Parse("http://192.0.2.20:3128")
	if !base.Equal(same) {
		t.Fatal("equal configurations differ")
	}
	for name, mutate := range map[string]func(*Config){
		"no proxy":    func(c *Config) { c.ProxyURL = nil },
		"other proxy": func(c *Config) { c.ProxyURL = u2 },
		"username":    func(c *Config) { c.ProxyUsername = "v" },
		"password":    func(c *Config) { c.ProxyPassword = "q" },
		"CA":          func(c *Config) { c.ProxyCAData = nil },
	} {
		c := base
		mutate(&c)
		if base.Equal(c) || c.Equal(base) {
			t.Errorf("%s: configurations compare equal", name)
		}
	}
}

// socks5Server is a test SOCKS5 server (RFC 1928, RFC 1929) that accepts only
// user:proxyPassword and relays CONNECTs; it counts the relayed sessions.
type socks5Server struct {
	ln       net.Listener
	mu       sync.Mutex
	sessions int
}

func startSOCKS5(t *testing.T) *socks5Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &socks5Server{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *socks5Server) serve(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 512)
	read := func(n int) []byte {
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return nil
		}
		return buf[:n]
	}
	h := read(2) // version, number of methods
	if h == nil || h[0] != 5 || read(int(h[1])) == nil {
		return
	}
	_, _ = c.Write([]byte{5, 2}) // username/password
	v := read(2)
	if v == nil {
		return
	}
	user := string(read(int(v[1])))
	plen := read(1)
	if plen == nil {
		return
	}
	pass := string(read(int(plen[0])))
	if user != "user" || pass != proxyPassword {
		_, _ = c.Write([]byte{1, 1})
		return
	}
	_, _ = c.Write([]byte{1, 0})
	req := read(4) // version, command, reserved, address type
	if req == nil || req[1] != 1 || req[3] != 1 {
		return
	}
	addr := read(6) // IPv4 and port
	if addr == nil {
		return
	}
	target := net.JoinHostPort(net.IP(addr[:4]).String(), fmt.Sprint(int(addr[4])<<8|int(addr[5])))
	upstream, err := net.Dial("tcp", target)
	if err != nil {
		_, _ = c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0}) // connection refused
		return
	}
	defer upstream.Close()
	s.mu.Lock()
	s.sessions++
	s.mu.Unlock()
	_, _ = c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	go func() { _, _ = io.Copy(upstream, c); upstream.Close() }()
	_, _ = io.Copy(c, upstream)
}

func (s *socks5Server) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions
}

// SOCKS5: the probe and the upgrade dial go through the proxy with the
// username/password method; a wrong password is a ProxyError naming the proxy.
func TestEgressSOCKS5(t *testing.T) {
	memberURL, memberCA := member(t, tls.VersionTLS12, tls.VersionTLS13)
	s := startSOCKS5(t)
	proxyURL := &url.URL{Scheme: "socks5", Host: s.ln.Addr().String()}
	tr, err := New(Config{CAData: memberCA, BearerToken: token, ProxyURL: proxyURL, ProxyUsername: "user", ProxyPassword: proxyPassword})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	if err := probe(tr, memberURL); err != nil {
		t.Fatalf("probe through SOCKS5: %v", err)
	}
	u, _ := url.Parse(memberURL)
	conn, err := proxyutil.DialURL(context.Background(), u, tr.Upgrade)
	if err != nil {
		t.Fatalf("upgrade dial through SOCKS5: %v", err)
	}
	conn.Close()
	if n := s.count(); n != 2 {
		t.Fatalf("SOCKS5 server relayed %d sessions, want 2 (probe, upgrade)", n)
	}

	bad, err := New(Config{CAData: memberCA, BearerToken: token, ProxyURL: proxyURL, ProxyUsername: "user", ProxyPassword: "wrong-" + proxyPassword})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.CloseIdleConnections()
	err = probe(bad, memberURL)
	if !IsProxyError(err) || !strings.Contains(err.Error(), "egress proxy socks5://"+proxyURL.Host) ||
		!strings.Contains(err.Error(), "authentication failed") || strings.Contains(err.Error(), proxyPassword) {
		t.Fatalf("wrong SOCKS5 password: %v, want a ProxyError naming the proxy and the authentication failure", err)
	}
}
