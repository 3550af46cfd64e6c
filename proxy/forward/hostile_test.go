package forward_test

// Hostile input at forward.Serve: member paths that
// try to leave the member's root or the member, redirects from the member,
// oversized headers, slow and vanishing clients.
//
// The path Serve receives is, in the real server, what k8s.io/apiserver made of
// the request (RequestInfo parts, decoded): registry/upstreamcluster's
// hostile_test.go sends the same forms through a real generic apiserver. Here
// Serve gets each form as given, decoded and, where that differs, literal.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubewharf/kube-gateway/proxy/forward"
)

// hostileSeen is one request as a hostile-test server saw it.
type hostileSeen struct {
	method, host, path, requestURI, rawQuery string
	header                                   http.Header
}

// hostileSink is a server that records every request. Its handler, if set,
// answers; otherwise it answers 200 "sink".
type hostileSink struct {
	*httptest.Server
	handle func(w http.ResponseWriter, r *http.Request)

	mu   sync.Mutex
	reqs []hostileSeen
}

// newHostileSink starts a hostileSink on loopback, over TLS (HTTP/2 enabled,
// like a member apiserver) or plain HTTP (a bystander nothing may reach).
func newHostileSink(t testing.TB, useTLS bool, handle func(w http.ResponseWriter, r *http.Request)) *hostileSink {
	t.Helper()
	s := &hostileSink{handle: handle}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reqs = append(s.reqs, hostileSeen{r.Method, r.Host, r.URL.Path, r.RequestURI, r.URL.RawQuery, r.Header.Clone()})
		s.mu.Unlock()
		if s.handle != nil {
			s.handle(w, r)
			return
		}
		_, _ = io.WriteString(w, "sink")
	}))
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	if useTLS {
		s.EnableHTTP2 = true
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

func (s *hostileSink) received() []hostileSeen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hostileSeen(nil), s.reqs...)
}

func (s *hostileSink) host() string {
	return strings.TrimPrefix(strings.TrimPrefix(s.URL, "https://"), "http://")
}

func (s *hostileSink) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

// assertConfined checks that a request the member got is confined to it: the
// Host header is the member's own, and the path is rooted and holds no dot
// segment and no empty segment (a trailing slash aside) once decoded.
func assertConfined(t *testing.T, got hostileSeen, memberHost string) {
	t.Helper()
	if got.host != memberHost {
		t.Errorf("the member saw Host %q, want its own %q", got.host, memberHost)
	}
	if !strings.HasPrefix(got.path, "/") {
		t.Errorf("the member saw the unrooted path %q", got.path)
	}
	segs := strings.Split(strings.TrimSuffix(strings.TrimPrefix(got.path, "/"), "/"), "/")
	for _, seg := range segs {
		if seg == ".." || seg == "." || (seg == "" && len(segs) > 1) {
			t.Errorf("the member saw the path %q with a %q segment", got.path, seg)
		}
	}
	if strings.HasPrefix(got.requestURI, "//") || !strings.HasPrefix(got.requestURI, "/") {
		t.Errorf("the member saw the request-target %q", got.requestURI)
	}
	if u, err := url.ParseRequestURI(got.requestURI); err != nil || u.Path != got.path {
		t.Errorf("the request-target %q does not decode to the path %q (%v)", got.requestURI, got.path, err)
	}
}

// TestServeHostilePaths: a member path either is refused with 400 before
// anything is sent, or reaches the configured endpoint only, with the Host
// header of the endpoint, at exactly that path (the member decodes what the
// gateway sent to the path the gateway validated), never leaving the member's
// root. A bystander server whose address appears in the hostile paths must
// never be contacted.
func TestServeHostilePaths(t *testing.T) {
	member := newHostileSink(t, true, nil)
	bystander := newHostileSink(t, false, nil)
	c := compile(t, member.caPEM(), nil, member.URL)
	long := "/" + strings.Repeat("a", 64<<10)
	longSegments := strings.Repeat("/abcdefg", 8<<10)

	const refused = ""
	tests := []struct {
		name string
		path string // as Serve receives it
		// want is the path the member must see, or refused: 400 and nothing sent.
		want string
		why  string
	}{
		{"dot-dot", "/..", refused, "a .. segment could climb out of the path the gateway classified"},
		{"dot-dot alone without slash", "..", refused, "not rooted"},
		{"dot-dot then a name", "/../x", refused, ".. segment"},
		{"dot-dot inside", "/api/v1/../../x", refused, ".. segment"},
		{"%2e%2e decoded", "/..", refused, "the apiserver decodes %2e%2e to .. before Serve: refused like .."},
		{"%2e%2e literal", "/%2e%2e", "/%2e%2e", "if it ever arrived undecoded it is a name made of %, 2 and e: the gateway re-encodes % so the member decodes it back to the same literal name, not to .."},
		{"%2E%2E/ decoded", "/../", refused, ".. segment (the trailing slash does not help)"},
		{"%2E%2E/ literal", "/%2E%2E/", "/%2E%2E/", "a literal name, re-encoded as %252E"},
		{"mixed .%2e decoded", "/a/../b", refused, ".. segment"},
		{"%2F decoded alone", "//", refused, "decoded %2F after the proxy/ slash makes an empty segment"},
		{"%2F decoded inside", "/a//b", refused, "empty segment"},
		{"%2F literal", "/a%2Fb", "/a%2Fb", "a literal name: the member sees %2F as characters (sent as %252F), no extra segment"},
		{"%2F..%2F literal", "/a%2F..%2Fb", "/a%2F..%2Fb", "one literal segment: the member does not split on an escaped slash"},
		{"double slash", "//", refused, "empty segment"},
		{"double slash then host", "//evil.example/x", refused, "empty segment; would otherwise look like a network-path reference"},
		{"empty segment", "/a//b", refused, "empty segment"},
		{"empty segments at the end", "/a//", refused, "empty segment"},
		{"empty segment at the start", "///a", refused, "empty segment"},
		{"trailing slash", "/a/", "/a/", "one trailing slash is canonical (kubectl get --raw /api/ sends it)"},
		{"root", "/", "/", "the member's root"},
		{"empty path", "", refused, "not rooted; the Connecter turns an empty sub-path into / before Serve"},
		{"dot", "/.", refused, ". segment"},
		{"dot inside", "/a/./b", refused, ". segment"},
		{"three dots", "/...", "/...", "not a dot segment: an ordinary name"},
		{"dot-dot-semicolon", "/..;/x", "/..;/x", "not a dot segment for a Go server; reaches the member as that name"},
		{"absolute http URL", "http://evil.example/x", refused, "not rooted"},
		{"absolute https URL", "https://127.0.0.1:1/x", refused, "not rooted"},
		{"absolute URL of the bystander", "http://" + bystander.host() + "/x", refused, "not rooted"},
		{"absolute URL after the slash", "/http://" + bystander.host() + "/x", refused, "the // of the scheme is an empty segment"},
		{"absolute https URL after the slash", "/https://127.0.0.1:1/x", refused, "empty segment"},
		{"escaped absolute URL literal", "/http:%2F%2F" + bystander.host() + "%2Fx", "/http:%2F%2F" + bystander.host() + "%2Fx", "one literal segment at the member"},
		{"userinfo without slash", "@evil.example/x", refused, "not rooted"},
		{"userinfo of the bystander", "@" + bystander.host() + "/x", refused, "not rooted"},
		{"userinfo after the slash", "/@evil.example/x", "/@evil.example/x", "@ in a path is an ordinary character: the host stays the endpoint's"},
		{"userinfo short", "/@evil/x", "/@evil/x", "ordinary character"},
		{"userinfo of the bystander after the slash", "/@" + bystander.host() + "/x", "/@" + bystander.host() + "/x", "ordinary character"},
		{"question mark (from %3F)", "/a?b=c", "/a?b=c", "part of the path: sent as %3F, it does not start a query at the member"},
		{"hash (from %23)", "/a#b", "/a#b", "part of the path: sent as %23, no fragment"},
		{"backslash", `/a\b`, `/a\b`, "an ordinary character for a Go member (sent as %5C)"},
		{"backslash dot-dot", `/a\..\..\b`, `/a\..\..\b`, "one segment: Go servers do not split on backslashes"},
		{"leading backslashes", `/\\evil.example\x`, `/\\evil.example\x`, "one segment, not a network-path reference"},
		{"NUL (from %00)", "/a\x00b", "/a\x00b", "sent as %00; the member decodes it back, the path stays one segment"},
		{"NUL then dot-dot", "/a\x00/..", refused, ".. segment"},
		{"CR LF (from %0D%0A)", "/a\r\nHost: evil.example\r\n\r\nx", "/a\r\nHost: evil.example\r\n\r\nx", "escaped on the wire: no header injection, the Host stays the endpoint's"},
		{"space", "/a b", "/a b", "escaped as %20"},
		{"percent", "/100%", "/100%", "escaped as %25"},
		{"fullwidth dots", "/\uff0e\uff0e/x", "/\uff0e\uff0e/x", "not ASCII dots: a Go member does not normalize Unicode"},
		{"64 KiB name", long, long, "long but canonical: forwarded"},
		{"64 KiB of segments", longSegments, longSegments, "long but canonical: forwarded"},
		{"64 KiB then dot-dot", long + "/..", refused, ".. segment, even at the end of a long path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(member.received())
			g := newGateway(t, c, hubUser(), func(*http.Request) route { return route{tt.path, "q=1"} })
			inbound := proxyPrefix + "/hostile"
			if strings.HasSuffix(tt.path, "/") {
				inbound += "/" // as the apiserver keeps a trailing slash in both
			}
			req, _ := http.NewRequest(http.MethodGet, g.URL+inbound, nil)
			// A client-chosen Host must never reach the member.
			req.Host = bystander.host()
			resp, body := do(t, req)
			got := member.received()[before:]
			if tt.want == refused {
				if resp.StatusCode != http.StatusBadRequest {
					t.Errorf("status = %d %q, want 400 (%s)", resp.StatusCode, body, tt.why)
				}
				if errs := g.errs.all(); len(errs) != 1 || !apierrors.IsBadRequest(errs[0]) {
					t.Errorf("errors = %v, want one BadRequest", errs)
				}
				if len(got) != 0 {
					t.Errorf("the member received %+v (%s)", got, tt.why)
				}
			} else {
				if resp.StatusCode != http.StatusOK || string(body) != "sink" {
					t.Fatalf("status = %d %q, want the member's 200 (%s); errors %v", resp.StatusCode, body, tt.why, g.errs.all())
				}
				if len(got) != 1 {
					t.Fatalf("the member received %d requests, want 1", len(got))
				}
				assertConfined(t, got[0], member.host())
				if got[0].path != tt.want {
					t.Errorf("the member saw the path %q, want %q (%s)", trimForLog(got[0].path), trimForLog(tt.want), tt.why)
				}
				if got[0].rawQuery != "q=1" {
					t.Errorf("the member saw the query %q, want the client's q=1 only", got[0].rawQuery)
				}
			}
			if n := len(bystander.received()); n != 0 {
				t.Fatalf("the bystander received %d requests: %+v", n, bystander.received())
			}
		})
	}
}

func trimForLog(s string) string {
	if len(s) > 80 {
		return s[:80] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return s
}

// TestServeHostilePathUpgrade: the upgrade path (exec, attach, port-forward)
// dials by itself; it must apply the same path rules and the endpoint's host.
func TestServeHostilePathUpgrade(t *testing.T) {
	member := newHostileSink(t, true, func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
	})
	bystander := newHostileSink(t, false, nil)
	c := compile(t, member.caPEM(), nil, member.URL)
	tests := []struct {
		name, path, want string
	}{
		{name: "dot-dot", path: "/api/v1/namespaces/default/pods/p/../../x/exec"},
		{name: "empty segment", path: "/api/v1/namespaces/default/pods//p/exec"},
		{name: "absolute URL", path: "/http://" + bystander.host() + "/exec"},
		{name: "not rooted", path: "http://" + bystander.host() + "/exec"},
		{name: "userinfo: an ordinary character", path: "/@" + bystander.host() + "/exec", want: "/@" + bystander.host() + "/exec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(member.received())
			g := newGateway(t, c, hubUser(), func(*http.Request) route { return route{tt.path, ""} })
			_, _, resp := upgrade(t, g.URL, proxyPrefix+"/hostile", map[string]string{"X-Forwarded-Host": bystander.host()})
			got := member.received()[before:]
			if tt.want == "" {
				if resp.StatusCode != http.StatusBadRequest || len(got) != 0 {
					t.Errorf("status %s, member got %d requests; want 400 and nothing sent", resp.Status, len(got))
				}
			} else {
				if resp.StatusCode != http.StatusSwitchingProtocols || len(got) != 1 {
					t.Fatalf("status %s, member got %d requests; want 101 and one request", resp.Status, len(got))
				}
				assertConfined(t, got[0], member.host())
				if got[0].path != tt.want {
					t.Errorf("the member saw %q, want %q", got[0].path, tt.want)
				}
			}
			if n := len(bystander.received()); n != 0 {
				t.Fatalf("the bystander received %d requests", n)
			}
		})
	}
}

// TestServeRedirectForms: a member answering with a redirect, of any code and
// any form of Location, gets 502 to the client; the redirect is neither
// followed (the member sees exactly one request, the redirect target none) nor
// passed on (no Location reaches the client).
func TestServeRedirectForms(t *testing.T) {
	bystander := newHostileSink(t, false, nil)
	locations := map[string]string{
		"absolute":        bystander.URL + "/stolen",
		"absolute-member": "", // set below: the member itself, another path
		"relative":        "/elsewhere",
		"path-relative":   "elsewhere",
		"scheme-relative": "//" + bystander.host() + "/stolen",
	}
	member := newHostileSink(t, true, func(w http.ResponseWriter, r *http.Request) {
		var code int
		var form string
		if _, err := fmt.Sscanf(r.URL.Path, "/redirect/%d/%s", &code, &form); err != nil {
			_, _ = io.WriteString(w, "not a redirect: followed?")
			return
		}
		w.Header().Set("Location", locations[form])
		w.WriteHeader(code)
		_, _ = io.WriteString(w, "redirect body")
	})
	locations["absolute-member"] = member.URL + "/elsewhere"
	c := compile(t, member.caPEM(), nil, member.URL)
	g := newGateway(t, c, hubUser(), byPrefix)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	for _, code := range []int{301, 302, 303, 307, 308} {
		for form := range locations {
			for _, method := range []string{http.MethodGet, http.MethodPost} {
				t.Run(fmt.Sprintf("%d %s %s", code, form, method), func(t *testing.T) {
					before := len(member.received())
					ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
					defer cancel()
					path := fmt.Sprintf("/redirect/%d/%s", code, form)
					req, _ := http.NewRequestWithContext(ctx, method, g.URL+proxyPrefix+path, strings.NewReader("{}"))
					resp, err := client.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusBadGateway {
						t.Errorf("status = %d %q, want 502", resp.StatusCode, body)
					}
					if loc := resp.Header.Get("Location"); loc != "" {
						t.Errorf("the client got the member's Location %q", loc)
					}
					if strings.Contains(string(body), "redirect body") {
						t.Errorf("the client got the member's redirect body %q", body)
					}
					got := member.received()[before:]
					if len(got) != 1 || got[0].path != path {
						t.Errorf("the member received %+v, want exactly the one request to %s", got, path)
					}
					if n := len(bystander.received()); n != 0 {
						t.Fatalf("the redirect target received %d requests", n)
					}
				})
			}
		}
	}

	t.Run("302 to an upgrade request", func(t *testing.T) {
		before := len(member.received())
		for _, form := range []string{"absolute", "relative"} {
			path := "/redirect/302/" + form
			conn, _, resp := upgrade(t, g.URL, proxyPrefix+path, nil)
			body, _ := io.ReadAll(resp.Body)
			conn.Close()
			if resp.StatusCode != http.StatusBadGateway {
				t.Errorf("%s: status = %s %q, want 502", form, resp.Status, body)
			}
			if loc := resp.Header.Get("Location"); loc != "" {
				t.Errorf("%s: the client got the member's Location %q", form, loc)
			}
		}
		got := member.received()[before:]
		if len(got) != 2 || got[0].path != "/redirect/302/absolute" || got[1].path != "/redirect/302/relative" {
			t.Errorf("the member received %+v, want exactly one request per upgrade", got)
		}
		if n := len(bystander.received()); n != 0 {
			t.Fatalf("the redirect target received %d requests", n)
		}
	})
}

// TestServeOversizedHeaders: a request with more than 1 MiB of headers is
// refused by the HTTP server (431) before Serve runs: nothing reaches the
// member.
func TestServeOversizedHeaders(t *testing.T) {
	member := newHostileSink(t, true, nil)
	c := compile(t, member.caPEM(), nil, member.URL)
	g := newGateway(t, c, hubUser(), byPrefix)

	u, _ := url.Parse(g.URL)
	conn, err := net.DialTimeout("tcp", u.Host, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(testTimeout))
	var head bytes.Buffer
	fmt.Fprintf(&head, "GET %s/api/v1/pods HTTP/1.1\r\nHost: %s\r\n", proxyPrefix, u.Host)
	pad := strings.Repeat("p", 1000)
	for i := 0; head.Len() <= 1<<20+64<<10; i++ {
		fmt.Fprintf(&head, "X-Pad-%d: %s\r\n", i, pad)
	}
	head.WriteString("\r\n")
	// The server may answer and hang up before it read everything: write
	// concurrently and read the answer.
	written := make(chan struct{})
	go func() {
		defer close(written)
		_, _ = conn.Write(head.Bytes())
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	conn.Close() // ends the write if the server did not read it all
	<-written
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("status = %s, want 431", resp.Status)
	}
	if n := len(member.received()); n != 0 {
		t.Errorf("the member received %d requests", n)
	}
	if errs := g.errs.all(); len(errs) != 0 {
		t.Errorf("Serve ran: %v", errs)
	}
}

// TestServeCredentialTrailers: a client can send header fields after a chunked
// body (trailers). Credentials and identity there must not reach the member
// either: a member reading trailers would otherwise see the client's token.
func TestServeCredentialTrailers(t *testing.T) {
	type got struct{ trailer, header http.Header }
	seenCh := make(chan got, 1)
	member := newHostileSink(t, true, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		seenCh <- got{r.Trailer.Clone(), r.Header.Clone()}
		_, _ = io.WriteString(w, "ok")
	})
	c := compile(t, member.caPEM(), nil, member.URL)
	g := newGateway(t, c, hubUser(), byPrefix)
	conn, host := dialGateway(t, g)
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s/api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n", proxyPrefix, host)
	names := make([]string, 0, len(clientCredentialHeaders))
	for k := range clientCredentialHeaders {
		names = append(names, k)
	}
	fmt.Fprintf(&b, "Trailer: %s\r\n\r\n2\r\n{}\r\n0\r\n", strings.Join(names, ", "))
	for k, v := range clientCredentialHeaders {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	resp.Body.Close()
	var s got
	select {
	case s = <-seenCh:
	default:
		t.Fatalf("the member got nothing: %s", resp.Status)
	}
	for _, h := range []http.Header{s.trailer, s.header} {
		for k, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, clientToken) || strings.Contains(v, "mallory") || v == "system:masters" || v == "all" || v == "Basic Zm9vOmJhcg==" {
					t.Errorf("the member saw the client's %s: %q", k, v)
				}
			}
		}
	}
	if v := s.header.Values("Authorization"); len(v) != 1 || v[0] != "Bearer "+gatewayToken {
		t.Errorf("the member saw Authorization %q, want only the gateway's token", v)
	}
}

// watchPath is where vanishMember streams.
const watchPath = "/api/v1/namespaces/default/pods"

// vanishMember is a member whose handlers report how far a request got and
// whether its context ended.
type vanishMember struct {
	*hostileSink
	bodyBytes chan int      // every read of an upload body
	streaming chan struct{} // a stream wrote its first line
	cancelled chan string   // a request's context ended: its path
}

func newVanishMember(t *testing.T) *vanishMember {
	m := &vanishMember{bodyBytes: make(chan int, 1024), streaming: make(chan struct{}, 16), cancelled: make(chan string, 16)}
	m.hostileSink = newHostileSink(t, true, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/upload":
			buf := make([]byte, 32<<10)
			for {
				n, err := r.Body.Read(buf)
				if n > 0 {
					m.bodyBytes <- n
				}
				if err != nil {
					break
				}
			}
		case watchPath:
			_, _ = io.WriteString(w, "line 1\n")
			w.(http.Flusher).Flush()
			m.streaming <- struct{}{}
		case "/exec":
			conn, brw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(testTimeout))
			_, _ = io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
			_, _ = io.Copy(io.Discard, brw) // until the gateway hangs up
			m.cancelled <- r.URL.Path
			return
		default:
			_, _ = io.WriteString(w, "ok")
			return
		}
		select {
		case <-r.Context().Done():
			m.cancelled <- r.URL.Path
		case <-time.After(testTimeout): // bounded: never outlive the test
		}
	})
	return m
}

// waitGoroutines polls until the process runs at most baseline goroutines, and
// fails with their stacks if that does not happen before the deadline. It
// closes idle pooled connections at every poll: a connection whose last stream
// was still being torn down when first asked is idle only a moment later, and
// would otherwise wait in the pool (with its goroutines) for its idle timeout.
func waitGoroutines(t *testing.T, baseline int, closeIdle func()) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, testTimeout, true, func(context.Context) (bool, error) {
		closeIdle()
		return runtime.NumGoroutine() <= baseline, nil
	})
	if err != nil {
		var stacks bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		t.Fatalf("%d goroutines, baseline %d:\n%s", runtime.NumGoroutine(), baseline, stacks.String())
	}
}

func waitCancelled(t *testing.T, m *vanishMember, path string) {
	t.Helper()
	select {
	case got := <-m.cancelled:
		if got != path {
			t.Fatalf("the member's request to %s ended, want %s", got, path)
		}
	case <-time.After(testTimeout):
		t.Fatalf("the member's request to %s was not cancelled after the client went away", path)
	}
}

// dialGateway opens a raw connection to the gateway.
func dialGateway(t *testing.T, g *gateway) (net.Conn, string) {
	t.Helper()
	u, _ := url.Parse(g.URL)
	conn, err := net.DialTimeout("tcp", u.Host, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(testTimeout))
	return conn, u.Host
}

// TestServeVanishingClients: a client that sends its body slowly and goes away
// mid-body, a client that goes away while it reads a streaming response, and
// one that hangs up an upgraded connection end the member's request (its
// context is cancelled, or its connection closed) and leave no goroutine
// behind in the gateway (nor in the member). The member's pooled connections
// are closed at the end so that the count can return to the one before.
func TestServeVanishingClients(t *testing.T) {
	m := newVanishMember(t)
	c := compile(t, m.caPEM(), nil, m.URL)
	g := newGateway(t, c, hubUser(), byPrefix)
	endpoint := c.Endpoints[0]

	// Servers up, no connection yet: every goroutine the requests below start
	// must be gone again at the end.
	baseline := runtime.NumGoroutine()

	const rounds = 3 // more than the default unhealthy threshold
	for i := 0; i < rounds; i++ {
		t.Run(fmt.Sprintf("slow body, then gone %d", i), func(t *testing.T) {
			conn, host := dialGateway(t, g)
			const declared = 1 << 20
			if _, err := fmt.Fprintf(conn, "POST %s/upload HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n",
				proxyPrefix, host, declared); err != nil {
				t.Fatal(err)
			}
			// Slowly: a piece at a time, the next once the member got bytes, so
			// the request is in flight at the member when the client goes.
			chunk := bytes.Repeat([]byte("x"), 16<<10)
			for piece := 0; piece < 3; piece++ {
				if _, err := conn.Write(chunk); err != nil {
					t.Fatal(err)
				}
				select {
				case <-m.bodyBytes:
				case <-time.After(testTimeout):
					t.Fatalf("piece %d never reached the member: the gateway does not stream the body", piece)
				}
			}
			conn.Close()
			waitCancelled(t, m, "/upload")
		})
	}
	t.Run("streaming response, then gone", func(t *testing.T) {
		conn, host := dialGateway(t, g)
		// A watch: the gateway treats it as long-running (no retry, ended by Stop).
		if _, err := fmt.Fprintf(conn, "GET %s%s?watch=true HTTP/1.1\r\nHost: %s\r\n\r\n", proxyPrefix, watchPath, host); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("response: %v, %v", resp, err)
		}
		select {
		case <-m.streaming:
		case <-time.After(testTimeout):
			t.Fatal("the member never started the stream")
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || line != "line 1\n" {
			t.Fatalf("first line = %q, %v", line, err)
		}
		conn.Close()
		waitCancelled(t, m, watchPath)
	})
	t.Run("upgraded connection, then gone", func(t *testing.T) {
		conn, _, resp := upgrade(t, g.URL, proxyPrefix+"/exec", nil)
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %s", resp.Status)
		}
		if _, err := io.WriteString(conn, "some input\n"); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		waitCancelled(t, m, "/exec")
	})

	waitGoroutines(t, baseline, c.CloseIdleConnections)

	// A client that goes away is no failure of the member: it stays healthy.
	if !endpoint.Healthy() {
		t.Errorf("the endpoint is unhealthy after clients went away: vanishing clients count as member failures")
	}
	req, _ := http.NewRequest(http.MethodGet, g.URL+proxyPrefix+"/api", nil)
	if resp, body := do(t, req); resp.StatusCode != http.StatusOK {
		t.Errorf("after clients went away: %d %q, want the member's 200", resp.StatusCode, body)
	}
}

// FuzzServePath: whatever member path Serve is given, the answer is 400 with
// nothing sent, or the configured member gets exactly one request, with its own
// Host and exactly that path (decoded), and that path is canonical: rooted, no
// empty, . or .. segment. A non-canonical path is always refused. "{by}" in the
// input stands for the address of a bystander server that must never be
// contacted (so the corpus can aim at a live address). The seeds, one per
// hostile form, are in testdata/fuzz/FuzzServePath.
func FuzzServePath(f *testing.F) {
	member := newFuzzMember(f)
	bystander := newHostileSink(f, false, nil)
	c := compile(f, member.caPEM(), nil, member.URL)
	memberHost := member.host()

	f.Fuzz(func(t *testing.T, p string) {
		p = strings.ReplaceAll(p, "{by}", bystander.host())
		before := member.count()
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, proxyPrefix+"/hostile", nil)
		errs := &errorRecorder{}
		testForwarder.Serve(rec, req, forward.Request{Cluster: c, Path: p, RawQuery: "q=1", User: hubUser(), Errors: responseErrors{rec: errs, w: rec}})
		n, last := member.last()

		canonical := strings.HasPrefix(p, "/") && (path.Clean(p) == p || path.Clean(p)+"/" == p)
		switch {
		case rec.Code == http.StatusBadRequest:
			if n != before {
				t.Errorf("400 for %q, yet the member received a request: %+v", p, last)
			}
		case !canonical:
			t.Errorf("the non-canonical path %q was not refused: %d %q, member saw %+v", p, rec.Code, rec.Body.String(), last)
		case n != before+1:
			t.Errorf("path %q: %d %q, and the member received %d requests, want 1 (errors %v)", p, rec.Code, rec.Body.String(), n-before, errs.all())
		default:
			if rec.Code != http.StatusOK {
				t.Errorf("path %q: %d %q, want the member's 200", p, rec.Code, rec.Body.String())
			}
			assertConfined(t, last, memberHost)
			if last.path != p {
				t.Errorf("the member saw the path %q, want %q", last.path, p)
			}
		}
		if n := len(bystander.received()); n != 0 {
			t.Fatalf("path %q: the bystander received %d requests", p, n)
		}
	})
}

// fuzzMember is a TLS member that remembers only how many requests it got and
// the last one, so that long fuzzing runs in bounded memory.
type fuzzMember struct {
	*httptest.Server
	mu       sync.Mutex
	n        int
	lastSeen hostileSeen
}

func newFuzzMember(tb testing.TB) *fuzzMember {
	m := &fuzzMember{}
	m.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.n++
		m.lastSeen = hostileSeen{method: r.Method, host: r.Host, path: r.URL.Path, requestURI: r.RequestURI, rawQuery: r.URL.RawQuery}
		m.mu.Unlock()
		_, _ = io.WriteString(w, "sink")
	}))
	m.Config.ErrorLog = log.New(io.Discard, "", 0)
	m.EnableHTTP2 = true
	m.StartTLS()
	tb.Cleanup(m.Close)
	return m
}

func (m *fuzzMember) count() int { n, _ := m.last(); return n }

func (m *fuzzMember) last() (int, hostileSeen) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n, m.lastSeen
}

func (m *fuzzMember) host() string { return strings.TrimPrefix(m.URL, "https://") }

func (m *fuzzMember) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.Certificate().Raw})
}
