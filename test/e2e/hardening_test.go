package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kubewharf/kube-gateway/test/harness"
)

// copyFile copies src to dst (mode 0600).
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// replaceFile puts the content of src at dst by rename, as a Secret volume
// update or a certificate manager would.
func replaceFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

func certSerial(t *testing.T, certFile string) *big.Int {
	t.Helper()
	kp, err := tls.LoadX509KeyPair(certFile, strings.TrimSuffix(certFile, ".crt")+".key")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(kp.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber
}

// presentedSerial returns the serial of the certificate a TLS server presents.
func presentedSerial(url string) (*big.Int, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", strings.TrimPrefix(url, "https://"),
		&tls.Config{InsecureSkipVerify: true}) // #nosec G402 -- only reads the certificate
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// clientFor trusts the CAs in caFiles and presents the client certificate
// certFile (key next to it); a new connection per request.
func clientFor(t *testing.T, certFile string, caFiles ...string) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	for _, f := range caFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pool.AppendCertsFromPEM(data)
	}
	kp, err := tls.LoadX509KeyPair(certFile, strings.TrimSuffix(certFile, ".crt")+".key")
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true,
	}}
}

// listAsAdmin lists UpstreamClusters at url claiming the hub admin's identity in
// X-Remote-* headers: 200 only if the client certificate is trusted as the
// front proxy.
func listAsAdmin(ctx context.Context, c *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters", nil)
	if err != nil {
		return 0, err
	}
	req.Header = harness.AdminFrontProxyHeader()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// The serving certificate (--tls-cert-file/--tls-private-key-file) and the
// request-header CA (--requestheader-client-ca-file) are reloaded when their
// files change, without a restart: the new certificate is presented, a
// front-proxy certificate of the new CA is trusted and one of the old CA no
// longer is.
func TestServingCertAndRequestHeaderCAReload(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	dir := t.TempDir()
	servingCert, servingKey := filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	requestHeaderCA := filepath.Join(dir, "requestheader-ca.crt")
	harnessCert, harnessKey := env.GatewayServingCert()
	copyFile(t, harnessCert, servingCert)
	copyFile(t, harnessKey, servingKey)
	copyFile(t, env.FrontProxyCAFile(), requestHeaderCA)

	gw, url, err := env.StartExtraGateway(ctx, "kube-gateway-reload",
		"--tls-cert-file="+servingCert,
		"--tls-private-key-file="+servingKey,
		"--requestheader-client-ca-file="+requestHeaderCA,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-uid-headers=X-Remote-Uid",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
	)
	t.Cleanup(func() { _ = gw.Stop() })
	if err != nil {
		t.Fatal(err)
	}

	// The replacements: a serving certificate from a new CA, a new
	// request-header CA and a front-proxy client certificate from it.
	next := filepath.Join(dir, "next")
	servingCA, err := harness.NewCA(next, "serving-ca")
	if err != nil {
		t.Fatal(err)
	}
	newServingCert, newServingKey, err := servingCA.IssueGatewayServing(next, "serving")
	if err != nil {
		t.Fatal(err)
	}
	frontProxyCA, err := harness.NewCA(next, "front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	newClientCert, _, err := frontProxyCA.IssueClient(next, "front-proxy-client", "front-proxy-client")
	if err != nil {
		t.Fatal(err)
	}
	oldClientCert, _ := env.FrontProxyClientCert()
	oldSerial, newSerial := certSerial(t, harnessCert), certSerial(t, newServingCert)
	bothCAs := []string{env.GatewayCAFile, servingCA.CertFile()}
	oldClient, newClient := clientFor(t, oldClientCert, bothCAs...), clientFor(t, newClientCert, bothCAs...)

	// Before: the old certificate is served, only the old front proxy is trusted.
	if s, err := presentedSerial(url); err != nil || s.Cmp(oldSerial) != 0 {
		t.Fatalf("serving certificate before the change: serial %v (%v), want %v", s, err, oldSerial)
	}
	if code, err := listAsAdmin(ctx, oldClient, url); err != nil || code != http.StatusOK {
		t.Fatalf("old front-proxy certificate before the change: %d %v, want 200", code, err)
	}
	if code, err := listAsAdmin(ctx, newClient, url); err != nil || code == http.StatusOK {
		t.Fatalf("new front-proxy certificate before the change: %d %v, want it refused", code, err)
	}

	changed := time.Now()
	replaceFile(t, newServingKey, servingKey)
	replaceFile(t, newServingCert, servingCert)
	replaceFile(t, frontProxyCA.CertFile(), requestHeaderCA)

	// k8s.io/apiserver watches the files (and re-reads them every minute).
	eventually(t, 100*time.Second, func(context.Context) error {
		s, err := presentedSerial(url)
		if err != nil {
			return err
		}
		if s.Cmp(newSerial) != 0 {
			return errorf("serving certificate serial %v, want the new %v", s, newSerial)
		}
		return nil
	})
	t.Logf("new serving certificate presented %s after the change", time.Since(changed).Round(100*time.Millisecond))
	// It verifies against the new CA alone.
	if code, err := listAsAdmin(ctx, clientFor(t, newClientCert, servingCA.CertFile()), url); err != nil {
		t.Fatalf("TLS with only the new serving CA trusted: %d %v", code, err)
	}
	eventually(t, 100*time.Second, func(ctx context.Context) error {
		newCode, err := listAsAdmin(ctx, newClient, url)
		if err != nil {
			return err
		}
		oldCode, err := listAsAdmin(ctx, oldClient, url)
		if err != nil {
			return err
		}
		if newCode != http.StatusOK || oldCode == http.StatusOK {
			return errorf("new front-proxy certificate: %d (want 200), old one: %d (want refused)", newCode, oldCode)
		}
		return nil
	})
	t.Logf("request-header CA reloaded %s after the change", time.Since(changed).Round(100*time.Millisecond))
}

// readHeaderTimeout is what k8s.io/apiserver sets on its http.Server
// (pkg/server/secure_serving.go: ReadHeaderTimeout 32s, "just shy of
// requestTimeoutUpperBound").
const readHeaderTimeout = 32 * time.Second

// Slowloris at the gateway's real port: 200 TLS connections that trickle a
// request header one line every 2 s never finish it. They cost about one
// goroutine each, a normal request is served meanwhile, and the gateway closes
// every one of them within its read-header timeout, after which its goroutines
// are back to the baseline.
func TestSlowHeaderClientsAreCut(t *testing.T) {
	const conns = 200
	const lineEvery = 2 * time.Second
	const maxLines = 60 // bounded: 2 minutes of trickling at most
	base := goroutines(t)

	caPEM, err := os.ReadFile(env.GatewayCAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tlsConfig := &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
	addr := strings.TrimPrefix(env.GatewayURL, "https://")

	type result struct {
		open time.Duration // from the end of the handshake to the server's close
		err  error
	}
	results := make(chan result, conns)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var connected sync.WaitGroup
	connected.Add(conns)
	t.Cleanup(func() { close(stop); wg.Wait() })
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 20 * time.Second}, "tcp", addr, tlsConfig)
			connected.Done()
			if err != nil {
				results <- result{err: err}
				return
			}
			defer c.Close()
			begin := time.Now()
			closed := make(chan struct{})
			go func() {
				_, _ = io.Copy(io.Discard, c) // returns when the server closes
				close(closed)
			}()
			if _, err := io.WriteString(c, "GET /readyz HTTP/1.1\r\nHost: localhost\r\n"); err != nil {
				results <- result{err: err}
				return
			}
			tick := time.NewTicker(lineEvery)
			defer tick.Stop()
			for n := 0; n < maxLines; n++ {
				select {
				case <-closed:
					results <- result{open: time.Since(begin)}
					return
				case <-stop:
					results <- result{err: fmt.Errorf("test ended")}
					return
				case <-tick.C:
					if _, err := fmt.Fprintf(c, "X-Slow-%d: x\r\n", n); err != nil {
						<-closed
						results <- result{open: time.Since(begin)}
						return
					}
				}
			}
			results <- result{err: fmt.Errorf("still open after %d header lines", maxLines)}
		}()
	}
	connected.Wait()
	opened := time.Now()

	// Meanwhile: bounded goroutines, and normal requests are served (by one
	// client, whose keep-alive connection is part of the count from then on).
	normal := gatewayClient(t, true)
	peak := 0
	for time.Since(opened) < readHeaderTimeout/2 {
		n := goroutines(t)
		if n > peak {
			peak = n
		}
		if n > base+2*conns+100 {
			t.Fatalf("%d goroutines with %d slow clients (baseline %d): not bounded by the connections", n, conns, base)
		}
		if code, body := gatewayGet(t, normal, harness.ProxyPath(harness.MemberB)+"/version", harness.AdminFrontProxyHeader()); code != http.StatusOK {
			t.Fatalf("a normal request among slow clients: %d %s", code, body)
		}
		time.Sleep(2 * time.Second) // sampling interval, not a wait for readiness
	}
	t.Logf("goroutines: baseline %d, peak %d with %d slow clients", base, peak, conns)
	if peak < base+conns/2 {
		t.Fatalf("peak %d goroutines (baseline %d): the slow clients did not reach the gateway; the test proves nothing", peak, base)
	}

	// Every connection is closed by the server within the read-header timeout
	// (plus slack for a loaded machine).
	const slack = 15 * time.Second
	deadline := time.After(time.Until(opened.Add(readHeaderTimeout + slack)))
	var longest time.Duration
	for i := 0; i < conns; i++ {
		select {
		case r := <-results:
			if r.err != nil {
				t.Fatalf("slow client: %v", r.err)
			}
			if r.open > longest {
				longest = r.open
			}
		case <-deadline:
			t.Fatalf("%d of %d slow connections still open %s after they were opened (read-header timeout %s)",
				conns-i, conns, time.Since(opened).Round(time.Second), readHeaderTimeout)
		}
	}
	if longest > readHeaderTimeout+slack {
		t.Fatalf("a slow connection stayed open %s (read-header timeout %s)", longest, readHeaderTimeout)
	}
	t.Logf("all %d slow connections closed by the gateway; the longest stayed %s", conns, longest.Round(100*time.Millisecond))
	eventually(t, 30*time.Second, func(context.Context) error {
		if n := goroutines(t); n > base+15 {
			return errorf("%d goroutines after the slow clients were cut (baseline %d); biggest groups:%s", n, base, goroutineGroups(t, 8))
		}
		return nil
	})
}

// Clients that vanish in the middle of a proxied watch or of a large response
// free what they held in the gateway: its goroutines return to the baseline.
func TestVanishedClientsFreeGoroutines(t *testing.T) {
	const watches, reads = 20, 5
	ctx := testContext(t, 2*time.Minute)
	base := goroutines(t)

	// Straight at the gateway's port as the hub would call it, one TCP
	// connection per request (HTTP/1.1), each kept to be cut.
	var mu sync.Mutex
	var raw []net.Conn
	client := gatewayClient(t, true)
	tr := client.Transport.(*http.Transport)
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // no HTTP/2: a connection per stream
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			mu.Lock()
			raw = append(raw, c)
			mu.Unlock()
		}
		return c, err
	}
	client.Timeout = 0 // streams
	open := func(path string) *http.Response {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.GatewayURL+harness.ProxyPath(harness.MemberB)+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = harness.AdminFrontProxyHeader()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		return resp
	}
	for i := 0; i < watches; i++ {
		open("/api/v1/namespaces/default/configmaps?watch=true")
	}
	for i := 0; i < reads; i++ {
		// The member's OpenAPI document is several MiB: read a little, then
		// stop reading, so the gateway is blocked writing to us.
		resp := open("/openapi/v2")
		if _, err := io.ReadFull(resp.Body, make([]byte, 64<<10)); err != nil {
			t.Fatal(err)
		}
	}
	held := goroutines(t)
	t.Logf("goroutines: baseline %d, %d with %d watches and %d unread responses", base, held, watches, reads)
	if held < base+watches+reads {
		t.Fatalf("%d goroutines (baseline %d): the streams hold nothing the test could see freed", held, base)
	}

	// The clients vanish: their TCP connections close without a word.
	mu.Lock()
	for _, c := range raw {
		c.Close()
	}
	mu.Unlock()
	eventually(t, 30*time.Second, func(context.Context) error {
		if n := goroutines(t); n > base+15 {
			return errorf("%d goroutines after the clients vanished (baseline %d, %d while held); biggest groups:%s", n, base, held, goroutineGroups(t, 8))
		}
		return nil
	})
}

// goroutineGroups summarizes the gateway's goroutines by stack (the biggest
// groups first), to say what stayed when a count does not return to baseline.
func goroutineGroups(t *testing.T, top int) string {
	t.Helper()
	_, body := goroutineProfile(t)
	type group struct {
		n     int
		stack string
	}
	var groups []group
	for _, block := range strings.Split(body, "\n\n") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		count, _, ok := strings.Cut(lines[0], " @ ")
		n, err := strconv.Atoi(count)
		if !ok || err != nil {
			continue
		}
		var frames []string
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "#" && len(frames) < 4 {
				frames = append(frames, f[2])
			}
		}
		groups = append(groups, group{n, strings.Join(frames, " < ")})
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].n > groups[j].n })
	// The whole profile goes next to the process logs, which a failed run keeps.
	dump := filepath.Join(env.WorkDir, "logs", strings.ReplaceAll(t.Name(), "/", "_")+"-goroutines.txt")
	_ = os.WriteFile(dump, []byte(body), 0o644)
	var b strings.Builder
	fmt.Fprintf(&b, " (full profile in %s)", dump)
	for i := 0; i < len(groups) && i < top; i++ {
		fmt.Fprintf(&b, "\n  %4d %s", groups[i].n, groups[i].stack)
	}
	return b.String()
}
