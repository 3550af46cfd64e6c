package v1alpha1_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

func TestSetDefaultsUpstreamCluster(t *testing.T) {
	defaultHC := gatewayv1alpha1.HealthCheck{
		Path:               "/readyz",
		IntervalSeconds:    5,
		TimeoutSeconds:     2,
		UnhealthyThreshold: 2,
		HealthyThreshold:   1,
	}
	tests := []struct {
		name           string
		in             gatewayv1alpha1.UpstreamClusterSpec
		wantHC         gatewayv1alpha1.HealthCheck
		wantStrategies []gatewayv1alpha1.Strategy
	}{
		{
			name:   "no healthCheck",
			in:     gatewayv1alpha1.UpstreamClusterSpec{},
			wantHC: defaultHC,
		},
		{
			name:   "empty healthCheck",
			in:     gatewayv1alpha1.UpstreamClusterSpec{HealthCheck: &gatewayv1alpha1.HealthCheck{}},
			wantHC: defaultHC,
		},
		{
			name: "set values are kept, missing ones filled",
			in: gatewayv1alpha1.UpstreamClusterSpec{HealthCheck: &gatewayv1alpha1.HealthCheck{
				Path: "/livez", TimeoutSeconds: 7, HealthyThreshold: 4,
			}},
			wantHC: gatewayv1alpha1.HealthCheck{
				Path: "/livez", IntervalSeconds: 5, TimeoutSeconds: 7, UnhealthyThreshold: 2, HealthyThreshold: 4,
			},
		},
		{
			name: "every value set",
			in: gatewayv1alpha1.UpstreamClusterSpec{HealthCheck: &gatewayv1alpha1.HealthCheck{
				Path: "/healthz", IntervalSeconds: 30, TimeoutSeconds: 10, UnhealthyThreshold: 5, HealthyThreshold: 3,
			}},
			wantHC: gatewayv1alpha1.HealthCheck{
				Path: "/healthz", IntervalSeconds: 30, TimeoutSeconds: 10, UnhealthyThreshold: 5, HealthyThreshold: 3,
			},
		},
		{
			name: "dispatch policy strategies",
			in: gatewayv1alpha1.UpstreamClusterSpec{DispatchPolicies: []gatewayv1alpha1.DispatchPolicy{
				{}, {Strategy: gatewayv1alpha1.LeastRequest}, {Strategy: ""}, {Strategy: gatewayv1alpha1.Random},
			}},
			wantHC: defaultHC,
			wantStrategies: []gatewayv1alpha1.Strategy{
				gatewayv1alpha1.RoundRobin, gatewayv1alpha1.LeastRequest, gatewayv1alpha1.RoundRobin, gatewayv1alpha1.Random,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uc := &gatewayv1alpha1.UpstreamCluster{Spec: *tt.in.DeepCopy()}
			gatewayv1alpha1.SetObjectDefaults_UpstreamCluster(uc)
			if uc.Spec.HealthCheck == nil {
				t.Fatal("healthCheck not defaulted")
			}
			if *uc.Spec.HealthCheck != tt.wantHC {
				t.Errorf("healthCheck = %+v, want %+v", *uc.Spec.HealthCheck, tt.wantHC)
			}
			var got []gatewayv1alpha1.Strategy
			for _, p := range uc.Spec.DispatchPolicies {
				got = append(got, p.Strategy)
			}
			if !equality.Semantic.DeepEqual(got, tt.wantStrategies) {
				t.Errorf("strategies = %v, want %v", got, tt.wantStrategies)
			}

			// Idempotent.
			again := uc.DeepCopy()
			gatewayv1alpha1.SetObjectDefaults_UpstreamCluster(again)
			if !equality.Semantic.DeepEqual(again, uc) {
				t.Errorf("defaulting twice changed the object: %+v -> %+v", uc.Spec, again.Spec)
			}
		})
	}
}

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := gatewayv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatalf("AddToScheme: %v", err)
	}
	return scheme
}

func TestDecodeAppliesDefaults(t *testing.T) {
	const manifest = `{
  "apiVersion": "gateway.kubewharf.io/v1alpha1",
  "kind": "UpstreamCluster",
  "metadata": {"name": "member-a"},
  "spec": {
    "servers": [{"endpoint": "https://192.0.2.10:6443"}],
    "clientConfig": {"secretRef": {"namespace": "kube-gateway", "name": "member-a"}},
    "healthCheck": {"timeoutSeconds": 3},
    "dispatchPolicies": [{"rules": [{"verbs": ["list"], "resources": ["pods"]}]}, {"strategy": "Random"}]
  }
}`
	scheme := newScheme(t)
	codecs := serializer.NewCodecFactory(scheme)
	decoders := map[string]runtime.Decoder{
		"UniversalDecoder(v1alpha1)": codecs.UniversalDecoder(gatewayv1alpha1.SchemeGroupVersion),
		"UniversalDecoder()":         codecs.UniversalDecoder(),
	}
	for name, dec := range decoders {
		t.Run(name, func(t *testing.T) {
			obj, gvk, err := dec.Decode([]byte(manifest), nil, nil)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			wantGVK := gatewayv1alpha1.SchemeGroupVersion.WithKind("UpstreamCluster")
			if *gvk != wantGVK {
				t.Errorf("gvk = %v, want %v", gvk, wantGVK)
			}
			uc, ok := obj.(*gatewayv1alpha1.UpstreamCluster)
			if !ok {
				t.Fatalf("decoded %T, want *UpstreamCluster", obj)
			}
			if uc.Name != "member-a" || len(uc.Spec.Servers) != 1 || uc.Spec.Servers[0].Endpoint != "https://192.0.2.10:6443" {
				t.Errorf("decoded object lost fields: %+v", uc)
			}
			wantHC := gatewayv1alpha1.HealthCheck{Path: "/readyz", IntervalSeconds: 5, TimeoutSeconds: 3, UnhealthyThreshold: 2, HealthyThreshold: 1}
			if uc.Spec.HealthCheck == nil || *uc.Spec.HealthCheck != wantHC {
				t.Errorf("healthCheck = %+v, want %+v", uc.Spec.HealthCheck, wantHC)
			}
			if len(uc.Spec.DispatchPolicies) != 2 ||
				uc.Spec.DispatchPolicies[0].Strategy != gatewayv1alpha1.RoundRobin ||
				uc.Spec.DispatchPolicies[1].Strategy != gatewayv1alpha1.Random {
				t.Errorf("dispatch policies = %+v, want strategies RoundRobin, Random", uc.Spec.DispatchPolicies)
			}
		})
	}
}

// The deserializer does not default: it shows that the assertions above see the
// work of the decoder's defaulting and not something the manifest already holds.
func TestDeserializerDoesNotDefault(t *testing.T) {
	const manifest = `{"apiVersion": "gateway.kubewharf.io/v1alpha1", "kind": "UpstreamCluster",
  "metadata": {"name": "member-a"}, "spec": {"healthCheck": {"timeoutSeconds": 3}}}`
	codecs := serializer.NewCodecFactory(newScheme(t))
	obj, _, err := codecs.UniversalDeserializer().Decode([]byte(manifest), nil, nil)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	hc := obj.(*gatewayv1alpha1.UpstreamCluster).Spec.HealthCheck
	if hc == nil || *hc != (gatewayv1alpha1.HealthCheck{TimeoutSeconds: 3}) {
		t.Errorf("healthCheck = %+v, want only timeoutSeconds 3", hc)
	}
}

func TestSchemeRegistration(t *testing.T) {
	scheme := newScheme(t)
	for _, kind := range []string{"UpstreamCluster", "UpstreamClusterList", "UpstreamClusterProxyOptions"} {
		for _, gv := range []schema.GroupVersion{gatewayv1alpha1.SchemeGroupVersion, {Group: gatewayv1alpha1.GroupName, Version: runtime.APIVersionInternal}} {
			if !scheme.Recognizes(gv.WithKind(kind)) {
				t.Errorf("scheme does not recognize %v", gv.WithKind(kind))
			}
		}
	}
	if got := gatewayv1alpha1.Resource("upstreamclusters"); got != (schema.GroupResource{Group: "gateway.kubewharf.io", Resource: "upstreamclusters"}) {
		t.Errorf("Resource = %v", got)
	}
}

// Lists are defaulted item by item (the generated SetObjectDefaults_UpstreamClusterList).
func TestDecodeListAppliesDefaults(t *testing.T) {
	const manifest = `{"apiVersion": "gateway.kubewharf.io/v1alpha1", "kind": "UpstreamClusterList",
  "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}, "spec": {"healthCheck": {"path": "/livez"}}}]}`
	codecs := serializer.NewCodecFactory(newScheme(t))
	obj, _, err := codecs.UniversalDecoder(gatewayv1alpha1.SchemeGroupVersion).Decode([]byte(manifest), nil, nil)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	list := obj.(*gatewayv1alpha1.UpstreamClusterList)
	for i, want := range []string{"/readyz", "/livez"} {
		if hc := list.Items[i].Spec.HealthCheck; hc == nil || hc.Path != want || hc.IntervalSeconds != 5 {
			t.Errorf("items[%d].spec.healthCheck = %+v, want path %s and the other defaults", i, hc, want)
		}
	}
}

// A member door's token reviews default to on with KubeGateway's lifetimes;
// set values stay; no door, nothing added.
func TestSetDefaultsTokenReview(t *testing.T) {
	uc := &gatewayv1alpha1.UpstreamCluster{}
	gatewayv1alpha1.SetDefaults_UpstreamCluster(uc)
	if uc.Spec.SecureServing != nil {
		t.Fatalf("secureServing %+v added to a cluster without a door", uc.Spec.SecureServing)
	}
	uc.Spec.SecureServing = &gatewayv1alpha1.SecureServing{}
	gatewayv1alpha1.SetDefaults_UpstreamCluster(uc)
	if got, want := *uc.Spec.SecureServing.TokenReview, (gatewayv1alpha1.TokenReview{CacheTTLSeconds: 600, FailureCacheTTLSeconds: 10}); got != want {
		t.Errorf("tokenReview %+v, want %+v", got, want)
	}
	uc.Spec.SecureServing.TokenReview = &gatewayv1alpha1.TokenReview{Disabled: true, FailureCacheTTLSeconds: 3}
	gatewayv1alpha1.SetDefaults_UpstreamCluster(uc)
	if got, want := *uc.Spec.SecureServing.TokenReview, (gatewayv1alpha1.TokenReview{Disabled: true, CacheTTLSeconds: 600, FailureCacheTTLSeconds: 3}); got != want {
		t.Errorf("tokenReview %+v, want %+v", got, want)
	}
}
