package e2e

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/harness"
	"github.com/kubewharf/kube-gateway/test/testca"
)

// doorKubeconfig writes a kubeconfig that reaches the member door at the
// gateway's door address under server name serverName (kubectl's
// tls-server-name: no DNS needed on loopback), with the credential auth.
func doorKubeconfig(t *testing.T, serverName string, caPEM []byte, auth *clientcmdapi.AuthInfo) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["door"] = &clientcmdapi.Cluster{Server: "https://" + env.MemberDoorAddress, TLSServerName: serverName, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["member"] = auth
	cfg.Contexts["door"] = &clientcmdapi.Context{Cluster: "door", AuthInfo: "member"}
	cfg.CurrentContext = "door"
	path := filepath.Join(t.TempDir(), "door.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// A member's own clients reach it through the member door: kubectl with a
// client certificate of member-a's CA, by a server name of the cluster's
// spec.secureServing, is member-a's admin there (whoami, a list, exec, a
// watch, port-forward); a
// bound ServiceAccount token is that ServiceAccount, with member-a's RBAC;
// impersonation goes as member-a allows it; member-b's certificate and token
// are refused; a second cluster claiming the same name is a 422 naming the
// first.
func TestMemberDoor(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	const serverName = "door-a.member-door.test"
	servingCA := openDoor(ctx, t, "door-a", serverName)
	uc, err := upstreamClusters(t).Get(ctx, "door-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	admin, u := doorAdmin(t, serverName, servingCA, "door-admin")
	if u.Username != "door-admin" || !strings.Contains(strings.Join(u.Groups, ","), "system:masters") {
		t.Errorf("member-a sees %+v through the door, want door-admin in system:masters", u)
	}
	if out, _, err := env.Kubectl(ctx, admin, "get", "namespaces", "alice", "-o", "name"); err != nil || strings.TrimSpace(out) != "namespace/alice" {
		t.Errorf("kubectl get namespace alice through the door: %q, %v", out, err)
	}
	if out, _, err := env.Kubectl(ctx, admin, "exec", "-n", "alice", "shell", "--", "echo", "through the door"); err != nil || !strings.Contains(out, "through the door") {
		t.Errorf("kubectl exec through the door: %q, %v", out, err)
	}
	kubectlWatchSeesCreates(ctx, t, admin, "door-watch", 30*time.Second)
	portForwardEcho(t, ctx, admin, nil, 2)

	// The imbalance a layer-4 balancer leaves: one client on one HTTP/2
	// connection to the door, many requests; both of member-a's replicas
	// serve a share, as their own audit logs say.
	replicas := env.Members[harness.MemberA].Servers
	doorCfg, err := clientcmd.BuildConfigFromFlags("", admin)
	if err != nil {
		t.Fatal(err)
	}
	doorClient, err := kubernetes.NewForConfig(doorCfg)
	if err != nil {
		t.Fatal(err)
	}
	target := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "door-balance"}}
	if _, err := doorClient.CoreV1().ConfigMaps(harness.AliceNamespace).Create(ctx, target, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	before := [2]int{auditCount(t, replicas[0], "get", "configmaps", "door-admin"), auditCount(t, replicas[1], "get", "configmaps", "door-admin")}
	const n = 200
	for i := 0; i < n; i++ {
		if _, err := doorClient.CoreV1().ConfigMaps(harness.AliceNamespace).Get(ctx, target.Name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, func(context.Context) error {
		first := auditCount(t, replicas[0], "get", "configmaps", "door-admin") - before[0]
		second := auditCount(t, replicas[1], "get", "configmaps", "door-admin") - before[1]
		if first+second != n || first < n/4 || second < n/4 {
			return errorf("through one connection to the door, replica 1 served %d and replica 2 %d of %d GETs; want both a share", first, second, n)
		}
		return nil
	})
	// A replica restarted under that load: no GET fails (the gateway sends
	// them to the other meanwhile) and, once it is ready, it serves its
	// share again.
	load, stopLoad := context.WithCancel(ctx)
	var sent, failed atomic.Int64
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		for load.Err() == nil {
			_, err := doorClient.CoreV1().ConfigMaps(harness.AliceNamespace).Get(load, target.Name, metav1.GetOptions{})
			if load.Err() != nil {
				return
			}
			sent.Add(1)
			if err != nil {
				failed.Add(1)
				t.Logf("GET through the door while a replica restarts: %v", err)
			}
		}
	}()
	if err := replicas[1].Process.Restart(ctx); err != nil {
		stopLoad()
		<-loaded
		t.Fatalf("restarting member-a's second replica: %v", err)
	}
	back := auditCount(t, replicas[1], "get", "configmaps", "door-admin")
	eventually(t, 30*time.Second, func(context.Context) error {
		if served := auditCount(t, replicas[1], "get", "configmaps", "door-admin") - back; served < n/4 {
			return errorf("member-a's restarted replica served %d GETs through the door since it is ready", served)
		}
		return nil
	})
	stopLoad()
	<-loaded
	t.Logf("%d GETs through the door while member-a's second replica restarted and took its share again", sent.Load())
	if failed.Load() != 0 || sent.Load() == 0 {
		t.Errorf("%d of %d GETs through the door failed while a replica restarted", failed.Load(), sent.Load())
	}

	// The gateway's metrics name the door the requests came through.
	if v, ok := gatewayMetric(t, "kube_gateway_proxy_requests_total", map[string]string{"cluster": "door-a", "door": "member", "policy": "", "schema": "", "verb": "get", "resource": "configmaps", "code": "200"}); !ok || v < float64(n) {
		t.Errorf("requests_total of door-a's GETs through the member door: %v (%v), want at least %d", v, ok, n)
	}
	if v, ok := gatewayMetric(t, "kube_gateway_proxy_requests_total", map[string]string{"cluster": "door-a", "door": "hub", "policy": "", "schema": "", "verb": "get", "resource": "configmaps", "code": "200"}); ok {
		t.Errorf("requests_total counts %v GETs of door-a's configmaps under door hub; none came through the hub", v)
	}

	// member-b's own credential does not open member-a's door.
	certB, keyB, err := env.Members[harness.MemberB].ClientCertificate("door-admin", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := env.Kubectl(ctx, doorKubeconfig(t, serverName, servingCA.PEM, &clientcmdapi.AuthInfo{ClientCertificateData: certB, ClientKeyData: keyB}), "get", "namespaces"); err == nil ||
		!strings.Contains(stderr, `upstream cluster "door-a": client certificate: x509: certificate signed by unknown authority`) {
		t.Errorf("member-b's certificate on member-a's door: %v: %s", err, stderr)
	}

	// A bound ServiceAccount token of member-a: member-a's TokenReview says
	// who it is (extras included), member-a's RBAC what it may do, and the
	// token is reviewed once however often it is used.
	memberAdmin := env.Kubeconfig(harness.MemberA + "-admin")
	for _, args := range [][]string{
		{"-n", harness.AliceNamespace, "create", "serviceaccount", "door-sa"},
		{"-n", harness.AliceNamespace, "create", "rolebinding", "door-sa-view", "--clusterrole=view", "--serviceaccount=" + harness.AliceNamespace + ":door-sa"},
	} {
		if _, _, err := env.Kubectl(ctx, memberAdmin, args...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _, _ = env.Kubectl(context.Background(), memberAdmin, "-n", harness.AliceNamespace, "delete", "serviceaccount/door-sa", "rolebinding/door-sa-view")
	})
	token, _, err := env.Kubectl(ctx, memberAdmin, "-n", harness.AliceNamespace, "create", "token", "door-sa")
	if err != nil {
		t.Fatal(err)
	}
	sa := doorKubeconfig(t, serverName, servingCA.PEM, &clientcmdapi.AuthInfo{Token: strings.TrimSpace(token)})
	out, _, err := env.Kubectl(ctx, sa, "auth", "whoami", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	u = parseWhoami(t, out)
	if u.Username != "system:serviceaccount:alice:door-sa" || len(u.Extra["authentication.kubernetes.io/credential-id"]) == 0 {
		t.Errorf("member-a sees %+v through the door with the token, want system:serviceaccount:alice:door-sa with its credential id", u)
	}
	if _, _, err := env.Kubectl(ctx, sa, "-n", harness.AliceNamespace, "get", "configmaps"); err != nil {
		t.Errorf("the ServiceAccount lists configmaps in its namespace: %v", err)
	}
	if _, stderr, err := env.Kubectl(ctx, sa, "-n", "default", "get", "configmaps"); err == nil || !strings.Contains(stderr, "forbidden") {
		t.Errorf("the ServiceAccount lists configmaps in default: %v %s, want member-a's 403", err, stderr)
	}
	if n, ok := doorTokenReviews(t, "door-a", "authenticated"); !ok || n != 1 {
		t.Errorf("TokenReviews of a token used for several requests: %v (%v), want 1", n, ok)
	}
	// A client's own impersonation, as member-a allows it: its admin may act
	// as the ServiceAccount, the ServiceAccount may not act as anyone.
	if out, _, err := env.Kubectl(ctx, admin, "--as=system:serviceaccount:alice:door-sa", "auth", "whoami", "-o", "json"); err != nil {
		t.Errorf("member-a's admin impersonating the ServiceAccount through the door: %v", err)
	} else if u := parseWhoami(t, out); u.Username != "system:serviceaccount:alice:door-sa" {
		t.Errorf("member-a's admin as the ServiceAccount is seen as %+v", u)
	}
	if _, stderr, err := env.Kubectl(ctx, sa, "--as=door-admin", "get", "namespaces"); err == nil || !strings.Contains(stderr, "cannot impersonate") {
		t.Errorf("the ServiceAccount impersonating an admin through the door: %v %s, want 403", err, stderr)
	}
	tokenB, _, err := env.Kubectl(ctx, env.Kubeconfig(harness.MemberB+"-admin"), "-n", "default", "create", "token", "default")
	if err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := env.Kubectl(ctx, doorKubeconfig(t, serverName, servingCA.PEM, &clientcmdapi.AuthInfo{Token: strings.TrimSpace(tokenB)}), "get", "namespaces"); err == nil ||
		!strings.Contains(stderr, `upstream cluster "door-a": the member does not accept the bearer token`) {
		t.Errorf("member-b's token on member-a's door: %v: %s", err, stderr)
	}

	// A door whose Secret is missing says so in status and an Event.
	broken := memberACluster("door-no-secret")
	broken.Spec.SecureServing = &gatewayv1alpha1.SecureServing{ServerNames: []string{"door-no-secret.member-door.test"},
		SecretRef: gatewayv1alpha1.SecretReference{Namespace: harness.GatewayNamespace, Name: "door-no-secret"}}
	createCluster(t, broken)
	waitDoorCondition(t, broken.Name, metav1.ConditionFalse, "SecretNotFound")
	waitDescribed(t, broken.Name, corev1.EventTypeWarning, "MemberDoorUnavailable", "member-door Secret kube-gateway/door-no-secret was not found")

	// One name, one cluster.
	other := memberACluster("door-a-again")
	other.Spec.SecureServing = uc.Spec.SecureServing.DeepCopy()
	_, err = upstreamClusters(t).Create(ctx, other, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.secureServing.serverNames[0]") || !strings.Contains(err.Error(), `"door-a"`) {
		t.Errorf("a second cluster with the same server name: %v, want 422 naming spec.secureServing.serverNames[0] and door-a", err)
	}
	if err == nil {
		_ = upstreamClusters(t).Delete(context.Background(), other.Name, metav1.DeleteOptions{})
	}
	_ = os.Remove(admin)
}

// parseWhoami reads the user of kubectl auth whoami -o json.
func parseWhoami(t *testing.T, out string) authenticationv1.UserInfo {
	t.Helper()
	var review authenticationv1.SelfSubjectReview
	if err := json.Unmarshal([]byte(out), &review); err != nil {
		t.Fatalf("kubectl auth whoami: %v: %s", err, out)
	}
	return review.Status.UserInfo
}

// doorTokenReviews is the gateway's count of the member door's TokenReviews
// of cluster with result.
func doorTokenReviews(t *testing.T, cluster, result string) (float64, bool) {
	t.Helper()
	return gatewayMetric(t, "kube_gateway_member_door_tokenreviews_total", map[string]string{"cluster": cluster, "result": result})
}

// gatewayMetric is the value of the gateway's series name with labels.
func gatewayMetric(t *testing.T, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	code, body := gatewayGet(t, gatewayClient(t, true), "/metrics", harness.AdminFrontProxyHeader())
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	return seriesValue(t, body, name, labels)
}

// waitDoorCondition waits until cluster's MemberDoorReady condition has
// status and reason.
func waitDoorCondition(t *testing.T, cluster string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		uc, err := upstreamClusters(t).Get(ctx, cluster, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(uc.Status.Conditions, gatewayv1alpha1.ConditionMemberDoorReady)
		if c == nil || c.Status != status || c.Reason != reason {
			return errorf("MemberDoorReady %+v, want %s %s", c, status, reason)
		}
		return nil
	})
}

// openDoor creates UpstreamCluster name for member-a's servers with a member
// door under serverName (a Secret with a serving certificate of a CA of its
// own and member-a's client CA), waits until it serves, and returns that CA.
func openDoor(ctx context.Context, t *testing.T, name, serverName string) *testca.CA {
	return openDoorWith(ctx, t, name, serverName, nil)
}

// openDoorWith is openDoor with mutate changing the Secret and the
// UpstreamCluster before they are created.
func openDoorWith(ctx context.Context, t *testing.T, name, serverName string, mutate func(*corev1.Secret, *gatewayv1alpha1.UpstreamCluster)) *testca.CA {
	t.Helper()
	servingCA := testca.New(t, name+"-serving-ca")
	serving := servingCA.Issue(t, testca.Spec{CommonName: serverName, SANs: []string{serverName}, Usage: x509.ExtKeyUsageServerAuth})
	hub := hubAdmin(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-serving", Namespace: harness.GatewayNamespace},
		Data: map[string][]byte{"tls.crt": serving.CertPEM, "tls.key": serving.KeyPEM, "ca.crt": env.Members[harness.MemberA].CAData}}
	uc := memberACluster(name)
	uc.Spec.SecureServing = &gatewayv1alpha1.SecureServing{ServerNames: []string{serverName},
		SecretRef: gatewayv1alpha1.SecretReference{Namespace: harness.GatewayNamespace, Name: secret.Name}}
	if mutate != nil {
		mutate(secret, uc)
	}
	if _, err := hub.CoreV1().Secrets(harness.GatewayNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = hub.CoreV1().Secrets(harness.GatewayNamespace).Delete(context.Background(), secret.Name, metav1.DeleteOptions{})
	})
	createCluster(t, uc)
	waitUsable(t, uc.Name)
	waitDoorCondition(t, uc.Name, metav1.ConditionTrue, "Serving")
	return servingCA
}

// With clientCA Member the door reads member-a's own client CA from member-a
// (kube-system/extension-apiserver-authentication): no CA in the Secret, and
// member-a's certificates are its admin's.
func TestMemberDoorMemberClientCA(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	const serverName = "door-member-ca.member-door.test"
	servingCA := openDoorWith(ctx, t, "door-member-ca", serverName, func(s *corev1.Secret, uc *gatewayv1alpha1.UpstreamCluster) {
		delete(s.Data, "ca.crt")
		uc.Spec.SecureServing.ClientCA = gatewayv1alpha1.ClientCAFromMember
	})
	if _, u := doorAdmin(t, serverName, servingCA, "door-ca-admin"); u.Username != "door-ca-admin" {
		t.Errorf("member-a sees %+v through a door with its own client CA, want door-ca-admin", u)
	}
}

// A node's own identity through the door gets what member-a's Node
// authorizer gives it: its Node and the pods bound to it, not another
// node's.
func TestMemberDoorNodeIdentity(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	const serverName = "door-node.member-door.test"
	servingCA := openDoor(ctx, t, "door-node", serverName)
	certPEM, keyPEM, err := env.Members[harness.MemberA].ClientCertificate("system:node:"+harness.StandInNode, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	node := doorKubeconfig(t, serverName, servingCA.PEM, &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM})

	admin := memberA(t)
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "door-other-node"}}
	if _, err := admin.CoreV1().Nodes().Create(ctx, other, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), other.Name, metav1.DeleteOptions{}) })
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "door-other-pod", Namespace: harness.AliceNamespace},
		Spec: corev1.PodSpec{NodeName: other.Name, Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}}}
	if _, err := admin.CoreV1().Pods(harness.AliceNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = admin.CoreV1().Pods(harness.AliceNamespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})

	for _, c := range []struct {
		args    []string
		allowed bool
	}{
		{[]string{"get", "node", harness.StandInNode}, true},
		{[]string{"-n", harness.AliceNamespace, "get", "pod", "shell"}, true},
		{[]string{"get", "node", other.Name}, false},
		{[]string{"-n", harness.AliceNamespace, "get", "pod", pod.Name}, false},
	} {
		_, stderr, err := env.Kubectl(ctx, node, c.args...)
		switch {
		case c.allowed && err != nil:
			t.Errorf("node identity %v through the door: %v", c.args, err)
		case !c.allowed && (err == nil || !strings.Contains(stderr, "forbidden")):
			t.Errorf("node identity %v through the door: %v %s, want member-a's 403", c.args, err, stderr)
		}
	}
}

// member-a's kube-controller-manager, pointed at the member door with a
// client certificate of member-a's CA as a real cluster runs it (each
// controller with a ServiceAccount token of its own, which the door reviews
// with member-a), keeps the cluster working: a deleted namespace goes away,
// a token Secret gets its token.
func TestMemberDoorControllerManager(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	const serverName = "door-kcm.member-door.test"
	servingCA := openDoor(ctx, t, "door-kcm", serverName)
	certPEM, keyPEM, err := env.Members[harness.MemberA].ClientCertificate("system:kube-controller-manager")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := doorKubeconfig(t, serverName, servingCA.PEM, &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM})

	// member-a's own controller manager stops while this one runs.
	own := env.Members[harness.MemberA].ControllerManager
	if err := own.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := own.Restart(context.Background()); err != nil {
			t.Errorf("restarting member-a's controller manager: %v", err)
		}
	})
	kcm, err := env.StartControllerManager(ctx, harness.MemberA, "door-controller-manager", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kcm.Stop() })

	admin := memberA(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "door-kcm-ns"}}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "door-kcm-sa", Namespace: harness.AliceNamespace}}
	if _, err := admin.CoreV1().ServiceAccounts(harness.AliceNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "door-kcm-sa-token", Namespace: harness.AliceNamespace,
		Annotations: map[string]string{corev1.ServiceAccountNameKey: sa.Name}}, Type: corev1.SecretTypeServiceAccountToken}
	if _, err := admin.CoreV1().Secrets(harness.AliceNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Secrets(harness.AliceNamespace).Delete(context.Background(), secret.Name, metav1.DeleteOptions{})
		_ = admin.CoreV1().ServiceAccounts(harness.AliceNamespace).Delete(context.Background(), sa.Name, metav1.DeleteOptions{})
	})
	if err := admin.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, func(ctx context.Context) error {
		if _, err := admin.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return errorf("namespace %s still there (%v): the namespace controller through the door has not finished it", ns.Name, err)
		}
		s, err := admin.CoreV1().Secrets(harness.AliceNamespace).Get(ctx, secret.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(s.Data[corev1.ServiceAccountTokenKey]) == 0 {
			return errorf("token Secret %s not filled in by the token controller through the door", secret.Name)
		}
		return nil
	})
	if n, ok := doorTokenReviews(t, "door-kcm", "authenticated"); !ok || n == 0 {
		t.Errorf("the controllers' ServiceAccount tokens were not reviewed by the door: %v (%v)", n, ok)
	}
}

// doorAdmin writes a kubeconfig for member-a's admin named user (a client
// certificate of member-a's CA, in system:masters) through the door at
// serverName, waits until kubectl auth whoami answers through it, and
// returns the kubeconfig and whom member-a saw.
func doorAdmin(t *testing.T, serverName string, servingCA *testca.CA, user string) (string, authenticationv1.UserInfo) {
	t.Helper()
	certPEM, keyPEM, err := env.Members[harness.MemberA].ClientCertificate(user, "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := doorKubeconfig(t, serverName, servingCA.PEM, &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM})
	var out string
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		out, _, err = env.Kubectl(ctx, kubeconfig, "auth", "whoami", "-o", "json")
		return err
	})
	return kubeconfig, parseWhoami(t, out)
}
