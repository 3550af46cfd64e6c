package upstreamcluster

import (
	"net/url"
	"testing"

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
