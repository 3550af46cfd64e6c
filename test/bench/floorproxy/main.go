// Command floorproxy is the cheapest Go HTTP/2 TLS reverse proxy the
// benchmark can think of: a measuring instrument, not a product. test/bench
// puts it in front of member-b as target "floor" to show what proxying one
// request costs at the least on this machine (TLS and HTTP/2 in, HTTP/2 out,
// net/http/httputil.ReverseProxy), so that the gateway's own overhead is
// gateway minus floor.
//
// It authenticates nobody, authorizes nothing, keeps no metrics and logs
// nothing per request. It adds one bearer token for the member and forwards
// everything else as it came. With -impersonate-user it also names one fixed
// identity in Impersonate-User and Impersonate-Group headers, as a proxy in the
// gateway's place must for the member's RBAC to apply to the hub's user: the
// member then authorizes the impersonation as it does for the gateway's
// requests.
//
//	floorproxy -upstream https://127.0.0.1:PORT -upstream-ca ca.crt -token-file token -dir DIR [-impersonate-user U -impersonate-groups G1,G2]
//
// At start it generates a serving certificate for 127.0.0.1 signed by its own
// CA (both written to DIR/ca.crt), listens on 127.0.0.1:0 and then writes
// its address "127.0.0.1:PORT" to DIR/addr (atomically: readers see it whole
// or not at all). Before that it serves net/http/pprof and the Go runtime's
// Prometheus metrics (/metrics) over plain HTTP on another loopback port,
// written to DIR/debug-addr, so that the benchmarks can read its heap, stacks,
// goroutines and the bytes it allocates as they read the gateway's; nothing on
// the proxy path touches it. It exits on SIGTERM or SIGINT.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	_ "net/http/pprof" // the debug listener's handlers
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	certutil "k8s.io/client-go/util/cert"
)

func main() {
	upstream := flag.String("upstream", "", "URL of the member apiserver, e.g. https://127.0.0.1:6443")
	upstreamCA := flag.String("upstream-ca", "", "PEM file with the CA of the upstream's serving certificate")
	tokenFile := flag.String("token-file", "", "file with the bearer token sent to the upstream")
	dir := flag.String("dir", "", "directory that receives ca.crt and addr")
	impersonateUser := flag.String("impersonate-user", "", "user to name in Impersonate-User on every request (the token's user must be allowed to impersonate it); empty: none")
	impersonateGroups := flag.String("impersonate-groups", "", "comma-separated groups to name in Impersonate-Group, with -impersonate-user")
	flag.Parse()
	var id *identity
	if *impersonateUser != "" {
		id = &identity{user: []string{*impersonateUser}}
		if *impersonateGroups != "" {
			id.groups = strings.Split(*impersonateGroups, ",")
		}
	}
	if err := run(*upstream, *upstreamCA, *tokenFile, *dir, id); err != nil {
		fmt.Fprintf(os.Stderr, "floorproxy: %v\n", err)
		os.Exit(1)
	}
}

// identity is the one the proxy impersonates on every request: the header
// values, shared by all requests (the transport only reads them).
type identity struct {
	user, groups []string
}

func run(upstream, upstreamCA, tokenFile, dir string, id *identity) error {
	if upstream == "" || upstreamCA == "" || tokenFile == "" || dir == "" {
		return errors.New("-upstream, -upstream-ca, -token-file and -dir are required")
	}
	target, err := url.Parse(upstream)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(upstreamCA)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("%s: no certificate", upstreamCA)
	}
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		return err
	}
	bearer := "Bearer " + strings.TrimSpace(string(tok))

	// Out: one pooled transport, HTTP/2 to the member over TLS.
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        100,
		MaxIdleConnsPerHost: 100,
		IdleConnTimeout:     90 * time.Second,
	}
	proxy := &httputil.ReverseProxy{
		// Rewrite (not Director): hop-by-hop and X-Forwarded-* headers of the
		// inbound request are already removed from pr.Out.
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target) // scheme, host, path prefix; Host header = upstream's
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Set("Authorization", bearer)
			if id != nil {
				pr.Out.Header["Impersonate-User"] = id.user
				if len(id.groups) > 0 {
					pr.Out.Header["Impersonate-Group"] = id.groups
				}
			}
		},
		Transport: tr,
		// As the gateway flushes answers to requests that are not
		// long-running: at each write only when their length is not declared
		// (watches, lists). A flush at each write would send a small answer
		// in a flushed frame and an empty one to end it.
		FlushInterval: 0,
		BufferPool:    bufferPool{},
	}

	// In: TLS 1.2+ with HTTP/2 (ALPN h2) and HTTP/1.1.
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		return err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	srv := &http.Server{
		Handler:           proxy,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Protocols:         &protos,
		ReadHeaderTimeout: 30 * time.Second,
	}
	debugLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	// net/http/pprof registers on the default mux; /metrics has the default
	// registry's Go runtime and process collectors.
	http.Handle("/metrics", promhttp.Handler())
	debugSrv := &http.Server{Handler: http.DefaultServeMux, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = debugSrv.Serve(debugLn) }()
	defer debugSrv.Close()
	if err := writeAtomic(filepath.Join(dir, "debug-addr"), []byte(debugLn.Addr().String())); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	// ca.crt before addr: whoever sees addr can read ca.crt.
	if err := writeAtomic(filepath.Join(dir, "ca.crt"), certPEM); err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(dir, "addr"), []byte(ln.Addr().String())); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}

// bufferPool hands ReverseProxy 32 KiB copy buffers from a sync.Pool (without
// it every response body copy allocates one).
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }

// writeAtomic writes data to a temporary file in path's directory and renames
// it to path.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), path)
}
