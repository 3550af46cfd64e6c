package e2e

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubewharf/kube-gateway/apis/client/clientset/versioned"
	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/chart"
	"github.com/kubewharf/kube-gateway/test/harness"
	"github.com/kubewharf/kube-gateway/test/testca"
)

// The gateway chart, rendered with its default values (bundled etcd, generated
// certificates) and the member door on, runs: its etcd and its gateway are started from the rendered
// StatefulSet and Deployment with their own command lines, environment and
// mounted Secrets, its RBAC, ServiceAccount, Service and APIService are applied
// to a hub of a private environment (the APIService's name is fixed, so it would
// replace the suite's gateway on the shared hub), and alice reaches member-b
// through the hub and this gateway; member-b's own admin reaches it through
// the door, at the port the door Service sends to. A flag, a path or a certificate the chart
// got wrong makes a process exit, a probe fail or the hub refuse the gateway.
//
// What differs from a pod, and only that:
//   - mount paths are directories of the work dir (each argument under a mount
//     path is rewritten to it, mechanically);
//   - the binaries are the harness's, in place of the images' entrypoints;
//   - addresses are loopback: etcd's --listen-client-urls, --advertise-client-urls,
//     --listen-peer-urls, --initial-advertise-peer-urls, --initial-cluster and
//     --listen-metrics-urls, and the gateway's --etcd-servers and --secure-port,
//     get 127.0.0.1 and a free port for each rendered container port (the
//     rendered host must be 0.0.0.0 for listeners, the etcd pod's DNS name
//     otherwise), and the gateway gets --bind-address=127.0.0.1 (the chart sets
//     none: 0.0.0.0);
//   - the gateway gets --kubeconfig with a token of the chart's ServiceAccount
//     (TokenRequest) and the hub's CA, where a pod has the same two files at
//     the in-cluster paths, which client-go does not let a process redirect;
//   - the hub reaches the gateway through the rendered Service turned into an
//     ExternalName (localhost) and the APIService's service.port set to the
//     gateway's loopback port; the caBundle stays the rendered one.
func TestChartRunsOnLoopback(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	penv := privateEnvNoGateway(ctx, t)
	const release, ns = "chartrun", "chartrun"
	h := chart.Helm{Bin: filepath.Join(penv.BinDir, "helm"), Home: filepath.Join(penv.WorkDir, "helm")}
	out, err := h.Run(ctx, t, "template", release, chart.Path(t, "kube-gateway"), "--namespace", ns, "--set", "memberDoor.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	m := chart.Parse(t, out)
	root := filepath.Join(penv.WorkDir, "chartrun")
	hub := kubernetes.NewForConfigOrDie(penv.HubConfig(harness.UserAdmin))
	if _, err := hub.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The bundled etcd: member 0 of the StatefulSet, found by its pod DNS name.
	sts := chart.Convert[appsv1.StatefulSet](t, m.One(t, "StatefulSet"))
	headless := chart.Convert[corev1.Service](t, m.Get(t, "Service", ns, sts.Spec.ServiceName))
	if headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("the etcd StatefulSet's Service %s is not headless: its pods have no DNS names", headless.Name)
	}
	etcdPod := sts.Name + "-0"
	etcdDNS := etcdPod + "." + headless.Name + "." + ns + ".svc.cluster.local"
	etcd := newPodRun(t, m, ns, etcdPod, sts.Spec.Template.Spec, sts.Spec.VolumeClaimTemplates, filepath.Join(root, "etcd"))
	etcdArgv := etcd.argv(filepath.Join(penv.BinDir, "etcd"))
	etcdAddrs := map[string]string{ // flag: the host the render must name
		"--listen-client-urls":          "0.0.0.0",
		"--advertise-client-urls":       etcdDNS,
		"--listen-peer-urls":            "0.0.0.0",
		"--initial-advertise-peer-urls": etcdDNS,
		"--initial-cluster":             etcdDNS,
		"--listen-metrics-urls":         "0.0.0.0",
	}
	for _, a := range etcdArgv[1:] {
		k, _, _ := strings.Cut(a, "=")
		if _, ok := etcdAddrs[k]; !ok && (strings.Contains(a, "0.0.0.0") || strings.Contains(a, ".svc")) {
			t.Fatalf("etcd argument %q holds an address this test does not rewrite", a)
		}
	}
	var etcdPorts map[int32]int
	etcdProc, err := penv.StartExtra(ctx, harness.ExtraProcess{
		Name: "chart-etcd",
		Args: func() []string {
			etcdPorts = etcd.loopbackPorts()
			args := etcdArgv
			for flag, host := range etcdAddrs {
				args, _, _ = setFlag(args, flag, loopbackURLs(t, flag, flagValue(t, args, flag), host, etcdPorts))
			}
			return args
		},
		Env:     etcd.env,
		Ready:   etcd.ready(func() map[int32]int { return etcdPorts }),
		Timeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopLogged(t, etcdProc) })
	t.Logf("etcd runs: %s", strings.Join(etcdProc.Args, " "))

	// The gateway's hub identity: the rendered ServiceAccount and RBAC, and a
	// token of that ServiceAccount with the hub's CA, as in a pod.
	applyRendered(ctx, t, penv, m, "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
	deploy := chart.Convert[appsv1.Deployment](t, m.One(t, "Deployment"))
	pod := deploy.Spec.Template.Spec
	tr, err := hub.CoreV1().ServiceAccounts(ns).CreateToken(ctx, pod.ServiceAccountName, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := inClusterKubeconfig(t, filepath.Join(root, "serviceaccount"), penv.Hub.Servers[0].URL, penv.Hub.CAData, tr.Status.Token)

	gw := newPodRun(t, m, ns, deploy.Name+"-0", pod, nil, filepath.Join(root, "gateway"))
	gwArgv := gw.argv(filepath.Join(penv.BinDir, "kube-gateway"))
	var gwPorts map[int32]int
	var gwPort, doorPort int
	gwProc, err := penv.StartExtra(ctx, harness.ExtraProcess{
		Name: "chart-kube-gateway",
		Args: func() []string {
			gwPorts = gw.loopbackPorts()
			args := gwArgv
			secure, err := strconv.Atoi(flagValue(t, args, "--secure-port"))
			if err != nil || gwPorts[int32(secure)] == 0 {
				t.Fatalf("--secure-port=%s is not a port of the container (%v)", flagValue(t, args, "--secure-port"), gw.c.Ports)
			}
			gwPort = gwPorts[int32(secure)]
			args, _, _ = setFlag(args, "--secure-port", strconv.Itoa(gwPort))
			door, err := strconv.Atoi(flagValue(t, args, "--member-door-port"))
			if err != nil || gwPorts[int32(door)] == 0 {
				t.Fatalf("--member-door-port=%s is not a port of the container (%v)", flagValue(t, args, "--member-door-port"), gw.c.Ports)
			}
			doorPort = gwPorts[int32(door)]
			args, _, _ = setFlag(args, "--member-door-port", strconv.Itoa(doorPort))
			var old string
			var had bool
			if args, old, had = setFlag(args, "--bind-address", "127.0.0.1"); had {
				t.Logf("--bind-address=%s overridden by 127.0.0.1", old)
			}
			args, _, _ = setFlag(args, "--etcd-servers", loopbackURLs(t, "--etcd-servers", flagValue(t, args, "--etcd-servers"), etcdDNS, etcdPorts))
			if args, _, had = setFlag(args, "--kubeconfig", kubeconfig); had {
				t.Fatal("the chart sets --kubeconfig: the gateway would not use its ServiceAccount")
			}
			return args
		},
		Env:     gw.env,
		Ready:   gw.ready(func() map[int32]int { return gwPorts }),
		Timeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopLogged(t, gwProc) })
	t.Logf("the gateway runs: %s (env %s)", strings.Join(gwProc.Args, " "), strings.Join(gw.env, " "))

	// What loopback cannot show: in a cluster the gateway dials etcd by the pod's
	// DNS name, which the certificate etcd serves must hold for the CA the
	// gateway trusts (both as the processes read them).
	readArg := func(args []string, flag string) []byte {
		b, err := os.ReadFile(flagValue(t, args, flag))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	verifyChain(t, "etcd's serving certificate", readArg(gwProc.Args, "--etcd-cafile"),
		readArg(etcdProc.Args, "--cert-file"), readArg(etcdProc.Args, "--key-file"), etcdDNS, x509.ExtKeyUsageServerAuth)

	// The hub reaches the gateway through the rendered APIService and the
	// Service it names. In a cluster that Service sends the APIService's port to
	// the gateway pods' --secure-port; here an ExternalName sends the loopback
	// port that stands for it to localhost.
	apiService := m.Get(t, "APIService", "", harness.APIServiceName)
	svcNs, _, _ := unstructured.NestedString(apiService.Object, "spec", "service", "namespace")
	svcName, _, _ := unstructured.NestedString(apiService.Object, "spec", "service", "name")
	svcPort, _, _ := unstructured.NestedInt64(apiService.Object, "spec", "service", "port")
	svc := m.Get(t, "Service", svcNs, svcName)
	typed := chart.Convert[corev1.Service](t, svc)
	if !labels.SelectorFromSet(typed.Spec.Selector).Matches(labels.Set(deploy.Spec.Template.Labels)) {
		t.Fatalf("Service %s/%s does not select the gateway's pods", svcNs, svcName)
	}
	i := slices.IndexFunc(typed.Spec.Ports, func(p corev1.ServicePort) bool { return int64(p.Port) == svcPort })
	if i < 0 || strconv.Itoa(int(gw.containerPort(typed.Spec.Ports[i].TargetPort.String()))) != flagValue(t, gwArgv, "--secure-port") {
		t.Fatalf("Service %s/%s does not send port %d to the gateway's --secure-port=%s: %+v", svcNs, svcName, svcPort, flagValue(t, gwArgv, "--secure-port"), typed.Spec.Ports)
	}
	port := int64(gwPort)
	svc.Object["spec"] = map[string]any{
		"type": "ExternalName", "externalName": "localhost",
		"ports": []any{map[string]any{"name": typed.Spec.Ports[i].Name, "protocol": "TCP", "port": port}},
	}
	if err := unstructured.SetNestedField(apiService.Object, port, "spec", "service", "port"); err != nil {
		t.Fatal(err)
	}
	applyObjects(ctx, t, penv, svc, apiService)
	waitAPIServiceAvailable(ctx, t, penv, gwProc)

	// alice, given the rights of an operator, registers member-b with a
	// credential in the secret namespace, and reaches it through the hub.
	secretNs := flagValue(t, gwArgv, "--secret-namespace")
	grantClusterOperator(ctx, t, hub, harness.UserAlice, secretNs)
	aliceCfg := penv.HubConfig(harness.UserAlice)
	alice := kubernetes.NewForConfigOrDie(aliceCfg)
	memberB := penv.Members[harness.MemberB]
	if _, err := alice.CoreV1().Secrets(secretNs).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: harness.MemberB},
		Data:       map[string][]byte{"token": []byte(memberB.Tokens[harness.UserGateway]), "ca.crt": memberB.CAData},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	uc := newCluster(harness.MemberB, memberB.Servers[0].URL)
	uc.Spec.ClientConfig.SecretRef.Namespace = secretNs
	clusters := versioned.NewForConfigOrDie(aliceCfg).GatewayV1alpha1().UpstreamClusters()
	if _, err := clusters.Create(ctx, uc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	path := harness.ProxyPath(harness.MemberB) + "/version"
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		var code int
		body, err := alice.Discovery().RESTClient().Get().AbsPath(path).Do(ctx).StatusCode(&code).Raw()
		if code != http.StatusOK {
			return errorf("GET %s as alice: %d %v %s", path, code, err, body)
		}
		return nil
	})
	out, _, err = penv.Kubectl(ctx, "alice@"+harness.MemberB, "get", "--raw", "/version")
	if err != nil {
		t.Fatal(err)
	}
	var version struct{ GitVersion string }
	if err := json.Unmarshal([]byte(out), &version); err != nil || version.GitVersion == "" {
		t.Fatalf("kubectl get --raw /version through the hub: %q %v", out, err)
	}
	// member-b served both, to the member credential impersonating alice.
	eventually(t, 10*time.Second, func(context.Context) error {
		if n := countVersionRequests(t, memberB.Servers[0].AuditLog); n < 2 {
			return errorf("member-b's audit log has %d GET /version by %s as alice, want 2", n, harness.UserGateway)
		}
		return nil
	})

	// The status writer (the chart's Lease and Event rights) reports member-b Ready.
	var last error
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		got, err := clusters.Get(ctx, harness.MemberB, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() != nil && last != nil {
				return last // the deadline cut this Get; what was seen before says more
			}
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, gatewayv1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			last = errorf("member-b's Ready condition: %+v", c)
			return last
		}
		return nil
	})

	// The member door: the rendered Service sends its port to the door's
	// container port; member-b's own admin, with a certificate of member-b's
	// CA, reaches member-b there by member-b's door name.
	doorSvc := chart.Convert[corev1.Service](t, m.Get(t, "Service", ns, deploy.Name+"-member-door"))
	if len(doorSvc.Spec.Ports) != 1 || strconv.Itoa(int(gw.containerPort(doorSvc.Spec.Ports[0].TargetPort.String()))) != flagValue(t, gwArgv, "--member-door-port") ||
		!labels.SelectorFromSet(doorSvc.Spec.Selector).Matches(labels.Set(deploy.Spec.Template.Labels)) {
		t.Fatalf("Service %s does not send its port to the gateway pods' --member-door-port=%s: %+v", doorSvc.Name, flagValue(t, gwArgv, "--member-door-port"), doorSvc.Spec)
	}
	const doorName = "member-b.chartrun.test"
	servingCA := testca.New(t, "chartrun-door")
	serving := servingCA.Issue(t, testca.Spec{CommonName: doorName, SANs: []string{doorName}, Usage: x509.ExtKeyUsageServerAuth})
	if _, err := hub.CoreV1().Secrets(secretNs).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "member-b-door"},
		Data:       map[string][]byte{"tls.crt": serving.CertPEM, "tls.key": serving.KeyPEM, "ca.crt": memberB.CAData},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	adminClusters := versioned.NewForConfigOrDie(penv.HubConfig(harness.UserAdmin)).GatewayV1alpha1().UpstreamClusters()
	got, err := adminClusters.Get(ctx, harness.MemberB, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Spec.SecureServing = &gatewayv1alpha1.SecureServing{ServerNames: []string{doorName}, SecretRef: gatewayv1alpha1.SecretReference{Namespace: secretNs, Name: "member-b-door"}}
	if _, err := adminClusters.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := memberB.ClientCertificate("chartrun-door-admin", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	doorCfg := &rest.Config{Host: "https://127.0.0.1:" + strconv.Itoa(doorPort),
		TLSClientConfig: rest.TLSClientConfig{ServerName: doorName, CAData: servingCA.PEM, CertData: certPEM, KeyData: keyPEM}}
	doorClient := kubernetes.NewForConfigOrDie(doorCfg)
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		review, err := doorClient.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if u := review.Status.UserInfo.Username; u != "chartrun-door-admin" {
			return errorf("member-b sees %q through the chart's door, want chartrun-door-admin", u)
		}
		return nil
	})
}

// privateEnvNoGateway starts an environment of this test's own without a
// gateway (privateEnv's always has one); its work dir is kept when the test
// fails.
func privateEnvNoGateway(ctx context.Context, t *testing.T) *harness.Env {
	t.Helper()
	dir, err := os.MkdirTemp("", "kube-gateway-e2e-"+strings.ToLower(t.Name())+"-")
	if err != nil {
		t.Fatal(err)
	}
	penv, err := harness.Start(ctx, harness.Config{WorkDir: dir, NoGateway: true, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := penv.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("kept the private environment's work dir with every log: %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return penv
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func stopLogged(t *testing.T, p *harness.Process) {
	if err := p.Stop(); err != nil {
		t.Error(err)
	}
}

// applyRendered applies the rendered objects of kinds to the hub.
func applyRendered(ctx context.Context, t *testing.T, penv *harness.Env, m *chart.Manifest, kinds ...string) {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, k := range kinds {
		objs = append(objs, m.All(k)...)
	}
	applyObjects(ctx, t, penv, objs...)
}

func applyObjects(ctx context.Context, t *testing.T, penv *harness.Env, objs ...*unstructured.Unstructured) {
	t.Helper()
	items := make([]any, len(objs))
	for i, o := range objs {
		items[i] = o.Object
	}
	data, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "objects.json")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := penv.Kubectl(ctx, "hub-admin", "apply", "-f", file); err != nil {
		t.Fatal(err)
	}
}

// inClusterKubeconfig writes what a pod finds at the in-cluster paths (token,
// ca.crt) into dir and a kubeconfig that uses them as client-go's in-cluster
// config does (the token file is re-read).
func inClusterKubeconfig(t *testing.T, dir, server string, caPEM []byte, token string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	tokenFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["hub"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	cfg.Contexts["hub"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: "sa"}
	cfg.CurrentContext = "hub"
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

var apiServicesGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// waitAPIServiceAvailable waits until the hub's aggregator finds the gateway
// behind the APIService available.
func waitAPIServiceAvailable(ctx context.Context, t *testing.T, penv *harness.Env, gw *harness.Process) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(penv.HubConfig(harness.UserAdmin))
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var state string
	err := func() error {
		for {
			obj, err := dyn.Resource(apiServicesGVR).Get(ctx, harness.APIServiceName, metav1.GetOptions{})
			if err == nil {
				conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
				state = fmt.Sprint(conds)
				for _, c := range conds {
					if c, _ := c.(map[string]any); c["type"] == "Available" && c["status"] == "True" {
						return nil
					}
				}
			} else {
				state = err.Error()
			}
			if !gw.Running() {
				return errorf("the gateway exited")
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	if err != nil {
		t.Fatalf("APIService %s not Available (%v): %s; the gateway's log ends with:\n%s", harness.APIServiceName, err, state, logTail(gw.LogFile, 20))
	}
}

// grantClusterOperator lets user create UpstreamClusters and Secrets in secretNs.
func grantClusterOperator(ctx context.Context, t *testing.T, hub kubernetes.Interface, user, secretNs string) {
	t.Helper()
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	const name = "chartrun:cluster-operator"
	if _, err := hub.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{harness.UpstreamClusterGVR.Group}, Resources: []string{"upstreamclusters"}, Verbs: []string{"create", "get", "list", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   subjects,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.RbacV1().Roles(secretNs).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.RbacV1().RoleBindings(secretNs).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   subjects,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The hub's authorizer learns of new bindings from its informers: wait
	// until it allows what the test does next.
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Verb: "create", Resource: "secrets", Namespace: secretNs},
		{Verb: "create", Group: harness.UpstreamClusterGVR.Group, Resource: "upstreamclusters"},
	} {
		eventually(t, 30*time.Second, func(ctx context.Context) error {
			sar, err := hub.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &attrs},
			}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if !sar.Status.Allowed {
				return errorf("%s may not %s %s yet", user, attrs.Verb, attrs.Resource)
			}
			return nil
		})
	}
}

// countVersionRequests counts GET /version in an audit log made by the member
// credential impersonating alice.
func countVersionRequests(t *testing.T, auditLog string) int {
	t.Helper()
	data, err := os.ReadFile(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range bytes.Split(data, []byte("\n")) {
		var ev struct {
			Stage, Verb, RequestURI string
			User                    struct{ Username string }
			ImpersonatedUser        *struct{ Username string }
		}
		if json.Unmarshal(line, &ev) == nil && ev.Stage == "ResponseComplete" && ev.Verb == "get" && ev.RequestURI == "/version" &&
			ev.User.Username == harness.UserGateway && ev.ImpersonatedUser != nil && ev.ImpersonatedUser.Username == harness.UserAlice {
			n++
		}
	}
	return n
}

func logTail(file string, n int) string {
	data, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
