package multicluster_test

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubewharf/kube-gateway/apis/client/multicluster"
)

// A client for one member, from the hub kubeconfig.
func ExampleConfigFor() {
	hub, err := clientcmd.BuildConfigFromFlags("", "hub.kubeconfig")
	if err != nil {
		panic(err)
	}
	cfg, err := multicluster.ConfigFor(hub, "member-a")
	if err != nil {
		panic(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	pods, err := client.CoreV1().Pods("default").List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(pods.Items), "pods on member-a")
}

// One client for the hub and every member: the request's context picks the
// cluster.
func ExampleRoutingConfig() {
	hub, err := clientcmd.BuildConfigFromFlags("", "hub.kubeconfig")
	if err != nil {
		panic(err)
	}
	client := kubernetes.NewForConfigOrDie(multicluster.RoutingConfig(hub))
	ctx := context.TODO()
	for _, cluster := range []string{"member-a", "member-b", multicluster.Local} {
		list, err := client.CoreV1().Namespaces().List(multicluster.WithCluster(ctx, cluster), metav1.ListOptions{})
		if err != nil {
			panic(err)
		}
		fmt.Println(cluster, len(list.Items), "namespaces")
	}
}
