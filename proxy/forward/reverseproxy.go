package forward

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/klog/v2"

	"github.com/kubewharf/kube-gateway/proxy/impersonate"
)

// Sizes of the pooled copy buffers. A long-running response (a watch, a log
// stream) holds its buffer for its whole life while it mostly waits for the
// next event, so it gets a small one; other responses get what io.Copy uses.
const (
	shortBufferSize       = 32 << 10
	longRunningBufferSize = 4 << 10
)

// reverseProxy carries plain and streaming requests to the server of the
// attempt in the request's context. It is configured once per Forwarder: the
// per-request state (server, transports, error handling) travels with the
// request, so nothing is built per request but the outbound copy.
type reverseProxy struct {
	proxy httputil.ReverseProxy
	// stopping, when set, ends responses cleanly once it is done.
	stopping context.Context
	// headers sets the impersonation headers.
	headers *impersonate.Headers
}

// newReverseProxy returns a reverseProxy copying responses through pooled
// buffers of bufferSize; with flushEachWrite, every write is flushed.
//
// Long-running responses (watch events, log lines, what a pod's or service's
// proxy sends) must not wait in a buffer: they are flushed as the member
// writes, declared length or not. Other responses are flushed by
// httputil.ReverseProxy only when their length is not declared (lists are
// streamed, never buffered whole): a GET's answer then goes out in one HTTP/2
// DATA frame with its end of stream, not in a frame flushed and an empty one
// to end it: one wait for the connection's writer, one system call and a
// frame fewer per request (docs/benchmark.md).
func newReverseProxy(bufferSize int, flushEachWrite bool, stopping context.Context, headers *impersonate.Headers) *reverseProxy {
	rp := &reverseProxy{stopping: stopping, headers: headers}
	var flushInterval time.Duration
	if flushEachWrite {
		flushInterval = -1
	}
	rp.proxy = httputil.ReverseProxy{
		Rewrite:        rp.rewrite,
		Transport:      rp,
		FlushInterval:  flushInterval,
		BufferPool:     newBufferPool(bufferSize),
		ModifyResponse: modifyResponse,
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			attemptFrom(req.Context()).Error(w, req, err)
		},
		ErrorLog: klog.NewStandardLogger("INFO"),
	}
	return rp
}

func (rp *reverseProxy) serve(w http.ResponseWriter, req *http.Request, a *attempt) {
	// One copy of the request carries the attempt and, with a header
	// timeout, the context that cancels the request to the server.
	a.client = req.Context()
	a.response = w.Header()
	ctx := context.WithValue(a.client, attemptKey{}, a)
	if a.headerTimeout > 0 {
		ctx, a.cancel = context.WithCancel(ctx)
		defer a.cancel()
	}
	rp.proxy.ServeHTTP(w, req.WithContext(ctx))
}

// rewrite turns the reverse proxy's copy of the client's request (hop-by-hop
// and X-Forwarded-* headers already removed) into the request to the server:
// its address, the member path and the client's raw query, no client
// credential, the gateway's credential and the identity to impersonate. The
// headers are set here, after the hop-by-hop headers went: a client naming
// Impersonate-User in its Connection header cannot make them disappear.
func (rp *reverseProxy) rewrite(pr *httputil.ProxyRequest) {
	a := attemptFrom(pr.Out.Context())
	pr.Out.URL = &url.URL{Scheme: a.endpoint.URL.Scheme, Host: a.endpoint.URL.Host, Path: a.path, RawQuery: a.rawQuery}
	pr.Out.Host = "" // the server's address, not the gateway's
	impersonate.StripInbound(pr.Out.Header)
	// Trailers could carry credentials too; members have no use for a client's.
	pr.Out.Trailer = nil
	// The member's audit sees the client's address chain and the hub's, as it
	// would behind any proxy of the apiserver.
	pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
	pr.SetXForwarded()
	pr.Out.Header.Del("X-Forwarded-Host")
	pr.Out.Header.Del("X-Forwarded-Proto")
	if _, ok := pr.Out.Header["User-Agent"]; !ok {
		pr.Out.Header["User-Agent"] = []string{""} // not Go's default
	}
	withTraceContext(pr.Out.Context(), pr.Out.Header)
	// The identity's headers; without an identity the request stays without
	// them, and RoundTrip refuses it.
	if out, err := rp.headers.Apply(pr.Out, a.identity); err == nil {
		pr.Out = out
	}
	a.endpoint.Transports.Authorize(pr.Out.Header)
}

// RoundTrip sends the request over the pooled connections of the attempt's
// server; rewrite has set the gateway's credential and the identity. With a
// header timeout, the request's context is cancelled when the headers do not
// come in time; once they came, only when the body is closed.
func (rp *reverseProxy) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Impersonate-User") == "" {
		return nil, impersonate.ErrNoIdentity
	}
	a := attemptFrom(req.Context())
	client := a.client
	var timer *time.Timer
	cancel := context.CancelFunc(noop)
	if a.cancel != nil { // a header timeout
		cancel = a.cancel
		timer = time.AfterFunc(a.headerTimeout, cancel)
	}
	resp, err := a.endpoint.Transports.Pooled.RoundTrip(req)
	if timer != nil && !timer.Stop() && client.Err() == nil { // the timer cancelled the request
		if err == nil {
			_ = resp.Body.Close()
		}
		return nil, &headerTimeoutError{after: a.headerTimeout}
	}
	if err != nil {
		cancel()
		return nil, err
	}
	if a.retryable || a.retryBroken {
		if resp.Body, err = rp.peek(client, resp); err != nil {
			cancel()
			return nil, err
		}
	}
	resp.Body = newBody(client, resp.Body, rp.stopping, cancel, a.bodyFailed)
	return resp, nil
}

// peek reads the start of the body of a response whose request may still be
// retried before the response is passed on, and returns the body to pass on
// in its place: all of it when its declared length fits a copy buffer (a
// GET's object), else what its first read returns, which does not hold back
// a streamed list. A connection that breaks in that time (what carried it, a
// konnectivity server or an egress proxy, went away after the headers came)
// then fails the attempt while nothing was sent to the client, and the
// request is tried again; a break later in a longer body still aborts the
// response.
func (rp *reverseProxy) peek(client context.Context, resp *http.Response) (io.ReadCloser, error) {
	if resp.Body == http.NoBody || resp.ContentLength == 0 {
		return resp.Body, nil
	}
	pool := rp.proxy.BufferPool
	buf := pool.Get()
	whole := resp.ContentLength > 0 && resp.ContentLength <= int64(len(buf))
	n, err := resp.Body.Read(buf)
	for whole && err == nil && n < len(buf) {
		var m int
		m, err = resp.Body.Read(buf[n:])
		n += m
	}
	if err != nil && err != io.EOF {
		pool.Put(buf)
		_ = resp.Body.Close()
		if client.Err() != nil {
			return nil, client.Err() // the client went away; not the server's failure
		}
		return nil, err
	}
	return &peeked{pool: pool, buf: buf, unread: buf[:n], rest: resp.Body, ended: err == io.EOF}, nil
}

// peeked is a response body whose start was read ahead (reverseProxy.peek):
// it returns unread, then the rest. The buffer goes back to the pool on Close,
// which is safe because a peeked body is not long-running: nothing closes it
// while it is read (see body).
type peeked struct {
	pool   httputil.BufferPool
	buf    []byte // nil once closed
	unread []byte
	rest   io.ReadCloser
	ended  bool // rest is at its end
}

func (p *peeked) Read(b []byte) (int, error) {
	if len(p.unread) > 0 {
		n := copy(b, p.unread)
		p.unread = p.unread[n:]
		return n, nil
	}
	if p.ended {
		return 0, io.EOF
	}
	return p.rest.Read(b)
}

func (p *peeked) Close() error {
	if p.buf != nil {
		p.pool.Put(p.buf)
		p.buf, p.unread = nil, nil
	}
	return p.rest.Close()
}

// Canonical keys of the headers the gateway's chain sets on every response.
var (
	auditIDHeader      = textproto.CanonicalMIMEHeaderKey(auditinternal.HeaderAuditID)
	cacheControlHeader = textproto.CanonicalMIMEHeaderKey("Cache-Control")
)

// modifyResponse refuses a redirect of the member, and keeps the client's
// response from naming Cache-Control, or the same Audit-ID, twice: the reverse
// proxy adds the member's headers to those the gateway's chain already set,
// and the hub's front proxy adds them to its own (see Request.ViaHub).
// The member's Cache-Control replaces the gateway's; an Audit-ID is the same
// when the client sent one (the hub sends its own), which the gateway passes
// on. The gateway does not pass on an ID it made itself: a new header value
// on every request would churn the HPACK table of the member connection that
// all requests share (docs/benchmark.md), so a client of the gateway alone
// that sent no ID gets both, the gateway's and the member's.
func modifyResponse(resp *http.Response) error {
	refuseRedirect(resp)
	a := attemptFrom(resp.Request.Context())
	if a.viaHub {
		DropHubHeaders(resp.Header)
		return nil
	}
	if _, ok := resp.Header[cacheControlHeader]; ok {
		delete(a.response, cacheControlHeader)
	}
	if ids, ok := resp.Header[auditIDHeader]; ok && slices.Equal(ids, a.response[auditIDHeader]) {
		delete(a.response, auditIDHeader)
	}
	return nil
}

// DropHubHeaders removes from h, the header of a response that the hub's
// front proxy passes on, what the hub sets on its own response: a second
// copy would reach the client.
func DropHubHeaders(h http.Header) {
	delete(h, cacheControlHeader)
	delete(h, auditIDHeader)
}

// refuseRedirect replaces a redirect of the member by a 502: following it, or
// letting the client follow it, could send the request elsewhere.
func refuseRedirect(resp *http.Response) {
	if resp.StatusCode < 300 || resp.StatusCode > 399 || resp.Header.Get("Location") == "" {
		return
	}
	_ = resp.Body.Close()
	const msg = "the backend attempted to redirect this request, which is not permitted"
	*resp = http.Response{
		StatusCode:    http.StatusBadGateway,
		Status:        fmt.Sprintf("%d %s", http.StatusBadGateway, http.StatusText(http.StatusBadGateway)),
		Header:        http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		Body:          io.NopCloser(strings.NewReader(msg)),
		ContentLength: int64(len(msg)),
		Request:       resp.Request,
	}
}

// bufferPool hands the reverse proxy copy buffers of one size.
type bufferPool struct{ pool sync.Pool }

func newBufferPool(size int) *bufferPool {
	return &bufferPool{pool: sync.Pool{New: func() any { b := make([]byte, size); return &b }}}
}

func (p *bufferPool) Get() []byte  { return *p.pool.Get().(*[]byte) }
func (p *bufferPool) Put(b []byte) { p.pool.Put(&b) }

// body is a member's response body as the reverse proxy copies it. The copy
// ends cleanly, as if the member had finished, when the client went away
// (nobody is left to answer, and an aborted handler is logged as an error) or,
// for a long-running response, when the gateway stops (the client gets a
// complete response, for a watch the end of the stream, and reconnects
// elsewhere). Any other read error still aborts the response, so that a
// truncated body never looks complete, and is reported to failed: the server
// broke off. It needs no goroutine of its own.
type body struct {
	io.ReadCloser
	client      context.Context // the client's request
	stopped     atomic.Bool
	unsubscribe func() bool // ends the subscription to stopping; nil without one
	cancel      context.CancelFunc
	failed      func(context.Context, error) // nil once called
}

// newBody wraps the response body of the client's request; stopping, if not
// nil, ends it when done. Close calls cancel; failed, if not nil, is called
// once with the first read error that aborts the response.
func newBody(client context.Context, rc io.ReadCloser, stopping context.Context, cancel context.CancelFunc, failed func(context.Context, error)) *body {
	b := &body{ReadCloser: rc, client: client, cancel: cancel, failed: failed}
	if stopping != nil {
		b.unsubscribe = context.AfterFunc(stopping, func() {
			b.stopped.Store(true)
			_ = rc.Close() // unblocks a pending Read
		})
	}
	return b
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		if b.stopped.Load() || b.client.Err() != nil {
			return n, io.EOF
		}
		if b.failed != nil {
			b.failed(b.client, err)
			b.failed = nil
		}
	}
	return n, err
}

func (b *body) Close() error {
	if b.unsubscribe != nil {
		b.unsubscribe()
	}
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
