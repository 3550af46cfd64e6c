package handler

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

var connectPlugins = []string{"NamespaceLifecycle", "MutatingAdmissionPolicy", "MutatingAdmissionWebhook", "ValidatingAdmissionPolicy", "ValidatingAdmissionWebhook"}

// The gate lets CONNECT admission be skipped only while the hub is known to
// have no webhook configuration and no admission policy; the plugins decide
// everything else.
func TestConnectAdmissionGate(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hub := fake.NewClientset()
	f := informers.NewSharedInformerFactory(hub, 0)
	g := NewConnectAdmissionGate(f, connectPlugins)
	if g == nil {
		t.Fatal("no gate for the registered plugins")
	}
	if !g.Needed() {
		t.Error("admission skipped before the configuration was known")
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	// The gate's event handlers learn the initial lists just after the caches.
	waitFor(t, "admission to be skipped with no webhook configuration and no policy on the hub", func() bool { return !g.Needed() })

	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny-proxy"}}
	if _, err := hub.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a policy to make admission needed", g.Needed)
	if err := hub.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, policy.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "admission to be skipped again", func() bool { return !g.Needed() })

	hook := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "hook"}}
	if _, err := hub.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, hook, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a webhook configuration to make admission needed", g.Needed)

	// A plugin the gate does not know could act on CONNECT: no gate.
	if g := NewConnectAdmissionGate(f, append(connectPlugins, "SomethingElse")); g != nil {
		t.Error("a gate although an unknown plugin is enabled")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

type gateFunc func() bool

func (g gateFunc) Needed() bool { return g() }

// With the gate closed, the handler does not ask admission at all.
func TestSkipsAdmissionWhenNothingCanRefuse(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := gatewayv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	for _, needed := range []bool{false, true} {
		admit := &denyConnect{deny: "member-a"}
		h := New(Config{Clusters: &fakeClusters{err: errors.New("not compiled")}, Objects: &fakeGetter{}, Forwarder: testForwarder, Admission: admit, Scheme: scheme, Serializer: serializer.NewCodecFactory(scheme)})
		h.gate = gateFunc(func() bool { return needed })
		req := httptest.NewRequest(http.MethodGet, "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-a/proxy/api", nil)
		req = req.WithContext(genericapirequest.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"}))
		rec := httptest.NewRecorder()
		h.Serve(rec, req, "member-a", "/api")
		if asked := len(admit.attrs) == 1; asked != needed {
			t.Errorf("gate says needed=%v: admission asked %d times", needed, len(admit.attrs))
		}
		if needed && rec.Code != http.StatusForbidden {
			t.Errorf("gate open: response %d, want the plugin's 403", rec.Code)
		}
	}
}
