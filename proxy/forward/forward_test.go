package forward_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
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
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"

	"github.com/prometheus/client_golang/prometheus"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/cluster/clustertest"
	"github.com/kubewharf/kube-gateway/proxy/forward"
	"github.com/kubewharf/kube-gateway/proxy/metrics"
	"github.com/kubewharf/kube-gateway/test/testca"
)

const (
	gatewayToken = "gw-token-7d1e0c9a" // the gateway's credential toward the member
	clientToken  = "client-token-3b8f" // a credential the client sent to the hub
	clusterName  = "member-a"
	proxyPrefix  = "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-a/proxy"
	testTimeout  = 20 * time.Second
)

func hubUser() *user.DefaultInfo {
	return &user.DefaultInfo{
		Name:   "alice",
		UID:    "uid-1234",
		Groups: []string{"dev", "system:authenticated"},
		Extra: map[string][]string{
			"scopes":          {"a", "b"},
			"example.com/a b": {"v"},
		},
	}
}

// clientCredentialHeaders are what a malicious or confused client sends; none of
// it may reach the member.
var clientCredentialHeaders = map[string]string{
	"Authorization":            "Bearer " + clientToken,
	"Proxy-Authorization":      "Basic Zm9vOmJhcg==",
	"Cookie":                   "session=" + clientToken,
	"Impersonate-User":         "mallory",
	"Impersonate-Group":        "system:masters",
	"Impersonate-Uid":          "mallory-uid",
	"Impersonate-Extra-Scopes": "all",
	"X-Remote-User":            "mallory",
	"X-Remote-Group":           "system:masters",
	"X-Remote-Uid":             "mallory-uid",
	"X-Remote-Extra-Scopes":    "all",
}

// received is one request as the member saw it.
type received struct {
	method, path, rawQuery, host string
	header                       http.Header
	bodyLen                      int
	bodySum                      [32]byte
}

// member is a fake member apiserver over TLS. Its behaviour depends on the path:
//
//	/redirect/{code}  answers a redirect to another host
//	/not-modified     answers 304 without Location
//	.../stream        writes "line 1", flushes, waits for proceed, writes "line 2"
//	                  (with Content-Length ?length=N if given)
//	/exec             upgrades (101) and echoes every byte
//	/deny-exec        refuses an upgrade with 403
//	anything else     200 "ok"
type member struct {
	*httptest.Server
	caPEM   []byte
	proceed chan struct{}

	mu   sync.Mutex
	reqs []received
}

// newMember starts a member with httptest's certificate (valid for 127.0.0.1 and
// example.com), or, given DNS names, with a certificate valid only for them.
func newMember(t *testing.T, dnsNames ...string) *member {
	t.Helper()
	m := &member{proceed: make(chan struct{})}
	m.Server = httptest.NewUnstartedServer(http.HandlerFunc(m.serve))
	m.Config.ErrorLog = log.New(io.Discard, "", 0)
	if len(dnsNames) > 0 {
		var serving tls.Certificate
		m.caPEM, serving = servingCert(t, dnsNames)
		m.TLS = &tls.Config{Certificates: []tls.Certificate{serving}}
	}
	m.StartTLS()
	t.Cleanup(m.Close)
	if m.caPEM == nil {
		m.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.Certificate().Raw})
	}
	return m
}

// servingCert returns a new CA (PEM) and a serving certificate it signed for
// dnsNames only.
func servingCert(t *testing.T, dnsNames []string) ([]byte, tls.Certificate) {
	t.Helper()
	ca := testca.New(t, "member-ca")
	return ca.PEM, ca.Issue(t, testca.Spec{CommonName: dnsNames[0], Usage: x509.ExtKeyUsageServerAuth, SANs: dnsNames}).TLS(t)
}

func (m *member) serve(w http.ResponseWriter, r *http.Request) {
	rec := received{method: r.Method, path: r.URL.Path, rawQuery: r.URL.RawQuery, host: r.Host, header: r.Header.Clone()}
	if !strings.HasSuffix(r.URL.Path, "exec") {
		body, _ := io.ReadAll(r.Body)
		rec.bodyLen, rec.bodySum = len(body), sha256.Sum256(body)
	}
	m.mu.Lock()
	m.reqs = append(m.reqs, rec)
	m.mu.Unlock()

	switch {
	case strings.HasPrefix(r.URL.Path, "/redirect/"):
		var code int
		_, _ = fmt.Sscanf(strings.TrimPrefix(r.URL.Path, "/redirect/"), "%d", &code)
		http.Redirect(w, r, "https://attacker.example.com/steal", code)
	case r.URL.Path == "/not-modified":
		w.WriteHeader(http.StatusNotModified)
	case strings.HasSuffix(r.URL.Path, "/stream"):
		w.Header().Set("Content-Type", "text/plain")
		if l := r.URL.Query().Get("length"); l != "" {
			w.Header().Set("Content-Length", l)
		}
		_, _ = io.WriteString(w, "line 1\n")
		w.(http.Flusher).Flush()
		select {
		case <-m.proceed:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "line 2\n")
	case r.URL.Path == "/apiserver-headers": // as a kube-apiserver answers
		id := r.Header.Get("Audit-Id")
		if id == "" {
			id = "generated-by-the-member"
		}
		w.Header().Set("Audit-Id", id)
		w.Header().Set("Cache-Control", "no-cache, private")
		_, _ = io.WriteString(w, "ok")
	case r.URL.Path == "/deny-exec":
		http.Error(w, "exec denied by the member", http.StatusForbidden)
	case strings.HasSuffix(r.URL.Path, "/exec"):
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
		_, _ = io.Copy(conn, brw.Reader) // echo until the gateway closes
	default:
		w.Header().Set("X-Member", "yes")
		_, _ = io.WriteString(w, "ok")
	}
}

func (m *member) received() []received {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]received(nil), m.reqs...)
}

func (m *member) only(t *testing.T) received {
	t.Helper()
	got := m.received()
	if len(got) != 1 {
		t.Fatalf("the member received %d requests, want 1", len(got))
	}
	return got[0]
}

// compile builds the runtime cluster for endpoints with the gateway token and the
// member's CA.
func compile(t testing.TB, caPEM []byte, mutate func(*gatewayv1alpha1.UpstreamCluster), endpoints ...string) *cluster.Cluster {
	t.Helper()
	return clustertest.Compile(t, clusterName, gatewayToken, caPEM, mutate, endpoints...)
}

// errorRecorder is the ErrorWriter: it records errors and answers like the
// apiserver's responder, with the status code of the error.
type errorRecorder struct {
	mu   sync.Mutex
	errs []error
}

type responseErrors struct {
	rec *errorRecorder
	w   http.ResponseWriter
}

func (r responseErrors) Error(err error) {
	r.rec.mu.Lock()
	r.rec.errs = append(r.rec.errs, err)
	r.rec.mu.Unlock()
	code := http.StatusInternalServerError
	if s, ok := err.(apierrors.APIStatus); ok {
		code = int(s.Status().Code)
	}
	http.Error(r.w, err.Error(), code)
}

func (r *errorRecorder) all() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// gateway serves forward.Serve for every request, with the member path and query
// given by route (from the inbound request) and the identity user.
type gateway struct {
	*httptest.Server
	errs *errorRecorder
}

type route struct {
	path, rawQuery string
}

func newGateway(t *testing.T, c *cluster.Cluster, u user.Info, routeOf func(*http.Request) route) *gateway {
	t.Helper()
	g := &gateway{errs: &errorRecorder{}}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rt := routeOf(req)
		testForwarder.Serve(w, req, forward.Request{
			Cluster:  c,
			Path:     rt.path,
			RawQuery: rt.rawQuery,
			User:     u,
			Errors:   responseErrors{rec: g.errs, w: w},
		})
	}))
	g.Config.ErrorLog = log.New(io.Discard, "", 0)
	t.Cleanup(g.Close)
	return g
}

// byPrefix routes /apis/.../proxy/{path}?{query} to {path} and {query}, the way
// the proxy subresource does (the query untouched, dryRun included).
func byPrefix(req *http.Request) route {
	p := strings.TrimPrefix(req.URL.Path, proxyPrefix)
	if p == "" {
		p = "/"
	}
	return route{path: p, rawQuery: req.URL.RawQuery}
}

func do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(req.Context(), testTimeout)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	return resp, body
}

func assertNoToken(t *testing.T, what string, s string) {
	t.Helper()
	if strings.Contains(s, gatewayToken) {
		t.Errorf("%s reveals the gateway's token: %q", what, s)
	}
}

func TestServeIdentityHeadersPathAndQuery(t *testing.T) {
	const (
		memberPath = "/api/v1/namespaces/default/pods"
		rawQuery   = "labelSelector=a%3Db&watch=true&dryRun=All"
	)
	tests := []struct {
		name          string
		impersonation *gatewayv1alpha1.ImpersonationPolicy
		wantUser      string
		wantGroups    []string
		wantExtras    map[string][]string // escaped key -> values
	}{
		{
			name:       "hub identity as is",
			wantUser:   "alice",
			wantGroups: []string{"dev", "system:authenticated"},
			wantExtras: map[string][]string{"scopes": {"a", "b"}, "example.com%2Fa%20b": {"v"}},
		},
		{
			name: "mapped identity",
			impersonation: &gatewayv1alpha1.ImpersonationPolicy{
				UserPrefix: "hub:", GroupPrefix: "hub:",
				Groups: &gatewayv1alpha1.NameFilter{Deny: []string{"system:authenticated"}},
				Extras: &gatewayv1alpha1.NameFilter{Allow: []string{"example.com/a b"}},
			},
			wantUser:   "hub:alice",
			wantGroups: []string{"hub:dev"},
			wantExtras: map[string][]string{"example.com%2Fa%20b": {"v"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMember(t)
			c := compile(t, m.caPEM, func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.Impersonation = tt.impersonation }, m.URL)
			// The inbound URL carries the query as the generic handler sees it
			// (dryRun hidden, re-encoded); the member must get the raw one.
			g := newGateway(t, c, hubUser(), func(*http.Request) route { return route{memberPath, rawQuery} })

			req, _ := http.NewRequest(http.MethodGet, g.URL+proxyPrefix+memberPath+"?labelSelector=a%3Db&watch=true", nil)
			for k, v := range clientCredentialHeaders {
				req.Header.Set(k, v)
			}
			req.Header.Set("Accept", "application/json")
			req.Header.Set("X-Custom", "keep me")
			resp, body := do(t, req)

			if resp.StatusCode != http.StatusOK || string(body) != "ok" {
				t.Fatalf("response = %d %q, want 200 ok; errors: %v", resp.StatusCode, body, g.errs.all())
			}
			if resp.Header.Get("X-Member") != "yes" {
				t.Errorf("the member's response header was lost: %v", resp.Header)
			}
			got := m.only(t)
			if got.path != memberPath || got.rawQuery != rawQuery {
				t.Errorf("member saw %s?%s, want %s?%s", got.path, got.rawQuery, memberPath, rawQuery)
			}
			if got.host != strings.TrimPrefix(m.URL, "https://") {
				t.Errorf("member saw Host %q, want %q", got.host, strings.TrimPrefix(m.URL, "https://"))
			}
			h := got.header
			if v := h.Values("Authorization"); !reflect.DeepEqual(v, []string{"Bearer " + gatewayToken}) {
				t.Errorf("member saw Authorization %q, want only the gateway's token", v)
			}
			for _, k := range []string{"Proxy-Authorization", "Cookie"} {
				if v, ok := h[k]; ok {
					t.Errorf("member saw the client's %s: %q", k, v)
				}
			}
			for k, v := range h {
				if strings.HasPrefix(k, "X-Remote-") {
					t.Errorf("member saw %s: %q", k, v)
				}
				for _, vv := range v {
					if strings.Contains(vv, clientToken) || strings.Contains(vv, "mallory") || vv == "system:masters" {
						t.Errorf("member saw a client value in %s: %q", k, vv)
					}
				}
			}
			if v := h.Values("Impersonate-User"); !reflect.DeepEqual(v, []string{tt.wantUser}) {
				t.Errorf("Impersonate-User = %q, want %q", v, tt.wantUser)
			}
			if v := h.Values("Impersonate-Uid"); !reflect.DeepEqual(v, []string{"uid-1234"}) {
				t.Errorf("Impersonate-Uid = %q, want uid-1234", v)
			}
			if v := h.Values("Impersonate-Group"); !reflect.DeepEqual(v, tt.wantGroups) {
				t.Errorf("Impersonate-Group = %q, want %q", v, tt.wantGroups)
			}
			gotExtras := map[string][]string{}
			for k, v := range h {
				if strings.HasPrefix(k, "Impersonate-Extra-") {
					// Header names are case-insensitive; compare the escaped key
					// after unescaping, the way the member's apiserver does.
					key, err := url.PathUnescape(strings.TrimPrefix(k, "Impersonate-Extra-"))
					if err != nil {
						t.Errorf("%s: %v", k, err)
					}
					gotExtras[strings.ToLower(key)] = v
				}
			}
			wantExtras := map[string][]string{}
			for k, v := range tt.wantExtras {
				key, _ := url.PathUnescape(k)
				wantExtras[key] = v
			}
			if !reflect.DeepEqual(gotExtras, wantExtras) {
				t.Errorf("extras = %v, want %v", gotExtras, wantExtras)
			}
			for k := range tt.wantExtras {
				if h.Get("Impersonate-Extra-"+k) == "" {
					t.Errorf("no header Impersonate-Extra-%s (client-go escaping)", k)
				}
			}
			if h.Get("X-Custom") != "keep me" || h.Get("Accept") != "application/json" {
				t.Errorf("ordinary headers lost: %v", h)
			}
			if errs := g.errs.all(); len(errs) != 0 {
				t.Errorf("errors: %v", errs)
			}
		})
	}
}

// sizeHider hides the length of a body so that it is sent chunked.
type sizeHider struct{ io.Reader }

func TestServeRequestBody(t *testing.T) {
	payload := make([]byte, 1<<20)
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		method string
		body   func() io.Reader
	}{
		{name: "POST with Content-Length", method: http.MethodPost, body: func() io.Reader { return bytes.NewReader(payload) }},
		{name: "PUT chunked", method: http.MethodPut, body: func() io.Reader { return sizeHider{bytes.NewReader(payload)} }},
		{name: "PATCH with Content-Length", method: http.MethodPatch, body: func() io.Reader { return bytes.NewReader(payload) }},
	}
	m := newMember(t)
	c := compile(t, m.caPEM, nil, m.URL)
	g := newGateway(t, c, hubUser(), byPrefix)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, g.URL+proxyPrefix+"/api/v1/namespaces/default/configmaps?dryRun=All", tt.body())
			req.Header.Set("Content-Type", "application/octet-stream")
			resp, body := do(t, req)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("response = %d %q", resp.StatusCode, body)
			}
			all := m.received()
			if len(all) != i+1 {
				t.Fatalf("member received %d requests, want %d", len(all), i+1)
			}
			got := all[i]
			if got.method != tt.method || got.rawQuery != "dryRun=All" {
				t.Errorf("member saw %s ?%s", got.method, got.rawQuery)
			}
			if got.bodyLen != len(payload) || got.bodySum != sha256.Sum256(payload) {
				t.Errorf("member received %d bytes (sum %x), want %d bytes (sum %x)", got.bodyLen, got.bodySum, len(payload), sha256.Sum256(payload))
			}
		})
	}
}

func TestServeStreamsResponse(t *testing.T) {
	tests := []struct {
		name string
		path string
	}{
		// Watches and log follows are chunked: ReverseProxy flushes those anyway,
		// as it does every response without a declared length.
		{name: "chunked watch", path: "/api/v1/namespaces/default/stream?watch=true"},
		{name: "chunked, not long-running", path: "/stream"},
		// With a declared length only the long-running proxy's FlushInterval
		// makes the gateway flush before the response is complete.
		{name: "watch with a declared Content-Length", path: "/api/v1/namespaces/default/stream?watch=true&length=14"},
		{name: "log follow with a declared Content-Length", path: "/api/v1/namespaces/default/pods/p/log/stream?follow=true&length=14"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMember(t)
			c := compile(t, m.caPEM, nil, m.URL)
			g := newGateway(t, c, hubUser(), byPrefix)

			proceed := sync.OnceFunc(func() { close(m.proceed) })
			defer proceed()

			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+proxyPrefix+tt.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("GET: %v", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d", resp.StatusCode)
			}
			br := bufio.NewReader(resp.Body)

			// The member is blocked until proceed: reading line 1 now proves that
			// the gateway flushed it without waiting for more of the response.
			line, err := br.ReadString('\n')
			if err != nil || line != "line 1\n" {
				t.Fatalf("first line = %q, %v; want %q before the member writes more", line, err, "line 1\n")
			}
			proceed()
			line, err = br.ReadString('\n')
			if err != nil || line != "line 2\n" {
				t.Fatalf("second line = %q, %v", line, err)
			}
			if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
				t.Errorf("after line 2: %q, %v", rest, err)
			}
		})
	}
}

// TestServeFlushesOnlyStreams: an answer of declared length to a request that
// is not long-running is not flushed as it is copied, so that it goes out in
// one HTTP/2 DATA frame with its end of stream; answers of unknown length and
// long-running ones are flushed.
func TestServeFlushesOnlyStreams(t *testing.T) {
	m := newMember(t)
	close(m.proceed)
	c := compile(t, m.caPEM, nil, m.URL)
	for _, tt := range []struct {
		path  string
		flush bool
	}{
		{path: "/api/v1/namespaces/default/stream?length=14", flush: false},
		{path: "/api/v1/namespaces/default/stream", flush: true}, // chunked
		{path: "/api/v1/namespaces/default/stream?watch=true&length=14", flush: true},
	} {
		p, q, _ := strings.Cut(tt.path, "?")
		req := httptest.NewRequest(http.MethodGet, proxyPrefix+tt.path, nil)
		rec := httptest.NewRecorder()
		testForwarder.Serve(rec, req, forward.Request{Cluster: c, Path: p, RawQuery: q, User: hubUser(),
			Errors: responseErrors{rec: &errorRecorder{}, w: rec}})
		if rec.Code != http.StatusOK || rec.Body.String() != "line 1\nline 2\n" {
			t.Fatalf("%s: %d %q", tt.path, rec.Code, rec.Body.String())
		}
		if rec.Flushed != tt.flush {
			t.Errorf("%s: flushed %v, want %v", tt.path, rec.Flushed, tt.flush)
		}
	}
}

func TestServeRedirects(t *testing.T) {
	tests := []struct {
		path     string
		wantCode int
	}{
		{"/redirect/301", http.StatusBadGateway},
		{"/redirect/302", http.StatusBadGateway},
		{"/redirect/303", http.StatusBadGateway},
		{"/redirect/307", http.StatusBadGateway},
		{"/redirect/308", http.StatusBadGateway},
		{"/not-modified", http.StatusNotModified}, // 3xx without Location is no redirect
	}
	m := newMember(t)
	c := compile(t, m.caPEM, nil, m.URL)
	g := newGateway(t, c, hubUser(), byPrefix)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+proxyPrefix+tt.path, nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("GET: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("status = %d %q, want %d", resp.StatusCode, body, tt.wantCode)
			}
			if loc := resp.Header.Get("Location"); loc != "" {
				t.Errorf("the client got the member's Location %q", loc)
			}
			assertNoToken(t, "response body", string(body))
		})
	}
	if len(m.received()) != len(tests) {
		t.Errorf("member received %d requests, want %d", len(m.received()), len(tests))
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func assertUnavailable(t *testing.T, err error) {
	t.Helper()
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("error = %T %v, want a StatusError", err, err)
	}
	st := se.Status()
	if st.Code != http.StatusServiceUnavailable || st.Reason != metav1.StatusReasonServiceUnavailable {
		t.Errorf("code, reason = %d, %s; want 503 ServiceUnavailable (%s)", st.Code, st.Reason, st.Message)
	}
	if !strings.Contains(st.Message, `"`+clusterName+`"`) {
		t.Errorf("message %q does not name the cluster", st.Message)
	}
	if st.Details == nil || st.Details.RetryAfterSeconds <= 0 || st.Details.Name != clusterName {
		t.Errorf("details = %+v, want the cluster name and RetryAfterSeconds", st.Details)
	}
	assertNoToken(t, "error", st.Message)
}

func TestServeUnreachableServer(t *testing.T) {
	m := newMember(t)
	addr := closedAddr(t)
	c := compile(t, m.caPEM, nil, "https://"+addr)
	g := newGateway(t, c, hubUser(), byPrefix)

	for _, method := range []string{http.MethodGet, http.MethodPost} {
		t.Run(method, func(t *testing.T) {
			before := len(g.errs.all())
			req, _ := http.NewRequest(method, g.URL+proxyPrefix+"/api/v1/pods?labelSelector=secret%3Dquery", strings.NewReader("{}"))
			req.Header.Set("Authorization", "Bearer "+clientToken)
			resp, body := do(t, req)
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("status = %d %q, want 503", resp.StatusCode, body)
			}
			errs := g.errs.all()[before:]
			if len(errs) != 1 {
				t.Fatalf("errors = %v, want one", errs)
			}
			assertUnavailable(t, errs[0])
			msg := errs[0].Error()
			if !strings.Contains(msg, addr) {
				t.Errorf("message %q does not name the server %s", msg, addr)
			}
			if strings.Contains(msg, "secret%3Dquery") || strings.Contains(msg, "/api/v1/pods") {
				t.Errorf("message %q reveals the member URL", msg)
			}
			assertNoToken(t, "response body", string(body))
		})
	}
}

func TestServeRefusedRequests(t *testing.T) {
	m := newMember(t)
	c := compile(t, m.caPEM, nil, m.URL)
	noServers := compile(t, m.caPEM, func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.Servers[0].Disabled = true }, m.URL)

	tests := []struct {
		name     string
		cluster  *cluster.Cluster
		user     user.Info
		path     string
		wantCode int32
		check    func(t *testing.T, err error)
	}{
		{name: "anonymous", user: &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}, path: "/api", wantCode: http.StatusForbidden},
		{name: "nil user", user: nil, path: "/api", wantCode: http.StatusForbidden},
		{name: "user without name", user: &user.DefaultInfo{Groups: []string{"dev"}}, path: "/api", wantCode: http.StatusForbidden},
		{name: "dot-dot segment", user: hubUser(), path: "/api/../x", wantCode: http.StatusBadRequest},
		{name: "leading double slash", user: hubUser(), path: "//x", wantCode: http.StatusBadRequest},
		{name: "dot segment", user: hubUser(), path: "/a/./b", wantCode: http.StatusBadRequest},
		{name: "empty segment", user: hubUser(), path: "/api//v1", wantCode: http.StatusBadRequest},
		{name: "trailing dot-dot", user: hubUser(), path: "/api/v1/..", wantCode: http.StatusBadRequest},
		{name: "relative path", user: hubUser(), path: "api/v1", wantCode: http.StatusBadRequest},
		{name: "empty path", user: hubUser(), path: "", wantCode: http.StatusBadRequest},
		{
			name: "no enabled server", cluster: noServers, user: hubUser(), path: "/api", wantCode: http.StatusServiceUnavailable,
			check: assertUnavailable,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := c
			if tt.cluster != nil {
				cl = tt.cluster
			}
			var u user.Info
			if tt.user != nil { // keep a nil interface nil
				u = tt.user
			}
			g := newGateway(t, cl, u, func(*http.Request) route { return route{tt.path, "a=b"} })
			req, _ := http.NewRequest(http.MethodGet, g.URL+proxyPrefix+"/whatever", nil)
			resp, body := do(t, req)
			if resp.StatusCode != int(tt.wantCode) {
				t.Errorf("status = %d %q, want %d", resp.StatusCode, body, tt.wantCode)
			}
			errs := g.errs.all()
			if len(errs) != 1 {
				t.Fatalf("errors = %v, want one", errs)
			}
			if code := apierrors.APIStatus(nil); errors.As(errs[0], &code) {
				if code.Status().Code != tt.wantCode {
					t.Errorf("error code = %d, want %d", code.Status().Code, tt.wantCode)
				}
			} else {
				t.Errorf("error %T is not an APIStatus", errs[0])
			}
			if tt.check != nil {
				tt.check(t, errs[0])
			}
			assertNoToken(t, "error", errs[0].Error())
			if got := m.received(); len(got) != 0 {
				t.Errorf("the member received %d requests: %+v", len(got), got)
			}
		})
	}
}

// upgrade sends a raw HTTP/1.1 upgrade request to the gateway and returns the
// connection and a reader positioned after the response head.
func upgrade(t *testing.T, gatewayURL, target string, extraHeaders map[string]string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	u, _ := url.Parse(gatewayURL)
	conn, err := net.DialTimeout("tcp", u.Host, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(testTimeout))
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n", target, u.Host)
	for k, v := range extraHeaders {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the upgrade response: %v", err)
	}
	return conn, br, resp
}

func TestServeUpgrade(t *testing.T) {
	const (
		memberPath = "/api/v1/namespaces/default/pods/p/exec"
		rawQuery   = "command=sh&stdin=true&stdout=true&tty=true"
	)
	tests := []struct {
		name       string
		dnsNames   []string // of the member's certificate; nil: httptest's
		serverName string
	}{
		{name: "default TLS name"},
		// The certificate is not valid for 127.0.0.1: the upgrade dial must
		// verify against the overridden name, as the pooled transport does.
		{name: "serverName override", dnsNames: []string{"member.internal"}, serverName: "member.internal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMember(t, tt.dnsNames...)
			c := compile(t, m.caPEM, func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ServerName = tt.serverName }, m.URL)
			g := newGateway(t, c, hubUser(), byPrefix)

			conn, br, resp := upgrade(t, g.URL, proxyPrefix+memberPath+"?"+rawQuery, clientCredentialHeaders)
			if resp.StatusCode != http.StatusSwitchingProtocols {
				body, _ := io.ReadAll(resp.Body)
				t.Fatalf("upgrade response = %s %q, want 101; errors: %v", resp.Status, body, g.errs.all())
			}
			if !strings.EqualFold(resp.Header.Get("Upgrade"), "SPDY/3.1") {
				t.Errorf("Upgrade = %q", resp.Header.Get("Upgrade"))
			}
			for i, msg := range []string{"hello\n", "second message\n", strings.Repeat("x", 64<<10) + "\n"} {
				if _, err := io.WriteString(conn, msg); err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
				echo, err := br.ReadString('\n')
				if err != nil || echo != msg {
					t.Fatalf("echo %d = %d bytes, %v; want %d bytes", i, len(echo), err, len(msg))
				}
			}

			got := m.only(t)
			if got.path != memberPath || got.rawQuery != rawQuery {
				t.Errorf("member saw %s?%s, want %s?%s", got.path, got.rawQuery, memberPath, rawQuery)
			}
			h := got.header
			if v := h.Values("Authorization"); !reflect.DeepEqual(v, []string{"Bearer " + gatewayToken}) {
				t.Errorf("upgrade request Authorization = %q, want the gateway's token", v)
			}
			if v := h.Values("Impersonate-User"); !reflect.DeepEqual(v, []string{"alice"}) {
				t.Errorf("Impersonate-User = %q", v)
			}
			if v := h.Values("Impersonate-Group"); !reflect.DeepEqual(v, []string{"dev", "system:authenticated"}) {
				t.Errorf("Impersonate-Group = %q", v)
			}
			if v := h.Values("Impersonate-Uid"); !reflect.DeepEqual(v, []string{"uid-1234"}) {
				t.Errorf("Impersonate-Uid = %q", v)
			}
			if v := h.Values("Impersonate-Extra-Scopes"); !reflect.DeepEqual(v, []string{"a", "b"}) {
				t.Errorf("Impersonate-Extra-Scopes = %q", v)
			}
			if v := h.Values("Impersonate-Extra-example.com%2Fa%20b"); !reflect.DeepEqual(v, []string{"v"}) {
				t.Errorf("Impersonate-Extra-example.com%%2Fa%%20b = %q", v)
			}
			for k, v := range h {
				if strings.HasPrefix(k, "X-Remote-") || k == "Cookie" || k == "Proxy-Authorization" {
					t.Errorf("member saw %s: %q", k, v)
				}
			}
			if h.Get("X-Stream-Protocol-Version") != "v4.channel.k8s.io" {
				t.Errorf("X-Stream-Protocol-Version lost: %v", h)
			}
			if !strings.EqualFold(h.Get("Upgrade"), "SPDY/3.1") {
				t.Errorf("member saw Upgrade %q", h.Get("Upgrade"))
			}
		})
	}
}

// TestServeServerNameOverride checks both transports verify the member against
// spec.clientConfig.serverName, and fail without it.
func TestServeServerNameOverride(t *testing.T) {
	tests := []struct {
		name       string
		serverName string
		wantOK     bool
	}{
		{name: "override matches the certificate", serverName: "member.internal", wantOK: true},
		{name: "no override: 127.0.0.1 is not in the certificate", wantOK: false},
		{name: "override does not match", serverName: "other.internal", wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMember(t, "member.internal")
			c := compile(t, m.caPEM, func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ServerName = tt.serverName }, m.URL)
			g := newGateway(t, c, hubUser(), byPrefix)

			req, _ := http.NewRequest(http.MethodGet, g.URL+proxyPrefix+"/version", nil)
			resp, body := do(t, req)
			if got := resp.StatusCode == http.StatusOK; got != tt.wantOK {
				t.Errorf("pooled transport: status %d %q, want success %v", resp.StatusCode, body, tt.wantOK)
			}
			_, _, uresp := upgrade(t, g.URL, proxyPrefix+"/api/v1/namespaces/default/pods/p/exec", nil)
			if got := uresp.StatusCode == http.StatusSwitchingProtocols; got != tt.wantOK {
				t.Errorf("upgrade transport: status %s, want success %v (errors %v)", uresp.Status, tt.wantOK, g.errs.all())
			}
			for _, err := range g.errs.all() {
				assertNoToken(t, "error", err.Error())
			}
			if !tt.wantOK && len(m.received()) != 0 {
				t.Errorf("the member received %d requests over an unverified connection", len(m.received()))
			}
		})
	}
}

func TestServeUpgradeRefusedByMember(t *testing.T) {
	m := newMember(t)
	c := compile(t, m.caPEM, nil, m.URL)
	g := newGateway(t, c, hubUser(), byPrefix)
	_, _, resp := upgrade(t, g.URL, proxyPrefix+"/deny-exec", nil)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "exec denied by the member") {
		t.Errorf("response = %s %q, want the member's 403", resp.Status, body)
	}
	if got := m.only(t); got.header.Get("Authorization") != "Bearer "+gatewayToken {
		t.Errorf("member saw Authorization %q", got.header.Get("Authorization"))
	}
}

func TestServeUpgradeRefusedBeforeForwarding(t *testing.T) {
	m := newMember(t)
	c := compile(t, m.caPEM, nil, m.URL)
	g := newGateway(t, c, &user.DefaultInfo{Name: user.Anonymous}, byPrefix)
	_, _, resp := upgrade(t, g.URL, proxyPrefix+"/api/v1/namespaces/default/pods/p/exec", nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("status = %s, want 403", resp.Status)
	}
	if n := len(m.received()); n != 0 {
		t.Errorf("the member received %d requests", n)
	}
}

func TestServeUpgradeUnreachableServer(t *testing.T) {
	m := newMember(t)
	c := compile(t, m.caPEM, nil, "https://"+closedAddr(t))
	g := newGateway(t, c, hubUser(), byPrefix)
	_, _, resp := upgrade(t, g.URL, proxyPrefix+"/api/v1/namespaces/default/pods/p/exec", nil)
	body, _ := io.ReadAll(resp.Body)
	errs := g.errs.all()
	if len(errs) != 1 {
		t.Fatalf("errors = %v, want one (response %s %q)", errs, resp.Status, body)
	}
	assertNoToken(t, "error", errs[0].Error())
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status = %s %q, want 503", resp.Status, body)
	}
	assertUnavailable(t, errs[0])
}

// A server whose egress proxy cannot be reached is reported as such on both
// paths: UpgradeAwareHandler reports the upgrade's failed dial as text only,
// and the proxy's typed error must survive it.
func TestServeEgressProxyUnreachable(t *testing.T) {
	m := newMember(t)
	proxyAddr := closedAddr(t)
	c := compile(t, m.caPEM, func(uc *gatewayv1alpha1.UpstreamCluster) {
		uc.Spec.ClientConfig.ProxyURL = "http://" + proxyAddr
	}, m.URL)
	g := newGateway(t, c, hubUser(), byPrefix)
	check := func(t *testing.T, before, code int, body []byte) {
		t.Helper()
		errs := g.errs.all()[before:]
		if code != http.StatusServiceUnavailable || len(errs) != 1 {
			t.Fatalf("status %d %q, errors %v; want 503 and one error", code, body, errs)
		}
		assertUnavailable(t, errs[0])
		if msg := errs[0].Error(); !strings.Contains(msg, "through its egress proxy") || !strings.Contains(msg, proxyAddr) {
			t.Errorf("message %q does not blame the egress proxy %s", msg, proxyAddr)
		}
	}
	t.Run("get", func(t *testing.T) {
		before := len(g.errs.all())
		req, _ := http.NewRequest(http.MethodGet, g.URL+proxyPrefix+"/api/v1/pods", nil)
		resp, body := do(t, req)
		check(t, before, resp.StatusCode, body)
	})
	t.Run("upgrade", func(t *testing.T) {
		before := len(g.errs.all())
		_, _, resp := upgrade(t, g.URL, proxyPrefix+"/api/v1/namespaces/default/pods/p/exec", nil)
		body, _ := io.ReadAll(resp.Body)
		check(t, before, resp.StatusCode, body)
	})
}

// TestServeConnectionHeaderCannotDropImpersonation: a client naming headers in
// Connection makes a reverse proxy drop them as hop-by-hop. The impersonation
// headers the gateway sets must survive that: without them the member would run
// the request as the gateway itself.
func TestServeConnectionHeaderCannotDropImpersonation(t *testing.T) {
	m := newMember(t)
	c := compile(t, m.caPEM, nil, m.URL)
	g := newGateway(t, c, hubUser(), byPrefix)

	u, _ := url.Parse(g.URL)
	conn, err := net.DialTimeout("tcp", u.Host, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(testTimeout))
	_, err = fmt.Fprintf(conn, "GET %s/api/v1/secrets HTTP/1.1\r\nHost: %s\r\n"+
		"Connection: Impersonate-User, Impersonate-Group, Impersonate-Uid, Impersonate-Extra-Scopes, Impersonate-Extra-Example.com%%2fa%%20b\r\n\r\n",
		proxyPrefix, u.Host)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	resp.Body.Close()

	got := m.received()
	if len(got) == 0 {
		return // refused before reaching the member: safe
	}
	h := got[0].header
	if v := h.Values("Impersonate-User"); !reflect.DeepEqual(v, []string{"alice"}) {
		t.Errorf("Impersonate-User = %q, want [alice]", v)
	}
	if v := h.Values("Impersonate-Group"); !reflect.DeepEqual(v, []string{"dev", "system:authenticated"}) {
		t.Errorf("Impersonate-Group = %q", v)
	}
}

// testMetrics records the proxied requests of these tests; never registered.
var testMetrics = metrics.New()

// testForwarder serves the gateways of these tests, except TestStopEndsStreams.
var testForwarder = forward.NewForwarder(testMetrics)

// A policy's flow-control schema admits or refuses before anything reaches the
// member; a refusal is 429 with a Status naming the cluster, the policy and the
// schema, with Retry-After, and is counted as a rejection.
func TestServeFlowControl(t *testing.T) {
	m := newMember(t)
	c := compile(t, m.caPEM, func(uc *gatewayv1alpha1.UpstreamCluster) {
		uc.Spec.FlowControl = &gatewayv1alpha1.FlowControl{FlowControlSchemas: []gatewayv1alpha1.FlowControlSchema{
			{Name: "one", TokenBucket: &gatewayv1alpha1.TokenBucketFlowControl{QPS: resource.MustParse("1"), Burst: 1}},
		}}
		uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{
			Name:                  "pods",
			Rules:                 []gatewayv1alpha1.DispatchPolicyRule{{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"pods"}}},
			Strategy:              gatewayv1alpha1.RoundRobin,
			FlowControlSchemaName: "one",
		}}
	}, m.URL)
	g := newGateway(t, c, hubUser(), byPrefix)
	// testMetrics is shared by the package's tests (and by runs of -count).
	reg := prometheus.NewPedanticRegistry()
	if err := testMetrics.Register(reg); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"cluster": "member-a", "door": "hub", "policy": "pods", "reason": "TokenBucket", "schema": "one"}
	before := counterValue(t, reg, "kube_gateway_proxy_rejected_requests_total", labels)
	get := func(path string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, g.URL+proxyPrefix+path, nil)
		resp, _ := do(t, req)
		return resp
	}
	if resp := get("/api/v1/pods"); resp.StatusCode != http.StatusOK {
		t.Fatalf("first list: %s", resp.Status)
	}
	resp := get("/api/v1/pods")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second list within the second: %s, want 429", resp.Status)
	}
	errs := g.errs.all()
	if len(errs) != 1 {
		t.Fatalf("errors: %v", errs)
	}
	status := errs[0].(apierrors.APIStatus).Status()
	for _, want := range []string{`"member-a"`, `"one"`, `"pods"`} {
		if !strings.Contains(status.Message, want) {
			t.Errorf("429 message %q does not name %s", status.Message, want)
		}
	}
	if status.Details == nil || status.Details.RetryAfterSeconds != 1 {
		t.Errorf("429 details: %+v, want RetryAfterSeconds 1", status.Details)
	}
	if got := len(m.received()); got != 1 {
		t.Errorf("member received %d requests, want only the admitted one", got)
	}
	// Requests of no policy are not limited.
	for i := 0; i < 3; i++ {
		if resp := get("/api/v1/namespaces"); resp.StatusCode != http.StatusOK {
			t.Fatalf("unlimited request %d: %s", i, resp.Status)
		}
	}
	if got := counterValue(t, reg, "kube_gateway_proxy_rejected_requests_total", labels) - before; got != 1 {
		t.Errorf("rejections counted for %v: %v, want 1", labels, got)
	}
}

// counterValue is the value of the series of counter name with exactly labels.
func counterValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// An idempotent request whose server cannot be reached is tried once more on
// another server; a request that may have had effects is not.
func TestServeRetriesIdempotentRequestsElsewhere(t *testing.T) {
	m := newMember(t)
	dead := "https://" + closedAddr(t)
	// Round robin starts with the dead server.
	c := compile(t, m.caPEM, nil, dead, m.URL)
	g := newGateway(t, c, hubUser(), byPrefix)

	req, _ := http.NewRequest(http.MethodGet, g.URL+proxyPrefix+"/api/v1/pods", nil)
	if resp, body := do(t, req); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET with the first server dead: %d %s", resp.StatusCode, body)
	}
	if n := len(m.received()); n != 1 {
		t.Fatalf("the live server got %d requests, want 1", n)
	}
	if errs := g.errs.all(); len(errs) != 0 {
		t.Fatalf("a retried request reported errors: %v", errs)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := testMetrics.Register(reg); err != nil {
		t.Fatal(err)
	}
	retries := map[string]string{"cluster": "member-a", "endpoint": dead}
	if got := counterValue(t, reg, "kube_gateway_proxy_retries_total", retries); got != 1 {
		t.Errorf("retries counted for %v: %v, want 1", retries, got)
	}

	// The refused connection took the dead server out: the next GET goes to
	// the live one without a retry.
	if resp, body := do(t, req); resp.StatusCode != http.StatusOK {
		t.Fatalf("second GET with the first server dead: %d %s", resp.StatusCode, body)
	}
	if got := counterValue(t, reg, "kube_gateway_proxy_retries_total", retries); got != 1 {
		t.Errorf("retries counted for %v after a second GET: %v, want still 1 (the dead server is out)", retries, got)
	}

	// A POST that round robin sends to the dead server (a gateway that has
	// not seen it fail yet) fails: it is not retried.
	g = newGateway(t, compile(t, m.caPEM, nil, dead, m.URL), hubUser(), byPrefix)
	req, _ = http.NewRequest(http.MethodPost, g.URL+proxyPrefix+"/api/v1/namespaces/default/configmaps", strings.NewReader("{}"))
	if resp, body := do(t, req); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("POST to a dead server: %d %s, want 503 (no retry)", resp.StatusCode, body)
	}
	if got := counterValue(t, reg, "kube_gateway_proxy_retries_total", retries); got != 1 {
		t.Errorf("retries counted for %v after the POST: %v, want still 1", retries, got)
	}
}

// Stop ends proxied long-running requests (a gateway shutting down must not be
// held by watches), and leaves other requests alone.
func TestStopEndsStreams(t *testing.T) {
	c, memberDone := watchMember(t)
	f := forward.NewForwarder(metrics.New())
	gw := forwarderServer(t, f, c, nil)

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, gw.URL+proxyPrefix+"/api/v1/pods?watch=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewReader(resp.Body)
	if _, err := lines.ReadString('\n'); err != nil {
		t.Fatalf("first event: %v", err)
	}
	f.Stop()
	if rest, err := io.ReadAll(lines); err != nil || len(rest) != 0 {
		t.Fatalf("after Stop the stream should end cleanly: %q, %v", rest, err)
	}
	select {
	case <-memberDone:
	case <-ctx.Done():
		t.Fatal("the member's request was not ended")
	}
}

// After Stop, a new watch is refused with 429 and Retry-After, which client-go
// retries by itself (served, it would end at once, and a reflector takes a
// watch that ends at once for an error); a GET is still served.
func TestStopRefusesNewStreams(t *testing.T) {
	m := newMember(t)
	c := compile(t, m.caPEM, nil, m.URL)
	f := forward.NewForwarder(metrics.New())
	errs := &errorRecorder{}
	gw := forwarderServer(t, f, c, errs)
	f.Stop()

	req, _ := http.NewRequest(http.MethodGet, gw.URL+proxyPrefix+"/api/v1/pods?watch=true", nil)
	resp, _ := do(t, req)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a watch after Stop: %s, want 429", resp.Status)
	}
	all := errs.all()
	if len(all) != 1 || !strings.Contains(all[0].Error(), "shutting down") {
		t.Fatalf("refusals: %v, want one that says the replica is shutting down", all)
	}
	if d := all[0].(apierrors.APIStatus).Status().Details; d == nil || d.RetryAfterSeconds != 1 {
		t.Errorf("the refusal's details %+v, want RetryAfterSeconds 1", d)
	}
	req, _ = http.NewRequest(http.MethodGet, gw.URL+proxyPrefix+"/api/v1/pods", nil)
	if resp, _ := do(t, req); resp.StatusCode != http.StatusOK {
		t.Fatalf("a GET after Stop: %s, want 200", resp.Status)
	}
}

// With an Authorizer (--authorize-proxy-subpath), the inner request itself must
// be allowed for the hub user, with its real verb: list stays list.
func TestServeAuthorizesTheInnerRequest(t *testing.T) {
	m := newMember(t)
	c := compile(t, m.caPEM, nil, m.URL)
	var asked []authorizer.Attributes
	var mu sync.Mutex
	f := forward.NewForwarder(metrics.New())
	f.Authorizer = authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		mu.Lock()
		asked = append(asked, a)
		mu.Unlock()
		if a.GetUser().GetName() == "alice" && a.GetVerb() == "list" && a.GetResource() == "pods" && a.GetNamespace() == "team" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "no RBAC rule", nil
	})
	errs := &errorRecorder{}
	gw := forwarderServer(t, f, c, errs)

	get := func(path string) int {
		req, _ := http.NewRequest(http.MethodGet, gw.URL+proxyPrefix+path, nil)
		resp, _ := do(t, req)
		return resp.StatusCode
	}
	if code := get("/api/v1/namespaces/team/pods"); code != http.StatusOK {
		t.Fatalf("allowed list: %d", code)
	}
	if code := get("/api/v1/namespaces/team/pods/p1"); code != http.StatusForbidden {
		t.Fatalf("get of a pod the hub does not allow: %d, want 403", code)
	}
	if code := get("/api/v1/namespaces/team/pods?watch=true"); code != http.StatusForbidden {
		t.Fatalf("watch the hub does not allow: %d, want 403", code)
	}
	if n := len(m.received()); n != 1 {
		t.Fatalf("the member got %d requests, want only the allowed one", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 3 || asked[2].GetVerb() != "watch" || asked[1].GetName() != "p1" || !asked[0].IsResourceRequest() {
		t.Fatalf("asked the hub about %v", asked)
	}
	status := errs.all()[0].(apierrors.APIStatus).Status()
	if status.Code != http.StatusForbidden || !strings.Contains(status.Message, `"member-a"`) || !strings.Contains(status.Message, "no RBAC rule") {
		t.Fatalf("403 status: %+v", status)
	}
}

// Requests that failed on the way are counted with the status the client got.
func TestServeCountsFailuresWithTheirCode(t *testing.T) {
	m := newMember(t)
	c := compile(t, m.caPEM, nil, "https://"+closedAddr(t))
	reg := prometheus.NewPedanticRegistry()
	met := metrics.New()
	if err := met.Register(reg); err != nil {
		t.Fatal(err)
	}
	f := forward.NewForwarder(met)
	gw := forwarderServer(t, f, c, nil)
	req, _ := http.NewRequest(http.MethodGet, gw.URL+proxyPrefix+"/api/v1/pods", nil)
	if resp, _ := do(t, req); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", resp.StatusCode)
	}
	labels := map[string]string{"cluster": "member-a", "door": "hub", "policy": "", "schema": "", "verb": "list", "resource": "pods", "code": "503"}
	if got := counterValue(t, reg, "kube_gateway_proxy_requests_total", labels); got != 1 {
		t.Fatalf("requests counted with %v: %v, want 1", labels, got)
	}
}

// TestServePropagatesTraceContext: with tracing on (a span in the request's
// context, as the tracing filter leaves it), the member gets the gateway's
// trace context instead of the client's; without, the client's header passes.
func TestServePropagatesTraceContext(t *testing.T) {
	const clientParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	gatewaySpan := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
	})
	for name, tt := range map[string]struct {
		span trace.SpanContext
		want string
	}{
		"tracing on":  {gatewaySpan, "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"},
		"tracing off": {trace.SpanContext{}, clientParent},
	} {
		t.Run(name, func(t *testing.T) {
			m := newMember(t)
			c := compile(t, m.caPEM, nil, m.URL)
			g := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				if tt.span.IsValid() {
					req = req.WithContext(trace.ContextWithSpanContext(req.Context(), tt.span))
				}
				rt := byPrefix(req)
				testForwarder.Serve(w, req, forward.Request{Cluster: c, Path: rt.path, RawQuery: rt.rawQuery, User: hubUser(),
					Errors: responseErrors{rec: &errorRecorder{}, w: w}})
			}))
			defer g.Close()
			req, _ := http.NewRequest(http.MethodGet, g.URL+proxyPrefix+"/api", nil)
			req.Header.Set("Traceparent", clientParent)
			if resp, body := do(t, req); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if got := m.only(t).header.Get("Traceparent"); got != tt.want {
				t.Errorf("member got traceparent %q, want %q", got, tt.want)
			}
		})
	}
}

// The member's audit sees the client's address chain and the hub's, as behind
// any proxy of the apiserver; the gateway's own host and scheme are not added.
func TestServeForwardedFor(t *testing.T) {
	m := newMember(t)
	c := compile(t, m.caPEM, nil, m.URL)
	g := newGateway(t, c, hubUser(), byPrefix)
	req, _ := http.NewRequest(http.MethodGet, g.URL+proxyPrefix+"/api", nil)
	req.Header.Set("X-Forwarded-For", "192.0.2.7")
	req.Header.Set("X-Forwarded-Host", "bystander.example.com")
	if resp, body := do(t, req); resp.StatusCode != http.StatusOK {
		t.Fatalf("response = %d %q", resp.StatusCode, body)
	}
	h := m.only(t).header
	if got := h.Get("X-Forwarded-For"); got != "192.0.2.7, 127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want the client's chain and the hub's address", got)
	}
	for _, k := range []string{"X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"} {
		if v, ok := h[k]; ok {
			t.Errorf("member saw %s: %q", k, v)
		}
	}
}

// A client that closes its watch is normal operation: the forwarded request
// ends, and the handler returns without aborting (an aborted handler is logged
// as an error by the apiserver's panic recovery).
func TestServeClientGoneEndsWithoutAbort(t *testing.T) {
	c, memberDone := watchMember(t)
	aborted := make(chan any, 1)
	handlerDone := make(chan struct{})
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		defer close(handlerDone)
		defer func() {
			if p := recover(); p != nil {
				aborted <- p
			}
		}()
		rt := byPrefix(req)
		testForwarder.Serve(w, req, forward.Request{Cluster: c, Path: rt.path, RawQuery: rt.rawQuery, User: hubUser(), Errors: responseErrors{rec: &errorRecorder{}, w: w}})
	}))
	t.Cleanup(gw.Close)

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, gw.URL+proxyPrefix+"/api/v1/pods?watch=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatalf("first event: %v", err)
	}
	cancel() // the client closes its watch
	_ = resp.Body.Close()
	for _, done := range []chan struct{}{memberDone, handlerDone} {
		select {
		case <-done:
		case <-time.After(testTimeout):
			t.Fatal("the watch did not end after its client went away")
		}
	}
	select {
	case p := <-aborted:
		t.Fatalf("the handler aborted (%v) after its client went away", p)
	default:
	}
}

// watchMember starts a member that answers every request like a watch: one
// event, then open until the request ends, which closes done. It returns the
// compiled cluster of that member.
func watchMember(t *testing.T) (c *cluster.Cluster, done chan struct{}) {
	t.Helper()
	done = make(chan struct{})
	member := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"type":"ADDED"}` + "\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(done)
	}))
	t.Cleanup(member.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: member.Certificate().Raw})
	return compile(t, caPEM, nil, member.URL), done
}

// forwarderServer serves f over cluster c as the hub user through an httptest
// server, recording Status errors into errs (nil: a recorder of its own).
func forwarderServer(t *testing.T, f *forward.Forwarder, c *cluster.Cluster, errs *errorRecorder) *httptest.Server {
	t.Helper()
	if errs == nil {
		errs = &errorRecorder{}
	}
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rt := byPrefix(req)
		f.Serve(w, req, forward.Request{Cluster: c, Path: rt.path, RawQuery: rt.rawQuery, User: hubUser(), Errors: responseErrors{rec: errs, w: w}})
	}))
	t.Cleanup(gw.Close)
	return gw
}

// Behind the apiserver's filters, which set Audit-ID and Cache-Control on
// every response, the client gets Cache-Control once (the member's when it
// sends it) and an Audit-ID it sent once (the member receives it and answers
// with it); an ID the gateway made is not passed on, so the client then gets
// the gateway's and the member's.
func TestServeResponseHeadersOnce(t *testing.T) {
	m := newMember(t)
	c := compile(t, m.caPEM, nil, m.URL)
	errs := &errorRecorder{}
	serve := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rt := byPrefix(req)
		testForwarder.Serve(w, req, forward.Request{Cluster: c, Path: rt.path, User: hubUser(), Errors: responseErrors{rec: errs, w: w}})
	}))
	g := httptest.NewServer(genericapifilters.WithAuditInit(genericapifilters.WithCacheControl(serve)))
	t.Cleanup(g.Close)

	for _, tc := range []struct {
		path          string
		memberAnswers bool // with Audit-ID and Cache-Control, as a kube-apiserver does
	}{
		{"/apiserver-headers", true},
		{"/plain", false},
		{"/redirect/302", false},
	} {
		for _, sent := range []string{"", "id-from-the-client"} {
			req, _ := http.NewRequest(http.MethodGet, g.URL+proxyPrefix+tc.path, nil)
			if sent != "" {
				req.Header.Set("Audit-Id", sent)
			}
			resp, _ := do(t, req)
			reqs := m.received()
			if got := reqs[len(reqs)-1].header.Get("Audit-Id"); got != sent {
				t.Errorf("GET %s: the member received Audit-Id %q, want %q", tc.path, got, sent)
			}
			ids := resp.Header.Values("Audit-Id")
			switch {
			case sent != "":
				if len(ids) != 1 || ids[0] != sent {
					t.Errorf("GET %s: Audit-Id %q, want the client's [%s]", tc.path, ids, sent)
				}
			case tc.memberAnswers:
				if len(ids) != 2 || ids[0] == "" || ids[1] != "generated-by-the-member" {
					t.Errorf("GET %s: Audit-Id %q, want the gateway's and the member's", tc.path, ids)
				}
			default:
				if len(ids) != 1 || ids[0] == "" {
					t.Errorf("GET %s: Audit-Id %q, want the gateway's", tc.path, ids)
				}
			}
			if got := resp.Header.Values("Cache-Control"); len(got) != 1 || got[0] != "no-cache, private" {
				t.Errorf("GET %s: Cache-Control %q, want [no-cache, private]", tc.path, got)
			}
		}
	}
}
