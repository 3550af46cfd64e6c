package clusterset

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/testca"
)

// The konnectivity Secret is watched like the credential Secret: a cluster
// waiting for it compiles once it appears.
func TestControllerWatchesTheKonnectivitySecret(t *testing.T) {
	uc := &gatewayv1alpha1.UpstreamCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "member-a", UID: "uid-a", Generation: 1, ResourceVersion: "1"},
		Spec: gatewayv1alpha1.UpstreamClusterSpec{
			Servers: []gatewayv1alpha1.UpstreamServer{{Endpoint: "https://kubernetes.default.svc"}},
			ClientConfig: gatewayv1alpha1.ClientConfig{
				SecretRef: gatewayv1alpha1.SecretReference{Namespace: "kube-gateway", Name: "member-a-cred"},
				Konnectivity: &gatewayv1alpha1.KonnectivityConfig{Address: "127.0.0.1:8090",
					SecretRef: gatewayv1alpha1.SecretReference{Namespace: "kube-gateway", Name: "konnectivity"}},
			},
		},
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &gatewayv1alpha1.UpstreamClusterList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []gatewayv1alpha1.UpstreamCluster{*uc}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
	}
	hub := fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-gateway", Name: "member-a-cred"},
		Data:       map[string][]byte{"token": []byte("t")},
	})
	factory := informers.NewSharedInformerFactoryWithOptions(hub, 0, informers.WithNamespace("kube-gateway"))
	log := &hookLog{}
	c, err := NewController(plainListWatch{lw}, factory.Core().V1().Secrets().Informer(), log.hooks())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	go c.Run(ctx)

	poll(t, "the missing konnectivity Secret to be reported", func() bool { inv, _ := log.snapshot(); return len(inv) > 0 })
	if invalid, _ := log.snapshot(); !strings.Contains(invalid[0], "konnectivity Secret kube-gateway/konnectivity (spec.clientConfig.konnectivity.secretRef) was not found") {
		t.Fatalf("invalid %q", invalid)
	}
	ca := testca.New(t, "konnectivity-ca")
	leaf := ca.Issue(t, testca.Spec{CommonName: "kube-gateway", Usage: x509.ExtKeyUsageClientAuth})
	if _, err := hub.CoreV1().Secrets("kube-gateway").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-gateway", Name: "konnectivity"},
		Data:       map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM, "ca.crt": ca.PEM},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the cluster to compile once the konnectivity Secret exists", func() bool { _, obs := log.snapshot(); return len(obs) > 0 })
	cl, err := c.Lookup("member-a")
	if err != nil {
		t.Fatal(err)
	}
	cl.CloseIdleConnections()
}
