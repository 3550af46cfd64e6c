// Package kubelet is a stand-in kubelet for end-to-end tests: it serves only the
// kubelet's streaming endpoints (exec, attach, port-forward) on loopback, so that a
// member kube-apiserver without real nodes can still serve pods/exec, pods/attach and
// pods/portforward. A test creates a Node whose InternalIP is 127.0.0.1 and whose
// status.daemonEndpoints.kubeletEndpoint.Port is Server.Port().
//
// The protocol work (SPDY and WebSocket upgrades, channel framing, exit status) is done
// by k8s.io/cri-streaming, the same library a container runtime's streaming server
// uses behind the real kubelet; this package only routes the kubelet's URLs to it and
// supplies an in-process "runtime" (runtime.go). No host command is ever executed.
//
// Protocols: exec and attach speak SPDY (v4.|v3.|v2.)channel.k8s.io and WebSocket
// (v4.)channel.k8s.io and (v4.)base64.channel.k8s.io; port-forward speaks SPDY
// portforward.k8s.io and the legacy WebSocket protocol (ports in the "port" query).
// WebSocket v5.channel.k8s.io (kubectl exec's default) and SPDY tunnelled through
// WebSocket (kubectl port-forward's default) are not served: a 1.30+ kube-apiserver
// translates both to SPDY unless the Node lists ExtendWebSocketsToKubelet in
// status.declaredFeatures, so test Nodes must not declare it.
package kubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// The kubelet's defaults (--streaming-connection-idle-timeout and the streaming
// server's stream creation timeout), so clients see familiar behaviour.
const (
	idleTimeout           = time.Minute
	streamCreationTimeout = remotecommand.DefaultStreamCreationTimeout // 30s
)

// Config of a stand-in kubelet.
type Config struct {
	CertFile, KeyFile string // serving certificate (PEM files); must be valid for 127.0.0.1
	ClientCAFile      string // if set, require client certificates signed by this CA (the apiserver's kubelet client cert)
}

// Request is one streaming session the stand-in served, for assertions.
// A port-forward session yields one Request per forwarded connection.
type Request struct {
	Kind      string // "exec" | "attach" | "portforward"
	Namespace string
	Pod       string
	Container string   // empty for port-forward
	Command   []string // exec only
	Port      int32    // port-forward only
}

// Server is a running stand-in kubelet.
type Server struct {
	port      int
	http      *http.Server
	stopWatch func() bool // detaches Close from the Start context

	closeOnce sync.Once
	closeErr  error

	mu       sync.Mutex
	closed   bool
	hijacked map[net.Conn]struct{} // upgraded connections, which http.Server no longer tracks
	requests []Request
	// work counts the serve loop, handlers and streaming callbacks; Close waits for it.
	// Add happens only under mu while !closed, so it never races with Wait.
	work sync.WaitGroup
}

// connKey carries a request's connection in its context, so that the connection can
// be forgotten once the handler that upgraded it returns.
type connKey struct{}

// Start listens on 127.0.0.1:0 with TLS and serves until ctx ends or Close is called.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	tlsConfig, err := serverTLSConfig(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("stand-in kubelet: listen: %w", err)
	}
	s := &Server{port: ln.Addr().(*net.TCPAddr).Port, hijacked: map[net.Conn]struct{}{}}
	s.http = &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: streamCreationTimeout,
		IdleTimeout:       idleTimeout,
		// TLS handshake failures (e.g. a client without a certificate) are expected in
		// tests; the client sees them, the test log need not.
		ErrorLog:    log.New(io.Discard, "", 0),
		ConnState:   s.trackHijacked,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
	}
	s.work.Add(1)
	go func() {
		defer s.work.Done()
		_ = s.http.Serve(tls.NewListener(ln, tlsConfig)) // returns ErrServerClosed on Close
	}()
	s.stopWatch = context.AfterFunc(ctx, func() { _ = s.Close() })
	return s, nil
}

// serverTLSConfig serves HTTP/1.1 only: SPDY and WebSocket upgrades do not exist in
// HTTP/2, and the kube-apiserver dials kubelets with HTTP/1.1 for them anyway.
func serverTLSConfig(cfg Config) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("stand-in kubelet: serving certificate: %w", err)
	}
	c := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
	}
	if cfg.ClientCAFile != "" {
		pemBytes, err := os.ReadFile(cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("stand-in kubelet: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemBytes) {
			return nil, fmt.Errorf("stand-in kubelet: client CA: no certificate in %s", cfg.ClientCAFile)
		}
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// routes registers the kubelet's streaming routes (pkg/kubelet/server: GET and POST,
// with and without the pod UID). The kube-apiserver builds the paths without UID
// (pkg/registry/core/pod: /exec/ns/pod/container, /portForward/ns/pod).
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		mux.HandleFunc(method+" /exec/{namespace}/{pod}/{container}", s.serveExec)
		mux.HandleFunc(method+" /exec/{namespace}/{pod}/{uid}/{container}", s.serveExec)
		mux.HandleFunc(method+" /attach/{namespace}/{pod}/{container}", s.serveAttach)
		mux.HandleFunc(method+" /attach/{namespace}/{pod}/{uid}/{container}", s.serveAttach)
		mux.HandleFunc(method+" /portForward/{namespace}/{pod}", s.servePortForward)
		mux.HandleFunc(method+" /portForward/{namespace}/{pod}/{uid}", s.servePortForward)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.begin() {
			http.Error(w, "stand-in kubelet is shutting down", http.StatusServiceUnavailable)
			return
		}
		defer s.work.Done()
		defer s.forgetHijacked(r.Context())
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) serveExec(w http.ResponseWriter, r *http.Request) {
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p := s.pod(r)
	remotecommand.ServeExec(w, r, p, p.name, r.PathValue("uid"), r.PathValue("container"), r.URL.Query()["command"],
		opts, idleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (s *Server) serveAttach(w http.ResponseWriter, r *http.Request) {
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p := s.pod(r)
	remotecommand.ServeAttach(w, r, p, p.name, r.PathValue("uid"), r.PathValue("container"),
		opts, idleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (s *Server) servePortForward(w http.ResponseWriter, r *http.Request) {
	opts, err := portforward.NewV4Options(r) // WebSocket: ports from the query; SPDY: per stream
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p := s.pod(r)
	portforward.ServePortForward(w, r, p, p.name, r.PathValue("uid"), opts, idleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

// pod returns the runtime for the request's pod. The streaming callbacks receive only
// a pod name, so the namespace travels in the value itself.
func (s *Server) pod(r *http.Request) pod {
	return pod{server: s, namespace: r.PathValue("namespace"), name: r.PathValue("pod")}
}

// Port is the TCP port to put in the Node's status.daemonEndpoints.kubeletEndpoint.Port.
func (s *Server) Port() int { return s.port }

// Addr is "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Requests returns what the stand-in served so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.requests)
	for i := range out {
		out[i].Command = slices.Clone(out[i].Command)
	}
	return out
}

func (s *Server) record(r Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r)
}

// Close stops serving, ends every open stream and waits for its goroutines. It is
// safe to call more than once; later calls wait for the first and return its result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.stopWatch()
		s.mu.Lock()
		s.closed = true
		for c := range s.hijacked {
			_ = c.Close() // unblocks streams waiting on the client
		}
		clear(s.hijacked)
		s.mu.Unlock()
		if err := s.http.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			s.closeErr = err
		}
		s.work.Wait()
	})
	return s.closeErr
}

// begin registers a unit of work unless the server is closing; the caller must call
// s.work.Done when begin returns true.
func (s *Server) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.work.Add(1)
	return true
}

// trackHijacked remembers upgraded connections: http.Server.Close does not close
// them, and an idle stream would otherwise keep Close waiting for its handler.
func (s *Server) trackHijacked(c net.Conn, state http.ConnState) {
	if state != http.StateHijacked {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		return
	}
	s.hijacked[c] = struct{}{}
}

// forgetHijacked drops the request's connection once its handler returns. It does not
// close it: SPDY shuts the connection down on its own after the client has read the
// last frames (closing it here could reset data still in flight).
func (s *Server) forgetHijacked(ctx context.Context) {
	c, _ := ctx.Value(connKey{}).(net.Conn)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.hijacked, c)
}
