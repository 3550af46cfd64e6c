// Package clustertest compiles UpstreamClusters for the tests of the data
// plane, as the gateway does when it loads one.
package clustertest

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
)

// SecretNamespace is where the credential Secret of every compiled cluster is.
const SecretNamespace = "kube-gateway"

// Compile compiles UpstreamCluster name with servers endpoints, trusting caPEM
// (a PEM bundle), with a credential Secret holding token; mutate, if set,
// changes the UpstreamCluster first. The cluster's connections are released
// when the test ends.
func Compile(tb testing.TB, name, token string, caPEM []byte, mutate func(*gatewayv1alpha1.UpstreamCluster), endpoints ...string) *cluster.Cluster {
	tb.Helper()
	uc := &gatewayv1alpha1.UpstreamCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gatewayv1alpha1.UpstreamClusterSpec{
			ClientConfig: gatewayv1alpha1.ClientConfig{
				SecretRef: gatewayv1alpha1.SecretReference{Namespace: SecretNamespace, Name: name},
				CAData:    caPEM,
			},
		},
	}
	for _, e := range endpoints {
		uc.Spec.Servers = append(uc.Spec.Servers, gatewayv1alpha1.UpstreamServer{Endpoint: e})
	}
	if mutate != nil {
		mutate(uc)
	}
	c, err := cluster.Compile(uc, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: SecretNamespace, Name: name},
		Data:       map[string][]byte{"token": []byte(token)},
	}, nil, nil, cluster.Options{})
	if err != nil {
		tb.Fatalf("Compile: %v", err)
	}
	tb.Cleanup(func() { c.Release(nil) })
	return c
}
