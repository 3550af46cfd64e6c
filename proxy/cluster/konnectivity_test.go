package cluster_test

import (
	"crypto/x509"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/test/testca"
)

func tunnelled() *gatewayv1alpha1.UpstreamCluster {
	uc := upstreamCluster("https://kubernetes.default.svc")
	uc.Spec.ClientConfig.Konnectivity = &gatewayv1alpha1.KonnectivityConfig{
		Address:   "127.0.0.1:8090",
		SecretRef: gatewayv1alpha1.SecretReference{Namespace: "kube-gateway", Name: "konnectivity"},
	}
	return uc
}

func tunnelSecret(data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-gateway", Name: "konnectivity"}, Data: data}
}

// The konnectivity Secret is read like the credential Secret: missing or
// incomplete, the cluster is not compiled and the reason names the Secret.
func TestKonnectivitySecret(t *testing.T) {
	ca := testca.New(t, "konnectivity-ca")
	leaf := ca.Issue(t, testca.Spec{CommonName: "kube-gateway", Usage: x509.ExtKeyUsageClientAuth})
	cred := secret(map[string][]byte{"token": []byte(token)})
	for name, tt := range map[string]struct {
		secret     *corev1.Secret
		reason     string
		msg        string
		compiledOK bool
	}{
		"missing":  {nil, cluster.ReasonSecretNotFound, "konnectivity Secret kube-gateway/konnectivity (spec.clientConfig.konnectivity.secretRef) was not found", false},
		"no ca":    {tunnelSecret(map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM}), cluster.ReasonInvalidSecret, `has no "ca.crt"`, false},
		"bad pair": {tunnelSecret(map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": ca.Issue(t, testca.Spec{CommonName: "x"}).KeyPEM, "ca.crt": ca.PEM}), cluster.ReasonInvalidSecret, "not a usable certificate and key", false},
		"complete": {tunnelSecret(map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM, "ca.crt": ca.PEM}), "", "", true},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := cluster.CompileTunneled(tunnelled(), cred, tt.secret, nil, nil, cluster.Options{})
			if tt.compiledOK {
				if err != nil {
					t.Fatal(err)
				}
				c.Release(nil)
				return
			}
			if err == nil || cluster.ConfigErrorReason(err) != tt.reason || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %v (reason %s), want reason %s with %q", err, cluster.ConfigErrorReason(err), tt.reason, tt.msg)
			}
		})
	}
}

// A recompile with the same credential and konnectivity settings keeps the
// transports, so the tunnel's gRPC connection and the HTTP connections over it
// stay; another konnectivity address, or another list of them, builds new ones.
func TestKonnectivityTunnelKeptAcrossRecompiles(t *testing.T) {
	ca := testca.New(t, "konnectivity-ca")
	leaf := ca.Issue(t, testca.Spec{CommonName: "kube-gateway", Usage: x509.ExtKeyUsageClientAuth})
	cred := secret(map[string][]byte{"token": []byte(token)})
	ts := tunnelSecret(map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM, "ca.crt": ca.PEM})
	first, err := cluster.CompileTunneled(tunnelled(), cred, ts, nil, nil, cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	same, err := cluster.CompileTunneled(tunnelled(), cred, ts, first, nil, cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if same.Transports(same.Endpoints[0]) != first.Transports(first.Endpoints[0]) {
		t.Error("an unchanged konnectivity configuration got new transports")
	}
	first.Release(same)
	moved := tunnelled()
	moved.Spec.ClientConfig.Konnectivity.Address = "127.0.0.1:8091"
	other, err := cluster.CompileTunneled(moved, cred, ts, same, nil, cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if other.Transports(other.Endpoints[0]) == same.Transports(same.Endpoints[0]) {
		t.Error("another konnectivity server kept the transports of the previous one")
	}
	same.Release(other)
	more := tunnelled()
	more.Spec.ClientConfig.Konnectivity.Address = ""
	more.Spec.ClientConfig.Konnectivity.Addresses = []string{"127.0.0.1:8091", "127.0.0.1:8092"}
	two, err := cluster.CompileTunneled(more, cred, ts, other, nil, cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if two.Transports(two.Endpoints[0]) == other.Transports(other.Endpoints[0]) {
		t.Error("a second konnectivity server kept the transports that knew only the first")
	}
	other.Release(two)
	two.Release(nil)
}
