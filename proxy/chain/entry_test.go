package chain

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

func TestGatewayAPI(t *testing.T) {
	tests := []struct {
		path string
		want bool
	}{
		{"/apis/gateway.kubewharf.io", true},
		{"/apis/gateway.kubewharf.io/", true},
		{"/apis/gateway.kubewharf.io/v1alpha1", true},
		{"/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters", true},
		{"/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-a/proxy/api/v1/pods", true},
		// Leading and doubled slashes do not lead around the decision.
		{"//apis/gateway.kubewharf.io/v1alpha1/upstreamclusters", true},
		{"/apis//gateway.kubewharf.io/v1alpha1", true},
		// Other paths keep their own rules.
		{"/apis", false},
		{"/apis/", false},
		{"/apis/gateway.kubewharf.io.example", false},
		{"/apis/apps/v1", false},
		{"/api/v1", false},
		{"/gateway.kubewharf.io", false},
		{"/livez", false},
		{"/readyz", false},
		{"/healthz", false},
		{"/metrics", false},
		{"/openapi/v3/apis/gateway.kubewharf.io/v1alpha1", false},
		{"/version", false},
		{"/", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := gatewayAPI(tt.path); got != tt.want {
			t.Errorf("gatewayAPI(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

// With an Entry, requests for the API group that do not come from the front
// proxy get the 401 Status with the Entry's message on either chain; the rest
// is served as before.
func TestEntryRefusesWhatDoesNotComeFromTheFrontProxy(t *testing.T) {
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	c := genericapiserver.NewConfig(serializer.NewCodecFactory(scheme))
	c.FeatureGate = utilfeature.DefaultFeatureGate
	c.RequestInfoResolver = genericapiserver.NewRequestInfoResolver(c)
	const message = "use the hub, or --direct-access"
	fromFrontProxy := func(req *http.Request) bool { return req.Header.Get("From-Front-Proxy") == "yes" }
	var served string
	generic := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { served = "generic " + req.URL.Path })
	proxy := func(w http.ResponseWriter, req *http.Request, name, path string) {
		served = "proxy " + name + " " + path
	}

	const p = "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters"
	tests := []struct {
		path      string
		front     bool
		wantServe string // "" = refused
	}{
		{p + "/member-a/proxy/api", true, "proxy member-a /api"},
		{p + "/member-a/proxy/api", false, ""},
		{p, true, "generic " + p},
		{p, false, ""},
		{"/apis/gateway.kubewharf.io/v1alpha1", false, ""},
		{"/readyz", false, "generic /readyz"},
		{"/metrics", false, "generic /metrics"},
	}
	for _, entry := range []*Entry{{FromFrontProxy: fromFrontProxy, Message: message}, nil} {
		h := New(generic, proxy, c, Options{Entry: entry})
		for _, tt := range tests {
			served = ""
			req := httptest.NewRequest(http.MethodGet, "https://gateway"+tt.path, nil)
			req.Header.Set("Authorization", "Bearer hub-token")
			if tt.front {
				req.Header.Set("From-Front-Proxy", "yes")
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			want := tt.wantServe
			if entry == nil && want == "" { // direct access: every path is served
				if _, _, ok := Split(tt.path); ok {
					want = "proxy member-a /api"
				} else {
					want = "generic " + tt.path
				}
			}
			if want != "" {
				if served != want {
					t.Errorf("entry %v, GET %s (front proxy: %v): served %q, want %q (%d %s)", entry != nil, tt.path, tt.front, served, want, rec.Code, rec.Body)
				}
				continue
			}
			if served != "" {
				t.Errorf("GET %s (front proxy: %v): served %q, want 401", tt.path, tt.front, served)
				continue
			}
			var status metav1.Status
			if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil {
				t.Fatalf("GET %s: body %q: %v", tt.path, rec.Body, err)
			}
			if rec.Code != http.StatusUnauthorized || status.Code != http.StatusUnauthorized || status.Reason != metav1.StatusReasonUnauthorized ||
				status.Message != message || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
				t.Errorf("GET %s: %d %s %+v, want 401 with the Entry's message", tt.path, rec.Code, rec.Header().Get("Content-Type"), status)
			}
		}
	}
}

// auditSink keeps the events it is given.
type auditSink struct{ events []*auditinternal.Event }

func (s *auditSink) ProcessEvents(events ...*auditinternal.Event) bool {
	for _, e := range events {
		s.events = append(s.events, e.DeepCopy())
	}
	return true
}
func (s *auditSink) Run(<-chan struct{}) error { return nil }
func (s *auditSink) Shutdown()                 {}
func (s *auditSink) String() string            { return "test" }

// A refusal is audited like a failed authentication: no user, 401.
func TestEntryRefusalIsAudited(t *testing.T) {
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	c := genericapiserver.NewConfig(serializer.NewCodecFactory(scheme))
	c.FeatureGate = utilfeature.DefaultFeatureGate
	c.RequestInfoResolver = genericapiserver.NewRequestInfoResolver(c)
	sink := &auditSink{}
	c.AuditBackend = sink
	c.AuditPolicyRuleEvaluator = policy.NewFakePolicyRuleEvaluator(auditinternal.LevelMetadata, nil)
	entry := &Entry{FromFrontProxy: func(*http.Request) bool { return false }, Message: "refused"}
	h := New(http.NotFoundHandler(), func(http.ResponseWriter, *http.Request, string, string) {}, c, Options{Entry: entry})

	const path = "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-a/proxy/api"
	req := httptest.NewRequest(http.MethodGet, "https://gateway"+path, nil)
	req.Header.Set("Authorization", "Bearer hub-token")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("%d %s, want 401", rec.Code, rec.Body)
	}
	var found bool
	for _, e := range sink.events {
		if e.Stage == auditinternal.StageResponseStarted && e.RequestURI == path && e.ResponseStatus != nil && e.ResponseStatus.Code == http.StatusUnauthorized && e.User.Username == "" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no audit event of the refusal: %+v", sink.events)
	}
}
