package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubewharf/kube-gateway/test/testca"
)

const token = "gateway-token-3c9a1e"

// member starts a TLS server that accepts TLS versions min to max.
func member(t *testing.T, min, max uint16) (url string, caPEM []byte) {
	t.Helper()
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	s.TLS = &tls.Config{MinVersion: min, MaxVersion: max}
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	s.StartTLS()
	t.Cleanup(s.Close)
	return s.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

func probe(tr *Transports, url string) error { return probeVia(tr.Probe, url) }

func probeVia(rt http.RoundTripper, url string) error {
	req, err := http.NewRequest(http.MethodGet, url+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return err
	}
	// Read to the end, as health checking does: a connection is kept for
	// reuse only after its response was read whole.
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

// Every TLS configuration toward members requires TLS 1.2 or newer, whatever
// the verification settings; the pooled and the upgrade transports alike.
func TestMinimumTLSVersion(t *testing.T) {
	_, caPEM := member(t, tls.VersionTLS12, tls.VersionTLS13)
	for name, cfg := range map[string]Config{
		"CA":          {CAData: caPEM, BearerToken: token},
		"host roots":  {BearerToken: token},
		"insecure":    {Insecure: true, BearerToken: token},
		"server name": {CAData: caPEM, ServerName: "example.com", BearerToken: token},
	} {
		t.Run(name, func(t *testing.T) {
			tr, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.CloseIdleConnections()
			for which, c := range map[string]*tls.Config{"pooled": tr.pooled.TLSClientConfig, "upgrade": tr.upgrade.transport().TLSClientConfig} {
				if c == nil {
					t.Errorf("%s transport has no TLS configuration", which)
				} else if c.MinVersion < tls.VersionTLS12 {
					t.Errorf("%s transport accepts TLS below 1.2 (MinVersion %#x)", which, c.MinVersion)
				}
			}
		})
	}

	// On the wire: a member offering only TLS 1.1 is refused, even with
	// verification off; TLS 1.2 and 1.3 members are reached.
	for _, insecure := range []bool{false, true} {
		oldURL, oldCA := member(t, tls.VersionTLS10, tls.VersionTLS11)
		cfg := Config{BearerToken: token, Insecure: insecure}
		if !insecure {
			cfg.CAData = oldCA
		}
		tr, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = probe(tr, oldURL)
		if err == nil || !strings.Contains(err.Error(), "protocol version") {
			t.Errorf("insecure=%v: TLS 1.1 member: %v, want a protocol version error", insecure, err)
		}
		tr.CloseIdleConnections()
	}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		url, ca := member(t, v, v)
		tr, err := New(Config{CAData: ca, BearerToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if err := probe(tr, url); err != nil {
			t.Errorf("%s member: %v", tls.VersionName(v), err)
		}
		tr.CloseIdleConnections()
	}
}

// Verification is on unless Insecure: a member whose CA is not trusted is
// refused; with Insecure it is reached.
func TestVerification(t *testing.T) {
	url, ca := member(t, tls.VersionTLS12, tls.VersionTLS13)
	otherCA := testca.New(t, "other-ca").PEM
	for _, tc := range []struct {
		name   string
		cfg    Config
		wantOK bool
	}{
		{"its CA", Config{CAData: ca, BearerToken: token}, true},
		{"another CA", Config{CAData: otherCA, BearerToken: token}, false},
		{"host roots", Config{BearerToken: token}, false},
		{"insecure", Config{Insecure: true, BearerToken: token}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.CloseIdleConnections()
			err = probe(tr, url)
			if tc.wantOK && err != nil {
				t.Fatalf("request failed: %v", err)
			}
			if !tc.wantOK {
				var verr *tls.CertificateVerificationError
				var uerr x509.UnknownAuthorityError
				if !errors.As(err, &verr) && !errors.As(err, &uerr) {
					t.Fatalf("request error = %v, want a certificate verification error", err)
				}
			}
		})
	}
}

// By default probes share one pooled connection and leave it open. With
// ProbeOwnConnections each probe opens a connection and leaves none behind (an
// idle cluster then holds none), and it resumes the TLS session of the one
// before instead of a full handshake; unless the server is busy with
// requests: then the probes ride on the pooled connection the requests keep
// open anyway.
func TestProbeConnections(t *testing.T) {
	for _, tc := range []struct {
		name      string
		own, busy bool
	}{
		{"pooled", false, false},
		{"pooled, busy", false, true},
		{"own", true, false},
		{"own, busy", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu      sync.Mutex
				open    = map[net.Conn]bool{}
				opened  int
				resumed []bool
			)
			s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/readyz" {
					mu.Lock()
					resumed = append(resumed, r.TLS.DidResume)
					mu.Unlock()
				}
				if got, want := r.Header.Get("Authorization"), "Bearer "+token; got != want {
					t.Errorf("%s with Authorization %q, want %q", r.URL.Path, got, want)
				}
				_, _ = w.Write([]byte("ok"))
			}))
			s.Config.ConnState = func(c net.Conn, st http.ConnState) {
				mu.Lock()
				defer mu.Unlock()
				switch st {
				case http.StateNew:
					open[c] = true
					opened++
				case http.StateClosed, http.StateHijacked:
					delete(open, c)
				}
			}
			s.StartTLS()
			t.Cleanup(s.Close)
			tr, err := New(Config{CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}),
				BearerToken: token, ProbeOwnConnections: tc.own})
			if err != nil {
				t.Fatal(err)
			}
			busyWithin := time.Duration(-1)
			var count ProbeCount
			probes := tr.ProbeWhile(func(d time.Duration) bool { busyWithin = d; return tc.busy }, &count)
			wantOpen, wantOpened := 1, 1
			if tc.busy { // a request opened the pooled connection before
				req, _ := http.NewRequest(http.MethodGet, s.URL+"/api", nil)
				tr.Authorize(req.Header)
				resp, err := tr.Pooled.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			const n = 3
			for i := 0; i < n; i++ {
				if err := probeVia(probes, s.URL); err != nil {
					t.Fatal(err)
				}
			}
			wantResumed := []bool{false, false, false}
			if tc.own && !tc.busy {
				wantOpen, wantOpened, wantResumed = 0, n, []bool{false, true, true}
			}
			wantPooled, wantOwn := uint64(n), uint64(0)
			if tc.own && !tc.busy {
				wantPooled, wantOwn = 0, n
			}
			if pooled, own := count.Sent(); pooled != wantPooled || own != wantOwn {
				t.Errorf("probes counted over pooled and own connections: %d and %d, want %d and %d", pooled, own, wantPooled, wantOwn)
			}
			if tc.own && busyWithin != idleConnTimeout {
				t.Errorf("busy asked for the last %v, want the pooled connections' idle timeout %v", busyWithin, idleConnTimeout)
			}
			// The server sees a close when it reads the next request; poll.
			_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
				mu.Lock()
				defer mu.Unlock()
				return len(open) == wantOpen, nil
			})
			mu.Lock()
			defer mu.Unlock()
			if len(open) != wantOpen || opened != wantOpened {
				t.Errorf("after %d probes: %d connections opened, %d open; want %d and %d", n, opened, len(open), wantOpened, wantOpen)
			}
			if !slices.Equal(resumed, wantResumed) {
				t.Errorf("TLS sessions resumed by the probes: %v, want %v", resumed, wantResumed)
			}
		})
	}
}

// The servers of one Builder share their transports and one pool of
// connections; with ProbeOwnConnections each has its own probe transport and
// TLS session cache, since servers of one cluster may share a name. The
// upgrade transport is built on first use only.
func TestBuilderShares(t *testing.T) {
	url1, ca := member(t, tls.VersionTLS12, tls.VersionTLS13)
	url2, _ := member(t, tls.VersionTLS12, tls.VersionTLS13) // httptest's certificate again
	for _, own := range []bool{false, true} {
		t.Run(fmt.Sprintf("ProbeOwnConnections=%v", own), func(t *testing.T) {
			b, err := NewBuilder(Config{CAData: ca, BearerToken: token, ProbeOwnConnections: own})
			if err != nil {
				t.Fatal(err)
			}
			one, two := b.New(), b.New()
			if (one == two) == own {
				t.Errorf("the servers share one set of transports: %v, want %v", one == two, !own)
			}
			if one.pooled != two.pooled || one.pooled.TLSClientConfig.RootCAs == nil {
				t.Fatal("the servers have pooled transports of their own")
			}
			if own && one.probe.TLSClientConfig.ClientSessionCache == two.probe.TLSClientConfig.ClientSessionCache {
				t.Error("the servers' probes share a TLS session cache")
			}
			// Both work over one pool; the pooled TLS configuration was left
			// as built by HTTP/2 set-up.
			if err := probeVia(one.Pooled, url1); err != nil {
				t.Fatal(err)
			}
			if err := probeVia(two.Pooled, url2); err != nil {
				t.Fatal(err)
			}
			if got := one.pooled.TLSClientConfig.NextProtos; !slices.Equal(got, []string{"h2", "http/1.1"}) {
				t.Errorf("pooled ALPN %q, want h2 and http/1.1 offered", got)
			}
			if one.upgrade.built.Load() != nil {
				t.Error("the upgrade transport was built before an upgrade")
			}
			if got := one.upgrade.transport().TLSClientConfig.NextProtos; !slices.Equal(got, []string{"http/1.1"}) {
				t.Errorf("upgrade ALPN %q, want http/1.1 only", got)
			}
			if one.upgrade.transport() != two.upgrade.transport() {
				t.Error("the servers have upgrade transports of their own")
			}
		})
	}
}

// A client certificate reaches the member, and the builder keeps no parsed
// leaf of it: a client only sends the certificate, and every idle cluster
// would hold the leaf.
func TestClientCertificate(t *testing.T) {
	clients := testca.New(t, "member-clients")
	gateway := clients.Issue(t, testca.Spec{CommonName: "kube-gateway", Usage: x509.ExtKeyUsageClientAuth})
	pool := x509.NewCertPool()
	pool.AddCert(clients.Cert)
	var seen []string
	var mu sync.Mutex
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range r.TLS.PeerCertificates {
			seen = append(seen, c.Subject.CommonName)
		}
	}))
	s.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})

	b, err := NewBuilder(Config{CAData: ca, CertData: gateway.CertPEM, KeyData: gateway.KeyPEM})
	if err != nil {
		t.Fatal(err)
	}
	tr := b.New()
	defer tr.CloseIdleConnections()
	if err := probe(tr, s.URL); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if !slices.Equal(seen, []string{"kube-gateway"}) {
		t.Errorf("the member saw client certificates %q, want kube-gateway's", seen)
	}
	mu.Unlock()
	cert, err := b.tlsConfig.GetClientCertificate(&tls.CertificateRequestInfo{})
	if err != nil || cert == nil || len(cert.Certificate) == 0 {
		t.Fatalf("GetClientCertificate = %v, %v; want the certificate", cert, err)
	}
	if cert.Leaf != nil {
		t.Error("the builder keeps the parsed leaf of its client certificate")
	}

	if _, err := NewBuilder(Config{CAData: ca, CertData: gateway.CertPEM, KeyData: clients.KeyPEM}); err == nil {
		t.Error("a certificate with another key's private key was accepted")
	}
}

// The pooled transports ask members for a small HPACK table for their
// response headers: a table a kube-apiserver's Audit-Id and Date keep full
// is memory every connection holds, idle or not.
func TestPooledConnectionsAskForASmallHeaderTable(t *testing.T) {
	settings := make(chan http2.SettingsFrame, 1)
	s := httptest.NewUnstartedServer(http.NotFoundHandler())
	s.TLS = &tls.Config{NextProtos: []string{"h2"}}
	// The server reads the client's preface and first SETTINGS frame, and
	// hangs up: the round trip fails, the setting is what counts.
	s.Config.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){
		"h2": func(_ *http.Server, c *tls.Conn, _ http.Handler) {
			defer c.Close()
			if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
				return
			}
			f, err := http2.NewFramer(io.Discard, c).ReadFrame()
			if sf, ok := f.(*http2.SettingsFrame); ok && err == nil {
				settings <- *sf
			}
		},
	}
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.StartTLS()
	t.Cleanup(s.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})

	tr, err := New(Config{CAData: ca, BearerToken: token})
	if err != nil {
		t.Fatal(err)
	}
	_ = probeVia(tr.Pooled, s.URL)
	select {
	case sf := <-settings:
		if got, ok := sf.Value(http2.SettingHeaderTableSize); !ok || got != responseHeaderTable {
			t.Errorf("SETTINGS_HEADER_TABLE_SIZE %d (sent: %v), want %d", got, ok, responseHeaderTable)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no SETTINGS frame from the pooled transport")
	}
}

// BenchmarkResponseHeaderBlock reports what a response's HTTP/2 header block
// takes on the wire when the member's encoder may keep table bytes of it: a
// kube-apiserver's answer to a probe, its Audit-Id and Date new every time.
func BenchmarkResponseHeaderBlock(b *testing.B) {
	for _, table := range []uint32{4096, responseHeaderTable, 512, 0} {
		b.Run(fmt.Sprintf("table=%d", table), func(b *testing.B) {
			var buf bytes.Buffer
			enc := hpack.NewEncoder(&buf)
			enc.SetMaxDynamicTableSizeLimit(table)
			flowSchema, priorityLevel := string(uuid.NewUUID()), string(uuid.NewUUID())
			date := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
			written := 0
			for i := range b.N + 100 {
				if i == 100 { // the table is full by now
					written = 0
				}
				buf.Reset()
				for _, f := range [][2]string{{":status", "200"}, {"audit-id", string(uuid.NewUUID())},
					{"cache-control", "no-cache, private"}, {"content-type", "application/json"},
					{"x-content-type-options", "nosniff"}, {"x-kubernetes-pf-flowschema-uid", flowSchema},
					{"x-kubernetes-pf-prioritylevel-uid", priorityLevel},
					{"date", date.Add(time.Duration(i) * 5 * time.Second).Format(http.TimeFormat)}, {"content-length", "3456"}} {
					if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
						b.Fatal(err)
					}
				}
				written += buf.Len()
			}
			b.ReportMetric(float64(written)/float64(b.N), "bytes/response")
		})
	}
}
