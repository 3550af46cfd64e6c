package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/version"
)

// standInCommand is the hidden subcommand that runs a stand-in member server
// as a process of its own (startStandIns), so that its CPU, memory and file
// descriptors are its own, not the bench's.
const standInCommand = "stand-in-server"

// standInVersion is what a stand-in's /version reports.
var standInVersion = version.Info{Major: "1", Minor: "36", GitVersion: "v1.36.0-bench-stand-in", Platform: "linux/amd64"}

// standInMain serves, on every port of one loopback address, what a member
// kube-apiserver answers to the gateway's health probes and discovery, over
// TLS (HTTP/2 offered) with client certificates required, until SIGTERM or
// SIGINT. It writes host:port of each listener, one a line, to --addr-file
// once they all listen.
func standInMain(args []string) error {
	fs := flag.NewFlagSet(standInCommand, flag.ContinueOnError)
	cert := fs.String("cert", "", "serving certificate (PEM)")
	key := fs.String("key", "", "serving key (PEM)")
	clientCA := fs.String("client-ca", "", "CA of the client certificates accepted")
	host := fs.String("host", "127.0.0.1", "loopback address to listen on")
	ports := fs.Int("ports", 1, "listeners, each on a port of its own")
	addrFile := fs.String("addr-file", "", "file to write host:port of every listener to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cert == "" || *key == "" || *clientCA == "" || *addrFile == "" {
		return errors.New("--cert, --key, --client-ca and --addr-file are required")
	}
	if ip := net.ParseIP(*host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--host %q: a loopback address is required", *host)
	}
	raiseFDLimit()
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(*clientCA)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("%s: no certificate", *clientCA)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	h := newStandInHandler()
	var servers []*http.Server
	var addrs []string
	for range *ports {
		ln, err := net.Listen("tcp", net.JoinHostPort(*host, "0"))
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: h, TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 10 * time.Minute}
		servers = append(servers, srv)
		addrs = append(addrs, ln.Addr().String())
		go func() { _ = srv.ServeTLS(ln, "", "") }()
	}
	tmp := *addrFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(addrs, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, *addrFile); err != nil {
		return err
	}
	fmt.Printf("stand-in server listening on %s\n", strings.Join(addrs, " "))
	<-ctx.Done()
	for _, srv := range servers {
		_ = srv.Close()
	}
	return nil
}

// newStandInHandler answers as a kube-apiserver does: ok on /readyz, /livez
// and /healthz, the version on /version, the core and group discovery on
// /api and /apis, and 404 with a Status otherwise, with the response headers
// a kube-apiserver sends (a new Audit-Id each: what the gateway's HTTP/2
// connections keep of them is a share of an idle cluster's memory); every
// request counted in apiserver_request_total by path, as the apiserver labels
// its health checks (subresource="/readyz"), served on /metrics.
func newStandInHandler() http.Handler {
	flowSchema, priorityLevel := string(uuid.NewUUID()), string(uuid.NewUUID())
	reg := prometheus.NewRegistry()
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "apiserver_request_total", Help: "Requests the stand-in served, by path and code."},
		[]string{"verb", "subresource", "code"})
	reg.MustRegister(requests)
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	js := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		return b
	}
	ver := js(standInVersion)
	api := js(metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: "127.0.0.1:6443"}}})
	apis := js(metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}})
	notFound := js(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound, Message: "the stand-in member server serves only health checks and discovery"})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			metrics.ServeHTTP(w, r)
			return
		}
		code, ctype, body := http.StatusOK, "application/json", []byte(nil)
		switch r.URL.Path {
		case "/readyz", "/livez", "/healthz":
			ctype, body = "text/plain; charset=utf-8", []byte("ok")
		case "/version":
			body = ver
		case "/api":
			body = api
		case "/apis":
			body = apis
		default:
			code, body = http.StatusNotFound, notFound
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			code, body = http.StatusMethodNotAllowed, nil
		}
		path := r.URL.Path
		if code == http.StatusNotFound {
			path = "other" // a label per unknown path would grow without bound
		}
		requests.WithLabelValues(r.Method, path, fmt.Sprint(code)).Inc()
		h := w.Header()
		h.Set("Audit-Id", string(uuid.NewUUID()))
		h.Set("Cache-Control", "no-cache, private")
		h.Set("Content-Type", ctype)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Kubernetes-Pf-Flowschema-Uid", flowSchema)
		h.Set("X-Kubernetes-Pf-Prioritylevel-Uid", priorityLevel)
		w.WriteHeader(code)
		_, _ = w.Write(body)
	})
}
