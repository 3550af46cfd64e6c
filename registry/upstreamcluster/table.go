package upstreamcluster

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// tableConvertor gives `kubectl get upstreamclusters` its columns.
type tableConvertor struct{}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the member cluster."},
	{Name: "Servers", Type: "integer", Description: "Enabled apiserver endpoints."},
	{Name: "Healthy", Type: "string", Description: "Healthy endpoints as observed by the gateway."},
	{Name: "Ready", Type: "string", Description: "Status of the Ready condition."},
	{Name: "Age", Type: "string", Description: "Time since creation."},
	{Name: "Endpoints", Type: "string", Priority: 1, Description: "The apiserver endpoints."},
}

func (tableConvertor) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{ColumnDefinitions: columns}
	var items []gatewayv1alpha1.UpstreamCluster
	switch o := obj.(type) {
	case *gatewayv1alpha1.UpstreamCluster:
		items = []gatewayv1alpha1.UpstreamCluster{*o}
		table.ResourceVersion = o.ResourceVersion
	case *gatewayv1alpha1.UpstreamClusterList:
		items = o.Items
		table.ResourceVersion, table.Continue, table.RemainingItemCount = o.ResourceVersion, o.Continue, o.RemainingItemCount
	default:
		return nil, fmt.Errorf("cannot convert %T to a table", obj)
	}
	for i := range items {
		uc := &items[i]
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells:  row(uc),
			Object: runtime.RawExtension{Object: uc},
		})
	}
	return table, nil
}

func row(uc *gatewayv1alpha1.UpstreamCluster) []interface{} {
	enabled := 0
	endpoints := make([]string, 0, len(uc.Spec.Servers))
	for _, s := range uc.Spec.Servers {
		if !s.Disabled {
			enabled++
		}
		endpoints = append(endpoints, s.Endpoint)
	}
	healthy := "<unknown>"
	if len(uc.Status.Servers) > 0 {
		n := 0
		for _, s := range uc.Status.Servers {
			if s.Healthy != nil && *s.Healthy {
				n++
			}
		}
		healthy = fmt.Sprintf("%d/%d", n, len(uc.Status.Servers))
	}
	ready := "Unknown"
	if c := meta.FindStatusCondition(uc.Status.Conditions, gatewayv1alpha1.ConditionReady); c != nil {
		ready = string(c.Status)
	}
	age := "<unknown>"
	if !uc.CreationTimestamp.IsZero() {
		age = duration.HumanDuration(metav1.Now().Sub(uc.CreationTimestamp.Time))
	}
	return []interface{}{uc.Name, int64(enabled), healthy, ready, age, strings.Join(endpoints, ",")}
}
