package cli

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubewharf/kube-gateway/apis/client/clientset/versioned"
	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// waitReady waits until UpstreamCluster name reports Ready=True for its
// current generation.
func waitReady(ctx context.Context, client versioned.Interface, name string, timeout time.Duration) error {
	last := "not observed yet"
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		uc, err := client.GatewayV1alpha1().UpstreamClusters().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		cond := meta.FindStatusCondition(uc.Status.Conditions, gatewayv1alpha1.ConditionReady)
		switch {
		case uc.Status.ObservedGeneration < uc.Generation || cond == nil:
			last = "the gateway has not reported on the current spec yet"
		case cond.Status != metav1.ConditionTrue:
			last = fmt.Sprintf("Ready=%s %s: %s", cond.Status, cond.Reason, cond.Message)
		default:
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("upstreamcluster %s is not Ready after %s (%s): see `kubectl get upstreamcluster %s -o yaml` and the gateway's log", name, timeout, last, name)
	}
	return nil
}
