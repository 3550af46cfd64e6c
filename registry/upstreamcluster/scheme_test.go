package upstreamcluster

import (
	"net/url"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

func TestAddToScheme(t *testing.T) {
	scheme := testScheme(t)
	// The proxy subresource's options come from the query string.
	opts := &gatewayv1alpha1.UpstreamClusterProxyOptions{}
	values := url.Values{"path": []string{"/api/v1/pods"}}
	if err := scheme.Convert(&values, opts, nil); err != nil {
		t.Fatalf("Convert url.Values: %v", err)
	}
	if opts.Path != "/api/v1/pods" {
		t.Errorf("Path = %q, want /api/v1/pods", opts.Path)
	}
}

// What the server reads back from etcd is defaulted on decode: the storage
// codec is the scheme's LegacyCodec (cmd/kube-gateway/app/options.go), whose
// decoder runs the scheme's defaulters. An object stored before a default
// existed (here: with no healthCheck and an unnamed policy) reaches the watch
// cache, and the data plane's informer, with the defaults filled in.
func TestStorageCodecDefaultsOnDecode(t *testing.T) {
	const stored = `{"apiVersion":"gateway.kubewharf.io/v1alpha1","kind":"UpstreamCluster","metadata":{"name":"old"},` +
		`"spec":{"servers":[{"endpoint":"https://192.0.2.10:6443"}],"dispatchPolicies":[{"rules":[{"verbs":["get"]}]}]}}`
	codec := serializer.NewCodecFactory(testScheme(t)).LegacyCodec(gatewayv1alpha1.SchemeGroupVersion)
	obj, err := runtime.Decode(codec, []byte(stored))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	uc := obj.(*gatewayv1alpha1.UpstreamCluster)
	want := gatewayv1alpha1.HealthCheck{Path: "/readyz", IntervalSeconds: 5, TimeoutSeconds: 2, UnhealthyThreshold: 2, HealthyThreshold: 1}
	if uc.Spec.HealthCheck == nil || *uc.Spec.HealthCheck != want {
		t.Errorf("healthCheck = %+v, want %+v", uc.Spec.HealthCheck, want)
	}
	if p := uc.Spec.DispatchPolicies[0]; p.Name != "policy-0" || p.Strategy != gatewayv1alpha1.RoundRobin {
		t.Errorf("dispatch policy = name %q strategy %q, want policy-0 RoundRobin", p.Name, p.Strategy)
	}
}
