package status

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/health"
)

// status builds a status from an observation, as the writer would over old.
func statusAfter(old *gatewayv1alpha1.UpstreamClusterStatus, o observation, spec *gatewayv1alpha1.UpstreamClusterSpec) *gatewayv1alpha1.UpstreamClusterStatus {
	return desiredStatus(old, o, spec, metav1.NewTime(t0))
}

func specWith(insecure bool, endpoints ...string) *gatewayv1alpha1.UpstreamClusterSpec {
	spec := &gatewayv1alpha1.UpstreamClusterSpec{ClientConfig: gatewayv1alpha1.ClientConfig{Insecure: insecure}}
	for _, e := range endpoints {
		spec.Servers = append(spec.Servers, gatewayv1alpha1.UpstreamServer{Endpoint: e})
	}
	return spec
}

func reasons(events []event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.eventType+" "+e.reason)
	}
	return out
}

func TestTransitions(t *testing.T) {
	empty := &gatewayv1alpha1.UpstreamClusterStatus{}
	bothHealthy := observation{generation: 1, servers: []health.ServerHealth{{Endpoint: epA, Healthy: true}, {Endpoint: epB, Healthy: true}}}
	bHealthy := observation{generation: 1, servers: []health.ServerHealth{
		{Endpoint: epA, Healthy: false, Reason: "ProbeFailed", Message: "GET https://192.0.2.10:6443/readyz: connection refused"},
		{Endpoint: epB, Healthy: true},
	}}
	noneHealthy := observation{generation: 1, servers: []health.ServerHealth{
		{Endpoint: epA, Healthy: false, Reason: "ProbeFailed"},
		{Endpoint: epB, Healthy: false, Reason: "ProbeTimedOut"},
	}}
	bDisabled := observation{generation: 2, servers: []health.ServerHealth{{Endpoint: epA, Healthy: true}, {Endpoint: epB, Reason: gatewayv1alpha1.ServerReasonDisabled}}}
	notChecked := observation{generation: 1, servers: []health.ServerHealth{
		{Endpoint: epA, Healthy: true, Unknown: true, Reason: health.ReasonNotChecked},
		{Endpoint: epB, Healthy: true, Unknown: true, Reason: health.ReasonNotChecked},
	}}
	unserved := observation{generation: 1, servers: bothHealthy.servers,
		served: &servedCheck{named: true, unserved: []string{`dispatch policy "p" rule 0: resource "namespace" of API group ""`}}}
	allServed := observation{generation: 1, servers: bothHealthy.servers, served: &servedCheck{named: true}}
	missing := observation{generation: 1, problem: &problem{"SecretNotFound", "its credential Secret kube-gateway/x was not found on the hub"}}
	badCA := observation{generation: 1, problem: &problem{"InvalidCAData", "ca.crt is not PEM"}}
	secure, insecure := specWith(false, epA, epB), specWith(true, epA, epB)

	st := func(old *gatewayv1alpha1.UpstreamClusterStatus, o observation, spec *gatewayv1alpha1.UpstreamClusterSpec) *gatewayv1alpha1.UpstreamClusterStatus {
		return statusAfter(old, o, spec)
	}
	healthy := st(empty, bothHealthy, secure)
	tests := []struct {
		name string
		old  *gatewayv1alpha1.UpstreamClusterStatus
		o    observation
		spec *gatewayv1alpha1.UpstreamClusterSpec
		want []string
	}{
		{name: "a new healthy cluster", old: empty, o: bothHealthy, spec: secure, want: nil},
		{name: "nothing changed", old: healthy, o: bothHealthy, spec: secure, want: nil},
		{name: "one endpoint unhealthy", old: healthy, o: bHealthy, spec: secure, want: []string{"Warning EndpointUnhealthy"}},
		{name: "every endpoint unhealthy", old: healthy, o: noneHealthy, spec: secure,
			want: []string{"Warning EndpointUnhealthy", "Warning EndpointUnhealthy", "Warning ClusterNotReady"}},
		{name: "the last healthy endpoint fails", old: st(empty, bHealthy, secure), o: noneHealthy, spec: secure,
			want: []string{"Warning EndpointUnhealthy", "Warning ClusterNotReady"}},
		{name: "back to healthy", old: st(empty, noneHealthy, secure), o: bothHealthy, spec: secure,
			want: []string{"Normal EndpointHealthy", "Normal EndpointHealthy", "Normal ClusterReady"}},
		{name: "a new cluster without a healthy server", old: empty, o: noneHealthy, spec: secure,
			want: []string{"Warning EndpointUnhealthy", "Warning EndpointUnhealthy", "Warning ClusterNotReady"}},
		{name: "a new cluster not checked yet", old: empty, o: notChecked, spec: secure, want: nil},
		{name: "its servers answer", old: st(empty, notChecked, secure), o: bothHealthy, spec: secure, want: []string{"Normal ClusterReady"}},
		{name: "its servers fail", old: st(empty, notChecked, secure), o: noneHealthy, spec: secure,
			want: []string{"Warning EndpointUnhealthy", "Warning EndpointUnhealthy", "Warning ClusterNotReady"}},
		{name: "one answers, one fails", old: st(empty, notChecked, secure), o: bHealthy, spec: secure,
			want: []string{"Warning EndpointUnhealthy", "Normal ClusterReady"}},
		{name: "repointed at servers not checked yet", old: st(empty, noneHealthy, secure), o: observation{generation: 2, servers: notChecked.servers}, spec: secure, want: nil},
		{name: "a rule names a resource the member does not serve", old: healthy, o: unserved, spec: secure, want: []string{"Warning UnservedResources"}},
		{name: "still not served", old: st(healthy, unserved, secure), o: unserved, spec: secure, want: nil},
		{name: "fixed", old: st(healthy, unserved, secure), o: allServed, spec: secure, want: nil},
		{name: "disabling a server is no health transition", old: healthy, o: bDisabled, spec: secure, want: nil},
		{name: "enabling it again neither", old: st(healthy, bDisabled, secure), o: observation{generation: 3, servers: bothHealthy.servers}, spec: secure, want: nil},
		{name: "a new cluster whose Secret is missing", old: empty, o: missing, spec: secure, want: []string{"Warning SecretNotFound"}},
		{name: "a healthy cluster loses its Secret", old: healthy, o: missing, spec: secure, want: []string{"Warning SecretNotFound"}},
		{name: "the same problem again", old: st(healthy, missing, secure), o: missing, spec: secure, want: nil},
		{name: "another problem", old: st(healthy, missing, secure), o: badCA, spec: secure, want: []string{"Warning InvalidCAData"}},
		{name: "the problem fixed", old: st(healthy, missing, secure), o: bothHealthy, spec: secure, want: []string{"Normal ClusterReady"}},
		{name: "fixed, but no server healthy", old: st(healthy, missing, secure), o: noneHealthy, spec: secure,
			want: []string{"Warning EndpointUnhealthy", "Warning EndpointUnhealthy", "Warning ClusterNotReady"}},
		{name: "a new insecure cluster", old: empty, o: bothHealthy, spec: insecure, want: []string{"Warning InsecureTransport"}},
		{name: "insecure turned on", old: healthy, o: bothHealthy, spec: insecure, want: []string{"Warning InsecureTransport"}},
		{name: "still insecure", old: st(empty, bothHealthy, insecure), o: bothHealthy, spec: insecure, want: nil},
		{name: "insecure turned off", old: st(empty, bothHealthy, insecure), o: bothHealthy, spec: secure, want: []string{"Normal CertificatesVerified"}},
		{name: "spec of another generation: insecure unknown", old: st(empty, bothHealthy, insecure), o: bothHealthy, spec: nil, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := transitions(tt.old, st(tt.old, tt.o, tt.spec))
			if !slices.Equal(reasons(got), tt.want) {
				t.Fatalf("events %v, want %v", reasons(got), tt.want)
			}
			for _, e := range got {
				if e.message == "" {
					t.Errorf("%s without a message", e.reason)
				}
			}
		})
	}

	t.Run("messages", func(t *testing.T) {
		got := transitions(healthy, st(healthy, noneHealthy, secure))
		if want := "server " + epA + " is unhealthy (ProbeFailed)"; got[0].message != want {
			t.Errorf("message %q, want %q", got[0].message, want)
		}
		if want := "no server can serve requests: 0 of 2 servers healthy; " + epA + ": ProbeFailed"; got[2].message != want {
			t.Errorf("message %q, want %q", got[2].message, want)
		}
		got = transitions(healthy, st(healthy, bHealthy, secure))
		if want := "server " + epA + " is unhealthy (ProbeFailed): GET https://192.0.2.10:6443/readyz: connection refused"; got[0].message != want {
			t.Errorf("message %q, want %q", got[0].message, want)
		}
		got = transitions(empty, st(empty, missing, secure))
		if want := "the cluster cannot be used: its credential Secret kube-gateway/x was not found on the hub"; got[0].message != want {
			t.Errorf("message %q, want %q", got[0].message, want)
		}
		got = transitions(empty, st(empty, bothHealthy, insecure))
		if !strings.Contains(got[0].message, epA+", "+epB) || !strings.Contains(got[0].message, "not verified") {
			t.Errorf("InsecureTransport message %q does not name the servers", got[0].message)
		}
	})
}

func TestInsecureTransportCondition(t *testing.T) {
	spec := specWith(true, epA, epB)
	spec.Servers[1].Disabled = true
	s := statusAfter(&gatewayv1alpha1.UpstreamClusterStatus{}, observation{generation: 4}, spec)
	c := meta.FindStatusCondition(s.Conditions, gatewayv1alpha1.ConditionInsecureTransport)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonInsecureSkipVerify || c.ObservedGeneration != 4 ||
		!strings.Contains(c.Message, epA) || strings.Contains(c.Message, epB) {
		t.Fatalf("InsecureTransport: %+v (want True naming the enabled server only)", c)
	}
	s = statusAfter(s, observation{generation: 5}, specWith(false, epA))
	c = meta.FindStatusCondition(s.Conditions, gatewayv1alpha1.ConditionInsecureTransport)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonCertificatesVerified {
		t.Fatalf("InsecureTransport: %+v (want False)", c)
	}
	// Unknown spec: the condition stays as it was.
	s2 := statusAfter(s, observation{generation: 6}, nil)
	if c2 := meta.FindStatusCondition(s2.Conditions, gatewayv1alpha1.ConditionInsecureTransport); c2 == nil || *c2 != *c {
		t.Fatalf("InsecureTransport changed without a spec: %+v", c2)
	}
}

// A configuration problem makes Ready False with its reason and keeps the last
// server health.
func TestProblemStatus(t *testing.T) {
	old := statusAfter(&gatewayv1alpha1.UpstreamClusterStatus{}, observation{generation: 1, servers: []health.ServerHealth{{Endpoint: epA, Healthy: true}}}, nil)
	s := statusAfter(old, observation{generation: 2, problem: &problem{"InvalidSecret", "credential Secret kube-gateway/x has no credential"}}, nil)
	r := meta.FindStatusCondition(s.Conditions, gatewayv1alpha1.ConditionReady)
	if r == nil || r.Status != metav1.ConditionFalse || r.Reason != "InvalidSecret" || r.ObservedGeneration != 2 ||
		r.Message != "credential Secret kube-gateway/x has no credential" {
		t.Fatalf("Ready: %+v", r)
	}
	if s.ObservedGeneration != 2 || len(s.Servers) != 1 || !ptr.Deref(s.Servers[0].Healthy, false) {
		t.Fatalf("status: %+v", s)
	}
}

// expectEvents reads n events from a fake recorder.
func expectEvents(t *testing.T, rec *record.FakeRecorder, want ...string) {
	t.Helper()
	for _, w := range want {
		select {
		case got := <-rec.Events:
			if !strings.HasPrefix(got, w) {
				t.Fatalf("event %q, want %q...", got, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event %q within 10s", w)
		}
	}
}

func expectNoEvent(t *testing.T, rec *record.FakeRecorder) {
	t.Helper()
	select {
	case got := <-rec.Events:
		t.Fatalf("unexpected event %q", got)
	default:
	}
}

// Events are recorded by Run only (the leader), once per transition.
func TestWriterRecordsTransitions(t *testing.T) {
	s := newFakeStorage("member-a")
	s.objects["member-a"].Spec = *specWith(false, epA, epB)
	rec := record.NewFakeRecorder(100)
	w := NewWriter(s, clocktesting.NewFakePassiveClock(t0))
	terms := 0
	w.newRecorder = func(context.Context) (record.EventRecorder, func()) {
		terms++
		return rec, func() {}
	}
	events := make(chan syncEvent, 100)
	w.onSync = func(cluster string, wrote bool, err error) { events <- syncEvent{cluster, wrote, err} }

	// Not leading: observations record nothing.
	w.Observe("member-a", 1, []health.ServerHealth{{Endpoint: epA, Healthy: false, Reason: "ProbeFailed"}, {Endpoint: epB, Healthy: true}})
	expectNoEvent(t, rec)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	expectSync(t, events, "member-a", true)
	expectEvents(t, rec, "Warning EndpointUnhealthy server "+epA)

	// The same view again: no write, no event.
	w.Observe("member-a", 1, []health.ServerHealth{{Endpoint: epA, Healthy: false, Reason: "ProbeFailed"}, {Endpoint: epB, Healthy: true}})
	expectSync(t, events, "member-a", false)
	expectNoEvent(t, rec)

	w.ObserveInvalid("member-a", 1, "SecretNotFound", "its credential Secret kube-gateway/member-a was not found on the hub")
	expectSync(t, events, "member-a", true)
	expectEvents(t, rec, "Warning SecretNotFound the cluster cannot be used: its credential Secret kube-gateway/member-a")

	w.Observe("member-a", 1, []health.ServerHealth{{Endpoint: epA, Healthy: true}, {Endpoint: epB, Healthy: true}})
	expectSync(t, events, "member-a", true)
	expectEvents(t, rec, "Normal EndpointHealthy server "+epA, "Normal ClusterReady")
	expectNoEvent(t, rec)
	if terms != 1 {
		t.Fatalf("%d recorders started, want 1", terms)
	}
}

// RecordEvents records core Events in namespace default that kubectl describe
// finds: involvedObject is the UpstreamCluster (apiVersion, kind, name, uid).
func TestRecordEventsToTheHub(t *testing.T) {
	s := newFakeStorage("member-a")
	hub := fake.NewClientset()
	w := NewWriter(s, clocktesting.NewFakePassiveClock(t0))
	w.RecordEvents(hub.CoreV1())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	w.ObserveInvalid("member-a", 1, "InvalidSecret", "credential Secret kube-gateway/member-a has no credential")

	var got corev1.Event
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := hub.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) == 0 {
			return false, err
		}
		got = list.Items[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("no Event recorded: %v", err)
	}
	want := corev1.ObjectReference{APIVersion: "gateway.kubewharf.io/v1alpha1", Kind: "UpstreamCluster", Name: "member-a", UID: "uid-member-a"}
	if got.Namespace != metav1.NamespaceDefault || got.InvolvedObject != want || got.Type != corev1.EventTypeWarning ||
		got.Reason != "InvalidSecret" || got.Source.Component != EventSource ||
		got.Message != "the cluster cannot be used: credential Secret kube-gateway/member-a has no credential" {
		t.Fatalf("event: namespace %q involvedObject %+v type %s reason %s source %+v message %q",
			got.Namespace, got.InvolvedObject, got.Type, got.Reason, got.Source, got.Message)
	}
}
