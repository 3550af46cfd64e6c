package client_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayac "github.com/kubewharf/kube-gateway/apis/client/applyconfiguration/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/apis/client/clientset/versioned/fake"
	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// An UpstreamCluster as the hub returns it: manager "a" applied a label, one
// server and (on the status subresource) a condition; manager "b" applied
// another label, another server and the client config; "a" also updated (not
// applied) the health check.
func managedCluster() *gatewayv1alpha1.UpstreamCluster {
	fields := func(s string) *metav1.FieldsV1 { return &metav1.FieldsV1{Raw: []byte(s)} }
	return &gatewayv1alpha1.UpstreamCluster{
		TypeMeta: metav1.TypeMeta{APIVersion: "gateway.kubewharf.io/v1alpha1", Kind: "UpstreamCluster"},
		ObjectMeta: metav1.ObjectMeta{
			Name:   "member-a",
			Labels: map[string]string{"team": "x", "env": "prod"},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "a", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "gateway.kubewharf.io/v1alpha1",
				FieldsType: "FieldsV1",
				FieldsV1: fields(`{"f:metadata":{"f:labels":{"f:team":{}}},` +
					`"f:spec":{"f:servers":{"k:{\"endpoint\":\"https://192.0.2.10:6443\"}":{".":{},"f:endpoint":{},"f:disabled":{}}}}}`),
			}, {
				Manager: "b", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "gateway.kubewharf.io/v1alpha1",
				FieldsType: "FieldsV1",
				FieldsV1: fields(`{"f:metadata":{"f:labels":{"f:env":{}}},` +
					`"f:spec":{"f:clientConfig":{"f:secretRef":{"f:namespace":{},"f:name":{}}},` +
					`"f:servers":{"k:{\"endpoint\":\"https://192.0.2.11:6443\"}":{".":{},"f:endpoint":{}}}}}`),
			}, {
				Manager: "a", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "gateway.kubewharf.io/v1alpha1",
				FieldsType: "FieldsV1",
				FieldsV1:   fields(`{"f:spec":{"f:healthCheck":{".":{},"f:path":{}}}}`),
			}, {
				Manager: "a", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "gateway.kubewharf.io/v1alpha1",
				FieldsType: "FieldsV1", Subresource: "status",
				FieldsV1: fields(`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:type":{},"f:status":{},"f:reason":{}}}}}`),
			}},
		},
		Spec: gatewayv1alpha1.UpstreamClusterSpec{
			Servers: []gatewayv1alpha1.UpstreamServer{
				{Endpoint: "https://192.0.2.10:6443", Disabled: true},
				{Endpoint: "https://192.0.2.11:6443"},
			},
			ClientConfig: gatewayv1alpha1.ClientConfig{
				SecretRef:  gatewayv1alpha1.SecretReference{Namespace: "kube-gateway", Name: "member-a"},
				ServerName: "member-a.example",
			},
			HealthCheck: &gatewayv1alpha1.HealthCheck{Path: "/readyz"},
		},
		Status: gatewayv1alpha1.UpstreamClusterStatus{
			ObservedGeneration: 3,
			Conditions: []metav1.Condition{
				{Type: "Ready", Status: metav1.ConditionTrue, Reason: "ServersReady", Message: "2 of 2"},
				{Type: "InsecureTransport", Status: metav1.ConditionFalse, Reason: "Verified"},
			},
		},
	}
}

func TestExtractUpstreamCluster(t *testing.T) {
	for _, tc := range []struct {
		name    string
		manager string
		status  bool // ExtractUpstreamClusterStatus
		want    string
	}{{
		name:    "a",
		manager: "a",
		want: `{"apiVersion":"gateway.kubewharf.io/v1alpha1","kind":"UpstreamCluster",
			"metadata":{"name":"member-a","labels":{"team":"x"}},
			"spec":{"servers":[{"endpoint":"https://192.0.2.10:6443","disabled":true}]}}`,
	}, {
		name:    "b",
		manager: "b",
		want: `{"apiVersion":"gateway.kubewharf.io/v1alpha1","kind":"UpstreamCluster",
			"metadata":{"name":"member-a","labels":{"env":"prod"}},
			"spec":{"servers":[{"endpoint":"https://192.0.2.11:6443"}],
				"clientConfig":{"secretRef":{"namespace":"kube-gateway","name":"member-a"}}}}`,
	}, {
		name:    "a status",
		manager: "a",
		status:  true,
		want: `{"apiVersion":"gateway.kubewharf.io/v1alpha1","kind":"UpstreamCluster",
			"metadata":{"name":"member-a"},
			"status":{"conditions":[{"type":"Ready","status":"True","reason":"ServersReady"}]}}`,
	}, {
		name:    "unknown manager",
		manager: "c",
		want:    `{"apiVersion":"gateway.kubewharf.io/v1alpha1","kind":"UpstreamCluster","metadata":{"name":"member-a"}}`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			uc := managedCluster()
			before := uc.DeepCopy()
			extract := gatewayac.ExtractUpstreamCluster
			if tc.status {
				extract = gatewayac.ExtractUpstreamClusterStatus
			}
			ac, err := extract(uc, tc.manager)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(uc, before) {
				t.Error("Extract modified its input")
			}
			got, err := json.Marshal(ac)
			if err != nil {
				t.Fatal(err)
			}
			var gotV, wantV interface{}
			if err := json.Unmarshal(got, &gotV); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.want), &wantV); err != nil {
				t.Fatalf("bad want: %v", err)
			}
			if !reflect.DeepEqual(gotV, wantV) {
				t.Errorf("extracted\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// Read-modify-apply: what a manager extracts, changes and applies again is
// the apply configuration it would have written by hand.
func TestExtractModifyUpstreamCluster(t *testing.T) {
	ac, err := gatewayac.ExtractUpstreamCluster(managedCluster(), "a")
	if err != nil {
		t.Fatal(err)
	}
	ac.Spec.WithServers(gatewayac.UpstreamServer().WithEndpoint("https://192.0.2.12:6443"))
	want := gatewayac.UpstreamCluster("member-a").WithLabels(map[string]string{"team": "x"}).
		WithSpec(gatewayac.UpstreamClusterSpec().WithServers(
			gatewayac.UpstreamServer().WithEndpoint("https://192.0.2.10:6443").WithDisabled(true),
			gatewayac.UpstreamServer().WithEndpoint("https://192.0.2.12:6443"),
		))
	if !reflect.DeepEqual(ac, want) {
		a, _ := json.Marshal(ac)
		w, _ := json.Marshal(want)
		t.Errorf("got\n%s\nwant\n%s", a, w)
	}
}

// The fake clientset applies with the same schema: a unit test can use Apply,
// and a server the manager no longer applies leaves the list.
func TestFakeClientsetApply(t *testing.T) {
	ctx := context.Background()
	clusters := fake.NewClientset().GatewayV1alpha1().UpstreamClusters()
	config := func(endpoints ...string) *gatewayac.UpstreamClusterApplyConfiguration {
		spec := gatewayac.UpstreamClusterSpec()
		for _, e := range endpoints {
			spec.WithServers(gatewayac.UpstreamServer().WithEndpoint(e))
		}
		return gatewayac.UpstreamCluster("member-a").WithSpec(spec)
	}
	opts := metav1.ApplyOptions{FieldManager: "a", Force: true}
	if _, err := clusters.Apply(ctx, config("https://192.0.2.10:6443", "https://192.0.2.11:6443"), opts); err != nil {
		t.Fatalf("apply: %v", err)
	}
	second, err := clusters.Apply(ctx, config("https://192.0.2.11:6443"), opts)
	if err != nil {
		t.Fatalf("second apply: %v", err)
	}
	if got := second.Spec.Servers; len(got) != 1 || got[0].Endpoint != "https://192.0.2.11:6443" {
		t.Fatalf("servers after the second apply: %+v, want only https://192.0.2.11:6443", got)
	}
	extracted, err := gatewayac.ExtractUpstreamCluster(second, "a")
	if err != nil {
		t.Fatal(err)
	}
	if want := config("https://192.0.2.11:6443"); !reflect.DeepEqual(extracted, want) {
		got, _ := json.Marshal(extracted)
		t.Errorf("extracted %s", got)
	}
}
