package door

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/kubewharf/kube-gateway/test/testca"
)

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

// The door's chain audits what it serves, as the member's identity, and what
// it refuses, as a failed authentication (no user, the refusal's code); with
// tracing on, what it serves is a span (inside authentication, as on the hub
// path and in k8s.io/apiserver's chain).
func TestChainAuditsAndTraces(t *testing.T) {
	member := newFakeMember(t, "member-a")
	d := doorOf(t, "member-a", member, []string{"member-a.example.com"}, testca.New(t, "serving"), testca.New(t, "client"))
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	codecs := serializer.NewCodecFactory(scheme)
	c := genericapiserver.NewConfig(codecs)
	c.FeatureGate = utilfeature.DefaultFeatureGate
	c.RequestInfoResolver = genericapiserver.NewRequestInfoResolver(c)
	sink := &auditSink{}
	c.AuditBackend = sink
	c.AuditPolicyRuleEvaluator = policy.NewFakePolicyRuleEvaluator(auditinternal.LevelMetadata, nil)
	spans := tracetest.NewSpanRecorder()
	c.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	s := NewServer(fakeDoors{"member-a.example.com": d}, func(w http.ResponseWriter, _ *http.Request, _ string) {
		w.WriteHeader(http.StatusOK)
	}, codecs)
	h := Chain(s, c, true)

	for _, tt := range []struct {
		token string
		code  int
		user  string
	}{
		{"good-member-a", http.StatusOK, "system:serviceaccount:alice:sa"},
		{"bad", http.StatusUnauthorized, ""},
		{"boom", http.StatusServiceUnavailable, ""},
	} {
		sink.events = nil
		req := httptest.NewRequest(http.MethodGet, "https://member-a.example.com/api/v1/namespaces", nil)
		req.TLS = &tls.ConnectionState{ServerName: "member-a.example.com"}
		req.Header.Set("Authorization", "Bearer "+tt.token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tt.code {
			t.Errorf("token %s: %d %s, want %d", tt.token, rec.Code, rec.Body, tt.code)
			continue
		}
		var found bool
		for _, e := range sink.events {
			if e.Stage == auditinternal.StageResponseComplete || e.Stage == auditinternal.StageResponseStarted {
				found = found || e.RequestURI == "/api/v1/namespaces" && e.ResponseStatus != nil && int(e.ResponseStatus.Code) == tt.code && e.User.Username == tt.user
			}
		}
		if !found {
			t.Errorf("token %s: no audit event with code %d and user %q: %+v", tt.token, tt.code, tt.user, sink.events)
		}
	}
	if n := len(spans.Ended()); n != 1 {
		t.Errorf("%d spans of 1 request served and 2 refused", n)
	}
}
