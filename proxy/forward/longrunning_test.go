package forward_test

import (
	"bufio"
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/forward"
	"github.com/kubewharf/kube-gateway/proxy/longrunning"
	"github.com/kubewharf/kube-gateway/proxy/metrics"
)

// streamMember answers watches with one event and keeps them open until the
// request ends or end is closed; anything else gets 200 "ok".
func streamMember(t *testing.T, end chan struct{}, mutate func(*gatewayv1alpha1.UpstreamCluster)) *cluster.Cluster {
	t.Helper()
	m := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "true" {
			_, _ = w.Write([]byte("ok"))
			return
		}
		_, _ = w.Write([]byte(`{"type":"ADDED"}` + "\n"))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-end:
		}
	}))
	t.Cleanup(m.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.Certificate().Raw})
	return compile(t, caPEM, mutate, m.URL)
}

// withSchema sends every request through one policy, "all", to schema.
func withSchema(schema gatewayv1alpha1.FlowControlSchema) func(*gatewayv1alpha1.UpstreamCluster) {
	return func(uc *gatewayv1alpha1.UpstreamCluster) {
		uc.Spec.FlowControl = &gatewayv1alpha1.FlowControl{FlowControlSchemas: []gatewayv1alpha1.FlowControlSchema{schema}}
		uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{
			Name:                  "all",
			Rules:                 []gatewayv1alpha1.DispatchPolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}},
			Strategy:              gatewayv1alpha1.RoundRobin,
			FlowControlSchemaName: schema.Name,
		}}
	}
}

// A user's long-running requests beyond the cap get 429 naming the limit and
// the flag, counted as LongRunningPerUser; the user's short requests and other
// users' watches go on; a slot is free again when its request ends, whether
// the client leaves, the member ends it, or the gateway stops.
func TestServeLongRunningPerUser(t *testing.T) {
	end := make(chan struct{})
	// Through a schema that admits everything: its release and the cap's both run.
	c := streamMember(t, end, withSchema(gatewayv1alpha1.FlowControlSchema{Name: "free", Exempt: &gatewayv1alpha1.ExemptFlowControl{}}))
	met := metrics.New()
	f := forward.NewForwarder(met)
	f.LongRunning = longrunning.New(2)
	errs := &errorRecorder{}
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rt := byPrefix(req)
		u := &user.DefaultInfo{Name: req.Header.Get("Test-User")}
		f.Serve(w, req, forward.Request{Cluster: c, Path: rt.path, RawQuery: rt.rawQuery, User: u, Errors: responseErrors{rec: errs, w: w}})
	}))
	t.Cleanup(gw.Close)

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	// open starts a watch by name and returns its status and the way to close it.
	open := func(name string) (int, context.CancelFunc) {
		t.Helper()
		wctx, stop := context.WithCancel(ctx)
		req, _ := http.NewRequestWithContext(wctx, http.MethodGet, gw.URL+proxyPrefix+"/api/v1/pods?watch=true", nil)
		req.Header.Set("Test-User", name)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
				t.Fatalf("first event: %v", err)
			}
		}
		return resp.StatusCode, func() { stop(); _ = resp.Body.Close() }
	}
	get := func(name string) int {
		req, _ := http.NewRequest(http.MethodGet, gw.URL+proxyPrefix+"/api/v1/pods", nil)
		req.Header.Set("Test-User", name)
		resp, _ := do(t, req)
		return resp.StatusCode
	}
	freed := func(name string, want int) {
		t.Helper()
		if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
			return f.LongRunning.Open(name) == want, nil
		}); err != nil {
			t.Fatalf("%s holds %d long-running requests, want %d", name, f.LongRunning.Open(name), want)
		}
	}

	code1, close1 := open("alice")
	code2, close2 := open("alice")
	defer close2()
	if code1 != http.StatusOK || code2 != http.StatusOK {
		t.Fatalf("watches below the cap: %d %d", code1, code2)
	}
	if code, _ := open("alice"); code != http.StatusTooManyRequests {
		t.Fatalf("third watch of alice with a cap of 2: %d, want 429", code)
	}
	all := errs.all()
	if len(all) != 1 {
		t.Fatalf("errors: %v", all)
	}
	status := all[0].(apierrors.APIStatus).Status()
	for _, want := range []string{`"alice"`, " 2 ", "--" + longrunning.Flag} {
		if !strings.Contains(status.Message, want) {
			t.Errorf("429 message %q does not name %q", status.Message, want)
		}
	}
	if status.Reason != "TooManyRequests" || status.Details == nil || status.Details.RetryAfterSeconds != 1 {
		t.Errorf("429 status: reason %q, details %+v; want TooManyRequests with RetryAfterSeconds 1", status.Reason, status.Details)
	}
	if code := get("alice"); code != http.StatusOK {
		t.Errorf("a GET of alice at her cap: %d, want 200 (only long-running requests count)", code)
	}
	codeBob, closeBob := open("bob")
	if codeBob != http.StatusOK {
		t.Errorf("bob's watch while alice is at her cap: %d", codeBob)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := met.Register(reg); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"cluster": "member-a", "door": "hub", "policy": "all", "schema": "free", "reason": metrics.ReasonLongRunningPerUser}
	if got := counterValue(t, reg, "kube_gateway_proxy_rejected_requests_total", labels); got != 1 {
		t.Errorf("rejections counted for %v: %v, want 1", labels, got)
	}

	// The client leaves: its slot is free again.
	close1()
	freed("alice", 1)
	code3, close3 := open("alice")
	defer close3()
	if code3 != http.StatusOK {
		t.Fatalf("a watch of alice after closing one: %d", code3)
	}
	// The member ends every watch: every slot is free again.
	close(end)
	freed("alice", 0)
	freed("bob", 0)
	closeBob()
	// The gateway stops: the streams it ends give their slots back.
	end2 := make(chan struct{})
	defer close(end2)
	c = streamMember(t, end2, nil) // no schema: the cap's release alone
	if code, closeW := open("alice"); code != http.StatusOK {
		t.Fatalf("watch before Stop: %d", code)
	} else {
		defer closeW()
	}
	freed("alice", 1)
	f.Stop()
	freed("alice", 0)
	if n := f.LongRunning.Users(); n != 0 {
		t.Errorf("%d users tracked after every stream ended", n)
	}
}

// A watch the cluster's flow control refuses gives back the user's slot it
// took: refusals do not use up the user's cap.
func TestServeLongRunningRefusedByFlowControlFreesSlot(t *testing.T) {
	end := make(chan struct{})
	defer close(end)
	c := streamMember(t, end, withSchema(gatewayv1alpha1.FlowControlSchema{Name: "none", MaxRequestsInflight: &gatewayv1alpha1.MaxRequestsInflightFlowControl{Max: 0}}))
	f := forward.NewForwarder(metrics.New())
	f.LongRunning = longrunning.New(1)
	gw := forwarderServer(t, f, c, nil)
	req, _ := http.NewRequest(http.MethodGet, gw.URL+proxyPrefix+"/api/v1/pods?watch=true", nil)
	if resp, _ := do(t, req); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("watch under a schema of max 0: %d, want 429", resp.StatusCode)
	}
	if n := f.LongRunning.Open(hubUser().Name); n != 0 {
		t.Fatalf("a refused watch holds %d slots of the user's cap", n)
	}
}

// An exec, attach or port-forward session holds connections of its own, so it
// takes longrunning.SessionSlots of its user's cap while it is open: with a
// cap of 4 a second session is refused with a Status that says how sessions
// count, and admitted again once the first ended.
func TestServeSessionTakesItsSlots(t *testing.T) {
	m := newMember(t)
	c := compile(t, m.caPEM, nil, m.URL)
	f := forward.NewForwarder(metrics.New())
	f.LongRunning = longrunning.New(4)
	errs := &errorRecorder{}
	u := hubUser()
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rt := byPrefix(req)
		f.Serve(w, req, forward.Request{Cluster: c, Path: rt.path, RawQuery: rt.rawQuery, User: u, Errors: responseErrors{rec: errs, w: w}})
	}))
	t.Cleanup(gw.Close)
	const execPath = proxyPrefix + "/api/v1/namespaces/default/pods/p/exec?command=sh&stdin=true"

	conn, _, resp := upgrade(t, gw.URL, execPath, nil)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("first session: %s, want 101; errors: %v", resp.Status, errs.all())
	}
	if got := f.LongRunning.Open(u.Name); got != longrunning.SessionSlots {
		t.Fatalf("an open session takes %d slots, want %d", got, longrunning.SessionSlots)
	}
	_, _, second := upgrade(t, gw.URL, execPath, nil)
	if second.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second session with 1 slot free: %s, want 429", second.Status)
	}
	if got := errs.all(); len(got) != 1 || !apierrors.IsTooManyRequests(got[0]) || !strings.Contains(got[0].Error(), "session 3") {
		t.Fatalf("refusals = %v, want one 429 that says what a session counts", got)
	}

	_ = conn.Close() // the client ends the session
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		return f.LongRunning.Open(u.Name) == 0, nil
	}); err != nil {
		t.Fatalf("%d slots still taken after the session ended", f.LongRunning.Open(u.Name))
	}
	if _, _, again := upgrade(t, gw.URL, execPath, nil); again.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("a session after the first ended: %s, want 101", again.Status)
	}
}
