package forward_test

import (
	"context"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/forward"
	"github.com/kubewharf/kube-gateway/proxy/metrics"
)

// faultGateway serves f.Serve for c, recording the errors written.
func faultGateway(t *testing.T, f *forward.Forwarder, c *cluster.Cluster) *gateway {
	t.Helper()
	g := &gateway{errs: &errorRecorder{}}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rt := byPrefix(req)
		f.Serve(w, req, forward.Request{Cluster: c, Path: rt.path, RawQuery: rt.rawQuery, User: hubUser(), Errors: responseErrors{rec: g.errs, w: w}})
	}))
	g.Config.ErrorLog = log.New(io.Discard, "", 0)
	t.Cleanup(g.Close)
	return g
}

// slowMember answers every request after delay (or never, once the request is
// cancelled).
func slowMember(t *testing.T, delay time.Duration) *member {
	t.Helper()
	m := &member{}
	m.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "slow ok")
	}))
	m.Config.ErrorLog = log.New(io.Discard, "", 0)
	m.StartTLS()
	t.Cleanup(m.Close)
	m.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.Certificate().Raw})
	return m
}

// oneFailureEjects makes a single failure take a server out.
func oneFailureEjects(uc *gatewayv1alpha1.UpstreamCluster) {
	uc.Spec.HealthCheck = &gatewayv1alpha1.HealthCheck{Path: "/readyz", IntervalSeconds: 60, TimeoutSeconds: 1, UnhealthyThreshold: 1, HealthyThreshold: 1}
}

// A server that sends no response headers within ResponseHeaderTimeout fails
// the attempt: a GET goes to another server, with no other server left the
// client gets a 504 naming the server, and the server is counted as failed.
// Long-running requests are not bounded.
func TestServeResponseHeaderTimeout(t *testing.T) {
	slow := slowMember(t, 2*time.Second)
	fast := newMember(t)
	caPEM := append(append([]byte{}, fast.caPEM...), slow.caPEM...)
	reg := prometheus.NewPedanticRegistry()
	met := metrics.New()
	if err := met.Register(reg); err != nil {
		t.Fatal(err)
	}
	f := forward.NewForwarder(met)
	f.ResponseHeaderTimeout = 200 * time.Millisecond

	// Round robin starts with the slow server: the GET is retried on the other.
	both := compile(t, caPEM, oneFailureEjects, slow.URL, fast.URL)
	g := faultGateway(t, f, both)
	req, _ := http.NewRequest(http.MethodGet, g.URL+proxyPrefix+"/api/v1/pods", nil)
	if resp, body := do(t, req); resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("GET with the first server slow: %d %s, want the other server's 200", resp.StatusCode, body)
	}
	retries := map[string]string{"cluster": clusterName, "endpoint": slow.URL}
	if got := counterValue(t, reg, "kube_gateway_proxy_retries_total", retries); got != 1 {
		t.Errorf("retries counted for %v: %v, want 1", retries, got)
	}
	if both.Endpoints[0].Healthy() {
		t.Error("the slow server is still healthy after a timeout (unhealthyThreshold 1)")
	}

	// Alone, it answers the client with a 504.
	alone := compile(t, slow.caPEM, nil, slow.URL)
	g = faultGateway(t, f, alone)
	req, _ = http.NewRequest(http.MethodGet, g.URL+proxyPrefix+"/api/v1/pods", nil)
	if resp, body := do(t, req); resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("GET of the only, slow, server: %d %s, want 504", resp.StatusCode, body)
	}
	errs := g.errs.all()
	if len(errs) != 1 {
		t.Fatalf("errors written: %v, want one", errs)
	}
	status := errs[0].(apierrors.APIStatus).Status()
	host := strings.TrimPrefix(slow.URL, "https://")
	if status.Reason != metav1.StatusReasonTimeout || !strings.Contains(status.Message, host) || !strings.Contains(status.Message, "no response headers within 200ms") {
		t.Fatalf("504 status: %+v, want reason Timeout naming the server and the timeout", status)
	}
	if status.Details.RetryAfterSeconds != 0 {
		t.Fatalf("504 status: retry after %ds, want none: the server may have carried the request out", status.Details.RetryAfterSeconds)
	}

	// A watch whose headers come later than the timeout is not cut.
	f.ResponseHeaderTimeout = 200 * time.Millisecond
	slowWatch := slowMember(t, 600*time.Millisecond)
	g = faultGateway(t, f, compile(t, slowWatch.caPEM, nil, slowWatch.URL))
	req, _ = http.NewRequest(http.MethodGet, g.URL+proxyPrefix+"/api/v1/pods?watch=true", nil)
	if resp, body := do(t, req); resp.StatusCode != http.StatusOK || string(body) != "slow ok" {
		t.Fatalf("watch answered after the header timeout: %d %s, want 200: long-running requests are not bounded", resp.StatusCode, body)
	}
}

// A server whose connection breaks after part of the body was sent: the client
// sees the response aborted, never a short body that looks complete; the
// request is not retried (the client already has part of an answer); the
// server is counted as failed.
func TestServeBrokenResponseAborts(t *testing.T) {
	var served atomic.Int32
	broken := &member{}
	broken.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"PodList","items":[`)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection closes mid-body
	}))
	broken.Config.ErrorLog = log.New(io.Discard, "", 0)
	broken.StartTLS()
	t.Cleanup(broken.Close)
	broken.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: broken.Certificate().Raw})
	fast := newMember(t)
	reg := prometheus.NewPedanticRegistry()
	met := metrics.New()
	if err := met.Register(reg); err != nil {
		t.Fatal(err)
	}
	f := forward.NewForwarder(met)
	c := compile(t, append(append([]byte{}, fast.caPEM...), broken.caPEM...), oneFailureEjects, broken.URL, fast.URL)
	g := faultGateway(t, f, c)

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+proxyPrefix+"/api/v1/pods", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the response should begin (the member began it): %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err == nil {
		t.Fatalf("a body the member broke off was read as complete: %d %q", resp.StatusCode, body)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Logf("reading the broken body: %v", err)
	}
	if n := served.Load(); n != 1 {
		t.Errorf("the broken server got %d requests, want 1", n)
	}
	if n := len(fast.received()); n != 0 {
		t.Errorf("the request was retried after part of the answer was sent: the other server got %d", n)
	}
	retries := map[string]string{"cluster": clusterName, "endpoint": broken.URL}
	if got := counterValue(t, reg, "kube_gateway_proxy_retries_total", retries); got != 0 {
		t.Errorf("retries counted for %v: %v, want 0", retries, got)
	}
	if c.Endpoints[0].Healthy() {
		t.Error("the server that broke off is still healthy (unhealthyThreshold 1)")
	}
	// Counted as the request it was, with the status it began with, and as
	// an abort.
	labels := map[string]string{"cluster": clusterName, "door": "hub", "policy": "", "schema": "", "verb": "list", "resource": "pods"}
	if got := counterValue(t, reg, "kube_gateway_proxy_request_aborts_total", labels); got != 1 {
		t.Errorf("aborts counted with %v: %v, want 1", labels, got)
	}
	labels["code"] = "200"
	if got := counterValue(t, reg, "kube_gateway_proxy_requests_total", labels); got != 1 {
		t.Errorf("requests counted with %v: %v, want 1", labels, got)
	}
}

// breakingMember closes the connection of each of its first breaks requests
// before answering (every request, with breaks < 0), and answers the others.
func breakingMember(t *testing.T, breaks int32) (m *member, served *atomic.Int32) {
	return breakingMemberAfter(t, breaks, nil)
}

// breakingMemberAfter is breakingMember, whose broken answers begin with
// what begin writes (and flushes) when not nil.
func breakingMemberAfter(t *testing.T, breaks int32, begin func(http.ResponseWriter)) (m *member, served *atomic.Int32) {
	t.Helper()
	served = &atomic.Int32{}
	m = &member{}
	m.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := served.Add(1); breaks < 0 || n <= breaks {
			if begin != nil {
				begin(w)
				w.(http.Flusher).Flush()
			}
			panic(http.ErrAbortHandler) // the connection closes
		}
		_, _ = io.WriteString(w, "ok")
	}))
	m.Config.ErrorLog = log.New(io.Discard, "", 0)
	m.StartTLS()
	t.Cleanup(m.Close)
	m.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.Certificate().Raw})
	return m, served
}

// A connection that breaks under an idempotent request does not use up its
// retry: when what carried the connections to a member went away, those to
// every server of it break together, and a try on a new connection gets
// through. The tries stay bounded: three at most, never for a request that
// may have had effects.
func TestServeRetriesBrokenConnections(t *testing.T) {
	get := func(g *gateway) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodGet, g.URL+proxyPrefix+"/api/v1/pods", nil)
		return do(t, req)
	}
	t.Run("both servers' connections broke", func(t *testing.T) {
		a, servedA := breakingMember(t, 1)
		b, servedB := breakingMember(t, 1)
		c := compile(t, append(append([]byte{}, a.caPEM...), b.caPEM...), nil, a.URL, b.URL)
		g := faultGateway(t, forward.NewForwarder(metrics.New()), c)
		if resp, body := get(g); resp.StatusCode != http.StatusOK {
			t.Fatalf("GET: %d %s, want 200 on a new connection", resp.StatusCode, body)
		}
		if n := servedA.Load() + servedB.Load(); n > 3 {
			t.Errorf("the servers got %d requests, want 3 at most", n)
		}
	})
	t.Run("the only server's connection broke", func(t *testing.T) {
		a, served := breakingMember(t, 1)
		g := faultGateway(t, forward.NewForwarder(metrics.New()), compile(t, a.caPEM, nil, a.URL))
		if resp, body := get(g); resp.StatusCode != http.StatusOK {
			t.Fatalf("GET: %d %s, want 200 on a new connection", resp.StatusCode, body)
		}
		if n := served.Load(); n != 2 {
			t.Errorf("the server got %d requests, want 2", n)
		}
	})
	t.Run("every connection breaks", func(t *testing.T) {
		a, servedA := breakingMember(t, -1)
		b, servedB := breakingMember(t, -1)
		c := compile(t, append(append([]byte{}, a.caPEM...), b.caPEM...), nil, a.URL, b.URL)
		g := faultGateway(t, forward.NewForwarder(metrics.New()), c)
		resp, body := get(g)
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("GET: %d %s, want 502", resp.StatusCode, body)
		}
		if !strings.Contains(string(body), `"`+clusterName+`"`) || !strings.Contains(string(body), "EOF") {
			t.Errorf("the error %q does not name the cluster and what broke", body)
		}
		if n := servedA.Load() + servedB.Load(); n != 3 {
			t.Errorf("the servers got %d requests, want 3", n)
		}
	})
	t.Run("a POST is not retried", func(t *testing.T) {
		a, servedA := breakingMember(t, 1)
		b, servedB := breakingMember(t, 1)
		c := compile(t, append(append([]byte{}, a.caPEM...), b.caPEM...), nil, a.URL, b.URL)
		g := faultGateway(t, forward.NewForwarder(metrics.New()), c)
		req, _ := http.NewRequest(http.MethodPost, g.URL+proxyPrefix+"/api/v1/namespaces/default/configmaps", strings.NewReader("{}"))
		if resp, body := do(t, req); resp.StatusCode != http.StatusBadGateway {
			t.Errorf("POST: %d %s, want 502", resp.StatusCode, body)
		}
		if n := servedA.Load() + servedB.Load(); n != 1 {
			t.Errorf("the servers got %d requests, want 1", n)
		}
	})
}

// A response whose connection broke after its headers came, and before the
// gateway passed anything on, is retried as if the headers had not come:
// when a konnectivity server goes away between the two, the client gets its
// answer from another try. Once part of the body went to the client, it is
// not (TestServeBrokenResponseAborts).
func TestServeRetriesBodyThatBrokeBeforeItBegan(t *testing.T) {
	for _, tc := range []struct {
		name  string
		begin func(http.ResponseWriter)
	}{
		{"headers only", func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }},
		{"part of a body of declared length", func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "100")
			_, _ = io.WriteString(w, `{"kind":"Pod",`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, served := breakingMemberAfter(t, 1, tc.begin)
			g := faultGateway(t, forward.NewForwarder(metrics.New()), compile(t, a.caPEM, nil, a.URL))
			req, _ := http.NewRequest(http.MethodGet, g.URL+proxyPrefix+"/api/v1/namespaces/default/pods/p", nil)
			if resp, body := do(t, req); resp.StatusCode != http.StatusOK || string(body) != "ok" {
				t.Fatalf("GET: %d %q, want 200 %q from the try after the break", resp.StatusCode, body, "ok")
			}
			if n := served.Load(); n != 2 {
				t.Errorf("the server got %d requests, want 2", n)
			}
		})
	}
}
