package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewharf/kube-gateway/test/harness"
)

// The members behave like clusters: a namespace created through the hub and the
// gateway gets its default ServiceAccount, and deleted the same way it goes
// away with what it held instead of staying Terminating.
func TestControllersNamespaceDeletedThroughGatewayGoesAway(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	const ns = "controllers-e2e-ns"
	kc := harness.UserAdmin + "@" + harness.MemberB
	if _, _, err := env.Kubectl(ctx, kc, "create", "namespace", ns); err != nil {
		t.Fatal(err)
	}
	cs := memberB(t)
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	if _, _, err := env.Kubectl(ctx, kc, "-n", ns, "create", "configmap", "content", "--from-literal=k=v"); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func(ctx context.Context) error {
		_, _, err := env.Kubectl(ctx, kc, "-n", ns, "get", "serviceaccount", "default")
		return err
	})

	if _, _, err := env.Kubectl(ctx, kc, "delete", "namespace", ns, "--wait=false"); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func(context.Context) error {
		// The test's ctx, so that the last error is the namespace's state
		// rather than the poll's deadline.
		got, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return errorf("namespace %s on member-b is still %s: %+v", ns, got.Status.Phase, got.Status.Conditions)
	})
	_, stderr, err := env.Kubectl(ctx, kc, "get", "namespace", ns)
	if err == nil || !strings.Contains(stderr, "NotFound") {
		t.Fatalf("namespace %s through the gateway after its deletion: %v %s, want NotFound", ns, err, stderr)
	}
}

// A long-lived token Secret (kubernetes.io/service-account-token) on a member is
// filled in with a token that authenticates as its ServiceAccount and the
// member's CA.
func TestControllersFillServiceAccountTokenSecret(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	const ns, sa = "controllers-e2e-token", "robot"
	member := env.Members[harness.MemberB]
	cs := memberB(t)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: sa + "-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: sa}},
		Type:       corev1.SecretTypeServiceAccountToken,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var secret *corev1.Secret
	eventually(t, time.Minute, func(ctx context.Context) error {
		s, err := cs.CoreV1().Secrets(ns).Get(ctx, sa+"-token", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(s.Data[corev1.ServiceAccountTokenKey]) == 0 {
			return errorf("Secret %s/%s has no token yet (keys %v)", ns, s.Name, keys(s.Data))
		}
		secret = s
		return nil
	})
	if !bytes.Equal(secret.Data[corev1.ServiceAccountRootCAKey], member.CAData) {
		t.Fatalf("ca.crt of the token Secret is not member-b's CA:\n%s", secret.Data[corev1.ServiceAccountRootCAKey])
	}
	robot, err := kubernetes.NewForConfig(&rest.Config{
		Host:            member.Servers[0].URL,
		BearerToken:     string(secret.Data[corev1.ServiceAccountTokenKey]),
		TLSClientConfig: rest.TLSClientConfig{CAData: secret.Data[corev1.ServiceAccountRootCAKey]},
	})
	if err != nil {
		t.Fatal(err)
	}
	review, err := robot.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "system:serviceaccount:" + ns + ":" + sa; review.Status.UserInfo.Username != want {
		t.Fatalf("the token authenticates as %q, want %q", review.Status.UserInfo.Username, want)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
