package upstreamcluster

import (
	"context"
	"reflect"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

func TestProxyRESTMetadata(t *testing.T) {
	var r ProxyREST
	opts, subpath, key := r.NewConnectOptions()
	if _, ok := opts.(*gatewayv1alpha1.UpstreamClusterProxyOptions); !ok || !subpath || key != "path" {
		t.Errorf("NewConnectOptions = %T, %v, %q", opts, subpath, key)
	}
	want := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
	if got := r.ConnectMethods(); !reflect.DeepEqual(got, want) {
		t.Errorf("ConnectMethods = %v, want %v", got, want)
	}
	// Requests are served by proxy/handler; one that reaches Connect is a bug.
	if h, err := r.Connect(context.Background(), "member-a", &gatewayv1alpha1.UpstreamClusterProxyOptions{}, nil); h != nil || !apierrors.IsInternalError(err) {
		t.Errorf("Connect = %v, %v; want no handler and an internal error", h, err)
	}
}
