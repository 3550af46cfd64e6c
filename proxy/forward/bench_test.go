package forward_test

import (
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/forward"
)

// BenchmarkServe forwards a GET of one small object to an in-process member
// over TLS and HTTP/2, as the gateway does for each proxied request after
// authentication: the cost of the gateway's own stages and its client side
// (the inbound HTTP/2 server is not part of it). The hub user has extras, as
// a service account's token gives it.
func BenchmarkServe(b *testing.B) { benchmarkServe(b, hubUser()) }

// BenchmarkServeWithoutExtras is BenchmarkServe for a hub user without extras
// (a client certificate's, an administrator's): its impersonation headers are
// set without another copy of the request.
func BenchmarkServeWithoutExtras(b *testing.B) {
	u := hubUser()
	u.Extra = nil
	benchmarkServe(b, u)
}

func benchmarkServe(b *testing.B, u *user.DefaultInfo) {
	serve := smallGET(b, u)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			serve()
		}
	})
}

// BenchmarkServeHTTP2 is BenchmarkServe behind an inbound HTTP/2 server
// over TLS, one request at a time: what a client at c=1 waits for, with the
// frames of the answer to the caller (not the gateway's handler chain).
func BenchmarkServeHTTP2(b *testing.B) {
	c := smallMember(b)
	u := hubUser()
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		testForwarder.Serve(w, req, forward.Request{Cluster: c, Path: smallPath, User: u, Errors: responseErrors{rec: &errorRecorder{}, w: w}})
	}))
	front.EnableHTTP2 = true
	front.Config.ErrorLog = log.New(io.Discard, "", 0)
	front.StartTLS()
	b.Cleanup(front.Close)
	client := front.Client()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Get(front.URL + proxyPrefix + smallPath)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			b.Fatalf("%s %s", resp.Proto, resp.Status)
		}
	}
}

// smallPath is the member path of the benchmarks' GET.
const smallPath = "/api/v1/namespaces/bench/configmaps/target"

// smallMember starts an in-process member over TLS and HTTP/2 that answers
// every GET with one small object, and returns its compiled cluster.
func smallMember(tb testing.TB) *cluster.Cluster {
	body := []byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"target","namespace":"bench"},"data":{"k":"v"}}`)
	m := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	m.EnableHTTP2 = true
	m.Config.ErrorLog = log.New(io.Discard, "", 0)
	m.StartTLS()
	tb.Cleanup(m.Close)
	return compile(tb, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.Certificate().Raw}), nil, m.URL)
}

// smallGET returns a function that forwards a GET of one small object to an
// in-process member (smallMember) as user u and fails tb unless it answered
// 200.
func smallGET(tb testing.TB, u *user.DefaultInfo) func() {
	c := smallMember(tb)
	return func() {
		req := httptest.NewRequest(http.MethodGet, proxyPrefix+smallPath, nil)
		req.Header.Set("Accept", "application/json")
		rec := httptest.NewRecorder()
		testForwarder.Serve(rec, req, forward.Request{Cluster: c, Path: smallPath, User: u,
			Errors: responseErrors{rec: &errorRecorder{}, w: rec}})
		if rec.Code != http.StatusOK {
			tb.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
	}
}
