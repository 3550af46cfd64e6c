package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
)

// The stand-in answers health checks and discovery as a kube-apiserver
// does, and counts the health checks as the apiserver labels them, which is
// what the cluster phase reads as probes served.
func TestStandInHandler(t *testing.T) {
	srv := httptest.NewServer(newStandInHandler())
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, p := range []string{"/readyz", "/livez", "/healthz"} {
		if code, body := get(p); code != http.StatusOK || body != "ok" {
			t.Errorf("GET %s: %d %q, want 200 ok", p, code, body)
		}
	}
	get("/readyz")
	var v version.Info
	if code, body := get("/version"); code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil || v.GitVersion == "" {
		t.Errorf("GET /version: %d %q", code, body)
	}
	var api metav1.APIVersions
	if code, body := get("/api"); code != http.StatusOK || json.Unmarshal([]byte(body), &api) != nil || len(api.Versions) == 0 || api.Versions[0] != "v1" {
		t.Errorf("GET /api: %d %q", code, body)
	}
	var apis metav1.APIGroupList
	if code, body := get("/apis"); code != http.StatusOK || json.Unmarshal([]byte(body), &apis) != nil || apis.Kind != "APIGroupList" {
		t.Errorf("GET /apis: %d %q", code, body)
	}
	var st metav1.Status
	if code, body := get("/api/v1/pods"); code != http.StatusNotFound || json.Unmarshal([]byte(body), &st) != nil || st.Code != http.StatusNotFound {
		t.Errorf("GET /api/v1/pods: %d %q, want a 404 Status", code, body)
	}
	_, metrics := get("/metrics")
	if want := `apiserver_request_total{code="200",subresource="/readyz",verb="GET"} 2`; !strings.Contains(metrics, want) {
		t.Errorf("metrics lack %s:\n%s", want, metrics)
	}
	if strings.Contains(metrics, `subresource="/api/v1/pods"`) {
		t.Error("an unknown path got a series of its own")
	}
}

// Each cluster of the burst has one server in each slot, so its servers are
// distinct hosts, and the clusters spread over each slot's ports.
func TestFleetEndpoints(t *testing.T) {
	f := &fleet{Slots: [][]string{{"127.0.100.1:1001", "127.0.100.1:1002"}, {"127.0.100.2:2001", "127.0.100.2:2002"}}}
	for i, want := range [][]string{
		{"https://127.0.100.1:1001", "https://127.0.100.2:2001"},
		{"https://127.0.100.1:1002", "https://127.0.100.2:2002"},
		{"https://127.0.100.1:1001", "https://127.0.100.2:2001"},
	} {
		if got := f.endpoints(i); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("endpoints(%d) = %v, want %v", i, got, want)
		}
	}
}
