package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubewharf/kube-gateway/test/chart"
	"github.com/kubewharf/kube-gateway/test/harness"
	"github.com/kubewharf/kube-gateway/test/testca"
)

// The Helm charts: charts/kube-gateway installs the gateway into a hub,
// charts/kube-gateway-member gives it an identity and the right to impersonate on
// a member. The tests lint and render both with the helm that `make tools` builds
// (hack/tools/helm), check what matters in the rendered objects, send every object
// to the real hub with a server-side dry run, and install the member chart for
// real on member-b, whose token then serves a registered UpstreamCluster. The
// checks that need helm only (the member chart's lint, invalid values, the
// default images) are in test/chart, whose helpers these tests share.

const apiServiceName = "v1alpha1.gateway.kubewharf.io"

// helm is the helm of the environment's tools dir, with its cache, config and
// data dirs in the work dir.
func helm() chart.Helm {
	return chart.Helm{Bin: filepath.Join(env.BinDir, "helm"), Home: filepath.Join(env.WorkDir, "helm")}
}

// dryRunOnHub sends every rendered object to the hub with
// `kubectl apply --dry-run=server` (strict field validation) and wants each
// one accepted.
func dryRunOnHub(ctx context.Context, t *testing.T, m *chart.Manifest) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(file, []byte(m.YAML), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := env.Kubectl(ctx, "hub-admin", "apply", "--dry-run=server", "--validate=strict", "-f", file)
	if err != nil {
		t.Fatalf("the hub refused the rendered chart: %v\n%s", err, out)
	}
	if n := strings.Count(out, "(server dry run)"); n != len(m.Objs) {
		t.Fatalf("the hub accepted %d of %d objects:\n%s", n, len(m.Objs), out)
	}
}

func createHubNamespace(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	ns := hubAdmin(t).CoreV1().Namespaces()
	if _, err := ns.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// --- certificates ---

func parseCertPEM(t *testing.T, what string, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s: no PEM certificate", what)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return c
}

// verifyChain wants certPEM+keyPEM to be a key pair whose certificate chains to
// the CA in caPEM for usage (and dnsName, if set).
func verifyChain(t *testing.T, what string, caPEM, certPEM, keyPEM []byte, dnsName string, usage x509.ExtKeyUsage) {
	t.Helper()
	ca := parseCertPEM(t, what+" CA", caPEM)
	if !ca.IsCA {
		t.Fatalf("%s: the CA certificate is not a CA", what)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	cert := parseCertPEM(t, what, certPEM)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: dnsName, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		t.Fatalf("%s does not verify against its CA for %q: %v", what, dnsName, err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatalf("%s: key does not match the certificate: %v", what, err)
	}
}

// secretData returns the decoded data of a rendered Secret.
func secretData(t *testing.T, u *unstructured.Unstructured) map[string][]byte {
	t.Helper()
	return chart.Convert[corev1.Secret](t, u).Data
}

// testCA makes a CA and a serving certificate for dnsName signed by it, as a
// user who brings their own certificates would.
func testCA(t *testing.T, dnsName string) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	ca := testca.New(t, "user-supplied-ca")
	leaf := ca.Issue(t, testca.Spec{CommonName: dnsName, SANs: []string{dnsName}, Usage: x509.ExtKeyUsageServerAuth,
		NotAfter: time.Now().Add(24 * time.Hour)})
	return ca.PEM, leaf.CertPEM, leaf.KeyPEM
}

// --- what every rendering of the gateway chart must hold ---

// gateway is a rendered gateway chart with its main objects decoded.
type gateway struct {
	m          *chart.Manifest
	ns         string
	deploy     *appsv1.Deployment
	container  corev1.Container
	args       map[string]string // --flag=value
	apiService *unstructured.Unstructured
	caBundle   []byte // nil without one
	service    *corev1.Service
	servingDNS string // <service>.<namespace>.svc, the name the hub dials
}

func (g *gateway) volumeSecret(t *testing.T, volume string) string {
	t.Helper()
	for _, v := range g.deploy.Spec.Template.Spec.Volumes {
		if v.Name == volume && v.Secret != nil {
			return v.Secret.SecretName
		}
	}
	t.Fatalf("the gateway pod has no secret volume %q", volume)
	return ""
}

func (g *gateway) mountPath(t *testing.T, volume string) string {
	t.Helper()
	for _, vm := range g.container.VolumeMounts {
		if vm.Name == volume {
			return vm.MountPath
		}
	}
	t.Fatalf("the gateway container does not mount %q", volume)
	return ""
}

// env returns the gateway container's environment variable name, or nil.
func (g *gateway) env(name string) *corev1.EnvVar {
	for i, e := range g.container.Env {
		if e.Name == name {
			return &g.container.Env[i]
		}
	}
	return nil
}

func checkGateway(t *testing.T, m *chart.Manifest, ns string) *gateway {
	t.Helper()
	g := &gateway{m: m, ns: ns, args: map[string]string{}}
	for _, d := range m.All("Deployment") { // the gateway's, not the konnectivity server's
		if d.GetLabels()["app.kubernetes.io/component"] != "konnectivity-server" {
			if g.deploy != nil {
				t.Fatalf("two gateway Deployments: %s and %s", g.deploy.Name, d.GetName())
			}
			g.deploy = chart.Convert[appsv1.Deployment](t, d)
		}
	}
	if g.deploy == nil {
		t.Fatal("no gateway Deployment rendered")
	}
	pod := g.deploy.Spec.Template.Spec
	if g.deploy.Namespace != ns || len(pod.Containers) != 1 {
		t.Fatalf("Deployment %s/%s with %d containers", g.deploy.Namespace, g.deploy.Name, len(pod.Containers))
	}
	g.container = pod.Containers[0]
	for _, a := range g.container.Args {
		k, v, _ := strings.Cut(a, "=")
		g.args[k] = v
	}
	podLabels := labels.Set(g.deploy.Spec.Template.Labels)
	sel, err := metav1.LabelSelectorAsSelector(g.deploy.Spec.Selector)
	if err != nil || !sel.Matches(podLabels) {
		t.Fatalf("the Deployment's selector %v does not select its pods %v", g.deploy.Spec.Selector, podLabels)
	}

	// Security context: non-root, read-only root, no capabilities, RuntimeDefault seccomp.
	psc, sc := pod.SecurityContext, g.container.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Fatalf("pod security context: %+v", psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Fatalf("container security context: %+v", sc)
	}
	if pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil {
		t.Fatalf("no pod anti-affinity: %+v", pod.Affinity)
	}
	// The Go runtime's soft memory limit is the container's.
	if e := g.env("GOMEMLIMIT"); e == nil || e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil ||
		e.ValueFrom.ResourceFieldRef.Resource != "limits.memory" || e.ValueFrom.ResourceFieldRef.ContainerName != g.container.Name {
		t.Fatalf("GOMEMLIMIT: %+v, want the container's limits.memory", e)
	}

	// Probes on the real endpoints, over HTTPS, on the secure port; what they
	// leave out is checked in TestGatewayEtcdOutage.
	var httpsPort int32
	for _, p := range g.container.Ports {
		if p.Name == "https" {
			httpsPort = p.ContainerPort
		}
	}
	if want := fmt.Sprint(httpsPort); httpsPort == 0 || g.args["--secure-port"] != want {
		t.Fatalf("container port https %d, --secure-port=%s", httpsPort, g.args["--secure-port"])
	}
	for _, c := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", g.container.LivenessProbe, chartLivenessPath}, {"readiness", g.container.ReadinessProbe, chartReadinessPath}, {"startup", g.container.StartupProbe, "/livez"}} {
		if c.probe == nil || c.probe.HTTPGet == nil {
			t.Fatalf("no %s probe", c.name)
		}
		h := c.probe.HTTPGet
		if h.Path != c.path || h.Scheme != corev1.URISchemeHTTPS || h.Port.String() != "https" {
			t.Fatalf("%s probe: %+v, want %s over HTTPS on port https", c.name, h, c.path)
		}
	}

	// Service account, and the hub RBAC of docs/security.md bound to it.
	sa := pod.ServiceAccountName
	if m.Find("ServiceAccount", ns, sa) == nil {
		t.Fatalf("the pods run as ServiceAccount %q, which is not rendered", sa)
	}
	secretNs := g.args["--secret-namespace"]
	checkRBAC(t, m, ns, sa, secretNs)
	// The replicas divide flow-control limits by default (docs/dispatch.md).
	if v := g.args["--split-limits-across-replicas"]; v != "true" {
		t.Fatalf("--split-limits-across-replicas=%q, want true by default", v)
	}

	// Service and APIService.
	g.service = chart.Convert[corev1.Service](t, m.Get(t, "Service", ns, g.deploy.Name))
	if !labels.SelectorFromSet(g.service.Spec.Selector).Matches(podLabels) || len(g.service.Spec.Ports) != 1 || g.service.Spec.Ports[0].TargetPort.String() != "https" {
		t.Fatalf("Service %s does not send its one port to the pods' https port: %+v", g.service.Name, g.service.Spec)
	}
	g.apiService = m.Get(t, "APIService", "", apiServiceName)
	spec := g.apiService.Object["spec"].(map[string]any)
	svc := spec["service"].(map[string]any)
	if spec["group"] != "gateway.kubewharf.io" || spec["version"] != "v1alpha1" ||
		svc["namespace"] != ns || svc["name"] != g.service.Name || svc["port"] != int64(g.service.Spec.Ports[0].Port) {
		t.Fatalf("APIService spec %v does not name Service %s/%s port %d", spec, ns, g.service.Name, g.service.Spec.Ports[0].Port)
	}
	if v, ok := spec["insecureSkipTLSVerify"]; ok && v != false {
		t.Fatalf("APIService sets insecureSkipTLSVerify: %v", v)
	}
	if spec["groupPriorityMinimum"] != int64(1000) || spec["versionPriority"] != int64(15) {
		t.Fatalf("APIService priorities: %v/%v, want 1000/15 as the harness", spec["groupPriorityMinimum"], spec["versionPriority"])
	}
	if b, ok := spec["caBundle"].(string); ok {
		if g.caBundle, err = base64.StdEncoding.DecodeString(b); err != nil {
			t.Fatalf("caBundle: %v", err)
		}
	}
	g.servingDNS = g.service.Name + "." + ns + ".svc"
	if g.args["--tls-cert-file"] != g.mountPath(t, "serving-cert")+"/tls.crt" || g.args["--tls-private-key-file"] != g.mountPath(t, "serving-cert")+"/tls.key" {
		t.Fatalf("--tls-cert-file/--tls-private-key-file %q/%q are not the mounted serving Secret", g.args["--tls-cert-file"], g.args["--tls-private-key-file"])
	}

	// A PodDisruptionBudget for the gateway's pods.
	var pdbOK bool
	for _, u := range m.All("PodDisruptionBudget") {
		pdb := chart.Convert[policyv1.PodDisruptionBudget](t, u)
		if s, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err == nil && s.Matches(podLabels) {
			pdbOK = true
		}
	}
	if !pdbOK {
		t.Fatal("no PodDisruptionBudget selects the gateway's pods")
	}
	return g
}

// hasRule reports whether rules grant verbs on resources of group.
func hasRule(rules []rbacv1.PolicyRule, group, resource string, verbs ...string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && (slices.Contains(r.Resources, resource) || slices.Contains(r.Resources, "*")) {
			ok := true
			for _, v := range verbs {
				ok = ok && slices.Contains(r.Verbs, v)
			}
			if ok {
				return true
			}
		}
	}
	return false
}

// checkRBAC wants the hub rights of docs/security.md for ServiceAccount ns/sa.
func checkRBAC(t *testing.T, m *chart.Manifest, ns, sa, secretNs string) {
	t.Helper()
	subject := rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: ns}
	boundClusterRoles := map[string]bool{}
	for _, u := range m.All("ClusterRoleBinding") {
		b := chart.Convert[rbacv1.ClusterRoleBinding](t, u)
		if slices.Contains(b.Subjects, subject) && b.RoleRef.Kind == "ClusterRole" {
			boundClusterRoles[b.RoleRef.Name] = true
		}
	}
	if !boundClusterRoles["system:auth-delegator"] {
		t.Fatal("no ClusterRoleBinding of system:auth-delegator to the gateway")
	}
	var reader, secrets, events bool
	for _, u := range m.All("RoleBinding") {
		b := chart.Convert[rbacv1.RoleBinding](t, u)
		if !slices.Contains(b.Subjects, subject) || b.RoleRef.Kind != "Role" {
			continue
		}
		if b.Namespace == "kube-system" && b.RoleRef.Name == "extension-apiserver-authentication-reader" {
			reader = true
		}
		if b.Namespace == secretNs {
			role := chart.Convert[rbacv1.Role](t, m.Get(t, "Role", secretNs, b.RoleRef.Name))
			secrets = hasRule(role.Rules, "", "secrets", "get", "list", "watch") &&
				hasRule(role.Rules, "coordination.k8s.io", "leases", "get", "list", "watch", "create", "update", "delete") &&
				!hasRule(role.Rules, "", "secrets", "create") && !hasRule(role.Rules, "", "secrets", "update")
		}
		// The status writer records Events about cluster-scoped UpstreamClusters,
		// which client-go puts in namespace default.
		if b.Namespace == "default" {
			role := chart.Convert[rbacv1.Role](t, m.Get(t, "Role", "default", b.RoleRef.Name))
			events = hasRule(role.Rules, "", "events", "create", "patch") && len(role.Rules) == 1
		}
	}
	if !events {
		t.Fatal("no Role in namespace default with only events create/patch, bound to the gateway")
	}
	if !reader {
		t.Fatal("no RoleBinding of extension-apiserver-authentication-reader in kube-system to the gateway")
	}
	if !secrets {
		t.Fatalf("no Role in the secret namespace %q with secrets get/list/watch and leases get/list/watch/create/update/delete (and nothing more on secrets)", secretNs)
	}
	var readers bool
	for name := range boundClusterRoles {
		if cr := m.Find("ClusterRole", "", name); cr != nil {
			rules := chart.Convert[rbacv1.ClusterRole](t, cr).Rules
			readers = readers || (hasRule(rules, "", "namespaces", "get", "list", "watch") &&
				hasRule(rules, "admissionregistration.k8s.io", "validatingadmissionpolicies", "get", "list", "watch"))
		}
	}
	if !readers {
		t.Fatal("no bound ClusterRole to read namespaces and admissionregistration.k8s.io")
	}
}

// checkGeneratedServingCert wants the chart's own serving Secret, whose
// certificate chains to the APIService caBundle for <service>.<namespace>.svc.
func checkGeneratedServingCert(t *testing.T, g *gateway) {
	t.Helper()
	if g.caBundle == nil {
		t.Fatal("the APIService has no caBundle")
	}
	data := secretData(t, g.m.Get(t, "Secret", g.ns, g.volumeSecret(t, "serving-cert")))
	if string(data["ca.crt"]) != string(g.caBundle) {
		t.Fatal("the serving Secret's ca.crt is not the APIService caBundle")
	}
	verifyChain(t, "serving certificate", g.caBundle, data["tls.crt"], data["tls.key"], g.servingDNS, x509.ExtKeyUsageServerAuth)
}

// checkBundledEtcd wants an etcd StatefulSet of replicas members, a headless
// Service, persistent volumes, --etcd-servers naming each member over TLS, and
// (when generated) server and client certificates from one CA.
func checkBundledEtcd(t *testing.T, g *gateway, replicas int, generatedCerts bool) *appsv1.StatefulSet {
	t.Helper()
	sts := chart.Convert[appsv1.StatefulSet](t, g.m.One(t, "StatefulSet"))
	if sts.Spec.Replicas == nil || int(*sts.Spec.Replicas) != replicas {
		t.Fatalf("etcd StatefulSet replicas %v, want %d", sts.Spec.Replicas, replicas)
	}
	headless := chart.Convert[corev1.Service](t, g.m.Get(t, "Service", g.ns, sts.Spec.ServiceName))
	if headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Fatalf("etcd Service %s is not headless with unready addresses published", headless.Name)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 || sts.Spec.VolumeClaimTemplates[0].Name != "data" {
		t.Fatalf("etcd volume claim templates: %+v", sts.Spec.VolumeClaimTemplates)
	}
	pod := sts.Spec.Template.Spec
	c := pod.Containers[0]
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Fatalf("etcd security context: %+v %+v", pod.SecurityContext, sc)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/livez" ||
		c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Fatal("etcd probes are not /livez and /readyz")
	}
	etcdArgs := map[string]string{}
	for _, a := range c.Args {
		k, v, _ := strings.Cut(a, "=")
		etcdArgs[k] = v
	}
	domain := headless.Name + "." + g.ns + ".svc.cluster.local"
	var wantServers, wantPeers []string
	for i := range replicas {
		member := fmt.Sprintf("%s-%d", sts.Name, i)
		wantServers = append(wantServers, "https://"+member+"."+domain+":2379")
		wantPeers = append(wantPeers, member+"=https://"+member+"."+domain+":2380")
	}
	if got := g.args["--etcd-servers"]; got != strings.Join(wantServers, ",") {
		t.Fatalf("--etcd-servers=%s, want %s", got, strings.Join(wantServers, ","))
	}
	if got := etcdArgs["--initial-cluster"]; got != strings.Join(wantPeers, ",") {
		t.Fatalf("etcd --initial-cluster=%s, want %s", got, strings.Join(wantPeers, ","))
	}
	for _, f := range []string{"--client-cert-auth", "--peer-client-cert-auth"} {
		if etcdArgs[f] != "true" {
			t.Fatalf("etcd %s=%q, want true", f, etcdArgs[f])
		}
	}
	checkEtcdClientFlags(t, g, g.volumeSecret(t, "etcd-client"))
	if generatedCerts {
		var serverSecret string
		for _, v := range pod.Volumes {
			if v.Name == "tls" && v.Secret != nil {
				serverSecret = v.Secret.SecretName
			}
		}
		server := secretData(t, g.m.Get(t, "Secret", g.ns, serverSecret))
		client := secretData(t, g.m.Get(t, "Secret", g.ns, g.volumeSecret(t, "etcd-client")))
		for i := range replicas {
			verifyChain(t, "etcd server certificate", server["ca.crt"], server["tls.crt"], server["tls.key"],
				fmt.Sprintf("%s-%d.%s", sts.Name, i, domain), x509.ExtKeyUsageServerAuth)
		}
		verifyChain(t, "etcd peer certificate", server["ca.crt"], server["tls.crt"], server["tls.key"], "", x509.ExtKeyUsageClientAuth)
		// The gateway's client certificate chains to the CA etcd trusts.
		verifyChain(t, "etcd client certificate", server["ca.crt"], client["tls.crt"], client["tls.key"], "", x509.ExtKeyUsageClientAuth)
		verifyChain(t, "etcd server certificate (as the gateway verifies it)", client["ca.crt"], server["tls.crt"], server["tls.key"],
			sts.Name+"-0."+domain, x509.ExtKeyUsageServerAuth)
	}
	return sts
}

// checkEtcdClientFlags wants --etcd-cafile/--etcd-certfile/--etcd-keyfile in
// the mounted Secret secretName.
func checkEtcdClientFlags(t *testing.T, g *gateway, secretName string) {
	t.Helper()
	if got := g.volumeSecret(t, "etcd-client"); got != secretName {
		t.Fatalf("etcd client Secret %q, want %q", got, secretName)
	}
	dir := g.mountPath(t, "etcd-client")
	for flag, file := range map[string]string{"--etcd-cafile": "ca.crt", "--etcd-certfile": "tls.crt", "--etcd-keyfile": "tls.key"} {
		if g.args[flag] != dir+"/"+file {
			t.Fatalf("%s=%q, want %s/%s", flag, g.args[flag], dir, file)
		}
	}
}

// checkCertManager wants no caBundle but the inject-ca-from annotation naming
// the Certificate of the serving Secret, for <service>.<namespace>.svc.
func checkCertManager(t *testing.T, g *gateway, issuer cmIssuerRef) {
	t.Helper()
	if g.caBundle != nil {
		t.Fatal("caBundle rendered although cert-manager injects it")
	}
	ref := g.apiService.GetAnnotations()["cert-manager.io/inject-ca-from"]
	ns, name, _ := strings.Cut(ref, "/")
	if ns != g.ns {
		t.Fatalf("cert-manager.io/inject-ca-from=%q is not in the release namespace", ref)
	}
	cert := g.m.Get(t, "Certificate", g.ns, name)
	spec := cert.Object["spec"].(map[string]any)
	if spec["secretName"] != g.volumeSecret(t, "serving-cert") {
		t.Fatalf("Certificate %s writes %v, the pods mount %s", name, spec["secretName"], g.volumeSecret(t, "serving-cert"))
	}
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if !slices.Contains(dnsNames, g.servingDNS) {
		t.Fatalf("Certificate %s dnsNames %v miss %s", name, dnsNames, g.servingDNS)
	}
	for _, c := range g.m.All("Certificate") {
		got := cmIssuerRef{}
		got.Name, _, _ = unstructured.NestedString(c.Object, "spec", "issuerRef", "name")
		got.Kind, _, _ = unstructured.NestedString(c.Object, "spec", "issuerRef", "kind")
		isCA, _, _ := unstructured.NestedBool(c.Object, "spec", "isCA")
		if !isCA && got != issuer {
			t.Fatalf("Certificate %s is issued by %+v, want %+v", c.GetName(), got, issuer)
		}
	}
}

type cmIssuerRef struct{ Name, Kind string }

// certManagerCRDs are minimal CustomResourceDefinitions for cert-manager's
// Issuer and Certificate (cert-manager.io/v1), which the bare hub does not
// serve: the fields the chart uses, with the types and enums of cert-manager's
// own schema and nothing else, so that the hub's strict field validation refuses
// a misspelt field in the chart.
const certManagerCRDs = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: certificates.cert-manager.io
spec:
  group: cert-manager.io
  scope: Namespaced
  names: {kind: Certificate, listKind: CertificateList, plural: certificates, singular: certificate}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        required: [spec]
        properties:
          spec:
            type: object
            required: [issuerRef, secretName]
            properties:
              commonName: {type: string}
              dnsNames: {type: array, items: {type: string}}
              ipAddresses: {type: array, items: {type: string}}
              duration: {type: string}
              renewBefore: {type: string}
              isCA: {type: boolean}
              secretName: {type: string}
              usages:
                type: array
                items:
                  type: string
                  enum: [signing, digital signature, content commitment, key encipherment, key agreement, data encipherment, cert sign, crl sign, encipher only, decipher only, any, server auth, client auth, code signing, email protection, s/mime, ipsec end system, ipsec tunnel, ipsec user, timestamping, ocsp signing, microsoft sgc, netscape sgc]
              privateKey:
                type: object
                properties:
                  algorithm: {type: string, enum: [RSA, ECDSA, Ed25519]}
                  encoding: {type: string, enum: [PKCS1, PKCS8]}
                  rotationPolicy: {type: string, enum: [Never, Always]}
                  size: {type: integer}
              issuerRef:
                type: object
                required: [name]
                properties:
                  group: {type: string}
                  kind: {type: string}
                  name: {type: string}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: issuers.cert-manager.io
spec:
  group: cert-manager.io
  scope: Namespaced
  names: {kind: Issuer, listKind: IssuerList, plural: issuers, singular: issuer}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        required: [spec]
        properties:
          spec:
            type: object
            properties:
              selfSigned:
                type: object
                properties:
                  crlDistributionPoints: {type: array, items: {type: string}}
              ca:
                type: object
                required: [secretName]
                properties:
                  secretName: {type: string}
                  crlDistributionPoints: {type: array, items: {type: string}}
                  ocspServers: {type: array, items: {type: string}}
`

func installCertManagerCRDs(ctx context.Context, t *testing.T) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "cert-manager-crds.yaml")
	if err := os.WriteFile(file, []byte(certManagerCRDs), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := env.Kubectl(ctx, "hub-admin", "apply", "-f", file); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _, _ = env.Kubectl(context.Background(), "hub-admin", "delete", "--ignore-not-found", "-f", file)
	})
	if _, _, err := env.Kubectl(ctx, "hub-admin", "wait", "--for=condition=Established", "--timeout=60s",
		"crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io"); err != nil {
		t.Fatal(err)
	}
}

// --- the tests ---

// gatewayChartCase is one set of values for charts/kube-gateway.
type gatewayChartCase struct {
	name  string
	setup func(t *testing.T, ns string) []string // helm value flags
	check func(t *testing.T, g *gateway)
}

func gatewayChartCases(ctx context.Context) []gatewayChartCase {
	return []gatewayChartCase{
		{
			name:  "defaults",
			setup: func(*testing.T, string) []string { return nil },
			check: func(t *testing.T, g *gateway) {
				if *g.deploy.Spec.Replicas != 2 {
					t.Fatalf("replicas %d, want 2", *g.deploy.Spec.Replicas)
				}
				if want := "kubewharf/kube-gateway:0.1.0"; g.container.Image != want {
					t.Fatalf("image %s, want %s", g.container.Image, want)
				}
				if g.args["--secret-namespace"] != g.ns {
					t.Fatalf("--secret-namespace=%s, want the release namespace", g.args["--secret-namespace"])
				}
				// The gateway's own default: what the docs name.
				if g.args["--status-lease-name"] != "kube-gateway-status" {
					t.Fatalf("--status-lease-name=%s, want kube-gateway-status", g.args["--status-lease-name"])
				}
				if e := g.env("GOGC"); e == nil || e.Value != "400" {
					t.Fatalf("GOGC: %+v, want 400", e)
				}
				checkGeneratedServingCert(t, g)
				checkBundledEtcd(t, g, 1, true)
				if len(g.m.All("NetworkPolicy")) != 1 {
					t.Fatal("no NetworkPolicy in front of the bundled etcd")
				}
				if len(g.m.All("Certificate")) != 0 || len(g.m.All("Issuer")) != 0 {
					t.Fatal("cert-manager objects without cert-manager mode")
				}
				checkNoDirectAccess(t, g)
			},
		},
		{
			// The konnectivity servers next to the gateway: accepted by the hub.
			name: "konnectivity",
			setup: func(*testing.T, string) []string {
				return []string{"--set", "konnectivity.enabled=true", "--set", "konnectivity.image.repository=example/proxy-server",
					"--set", "konnectivity.tlsSecretName=konnectivity-tls", "--set", "konnectivity.agentService.type=LoadBalancer"}
			},
			check: func(t *testing.T, g *gateway) {
				server := chart.Convert[appsv1.StatefulSet](t, g.m.Get(t, "StatefulSet", g.ns, "kube-gateway-konnectivity"))
				if server.Spec.Template.Spec.Volumes[0].Secret.SecretName != "konnectivity-tls" {
					t.Fatalf("konnectivity server volumes %+v", server.Spec.Template.Spec.Volumes)
				}
				if server.Spec.Replicas == nil || *server.Spec.Replicas != 2 {
					t.Fatalf("konnectivity servers: %v replicas, want 2 by default", server.Spec.Replicas)
				}
				svc := chart.Convert[corev1.Service](t, g.m.Get(t, "Service", g.ns, "kube-gateway-konnectivity-agent"))
				if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
					t.Fatalf("agent Service type %s", svc.Spec.Type)
				}
			},
		},
		{
			name:  "etcd-3-members",
			setup: func(*testing.T, string) []string { return []string{"--set", "etcd.bundled.replicas=3"} },
			check: func(t *testing.T, g *gateway) {
				sts := checkBundledEtcd(t, g, 3, true)
				if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
					t.Fatalf("etcd pod management %q: members must start together to form a quorum", sts.Spec.PodManagementPolicy)
				}
				var etcdPDB bool
				for _, u := range g.m.All("PodDisruptionBudget") {
					pdb := chart.Convert[policyv1.PodDisruptionBudget](t, u)
					s, _ := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
					etcdPDB = etcdPDB || (s.Matches(labels.Set(sts.Spec.Template.Labels)) && pdb.Spec.MaxUnavailable.IntValue() == 1)
				}
				if !etcdPDB {
					t.Fatal("no PodDisruptionBudget keeps the etcd quorum")
				}
				checkGeneratedServingCert(t, g)
			},
		},
		{
			name: "external-etcd-tls",
			setup: func(*testing.T, string) []string {
				return []string{"--set", "etcd.mode=external",
					"--set", "etcd.external.endpoints={https://etcd-0.etcd.example:2379,https://etcd-1.etcd.example:2379}",
					"--set", "etcd.external.tls.secretName=external-etcd-client",
					"--set", "etcd.prefix=/gateway"}
			},
			check: func(t *testing.T, g *gateway) {
				if len(g.m.All("StatefulSet")) != 0 || len(g.m.All("NetworkPolicy")) != 0 {
					t.Fatal("a bundled etcd rendered with external etcd")
				}
				if want := "https://etcd-0.etcd.example:2379,https://etcd-1.etcd.example:2379"; g.args["--etcd-servers"] != want {
					t.Fatalf("--etcd-servers=%s, want %s", g.args["--etcd-servers"], want)
				}
				if g.args["--etcd-prefix"] != "/gateway" {
					t.Fatalf("--etcd-prefix=%s", g.args["--etcd-prefix"])
				}
				checkEtcdClientFlags(t, g, "external-etcd-client")
				checkGeneratedServingCert(t, g)
			},
		},
		{
			name:  "cert-manager",
			setup: func(*testing.T, string) []string { return []string{"--set", "certificates.mode=certManager"} },
			check: func(t *testing.T, g *gateway) {
				full := g.deploy.Name
				checkCertManager(t, g, cmIssuerRef{full + "-ca", "Issuer"})
				g.m.Get(t, "Issuer", g.ns, full+"-selfsigned")
				g.m.Get(t, "Issuer", g.ns, full+"-ca")
				ca := g.m.Get(t, "Certificate", g.ns, full+"-ca")
				if isCA, _, _ := unstructured.NestedBool(ca.Object, "spec", "isCA"); !isCA {
					t.Fatal("the chart's CA Certificate is not a CA")
				}
				// The bundled etcd's certificates come from cert-manager too.
				checkBundledEtcd(t, g, 1, false)
				if len(g.m.All("Secret")) != 0 {
					t.Fatal("Secrets rendered in cert-manager mode")
				}
			},
		},
		{
			name: "cert-manager-cluster-issuer",
			setup: func(*testing.T, string) []string {
				return []string{"--set", "certificates.mode=certManager",
					"--set", "certificates.certManager.issuerRef.name=corp-ca",
					"--set", "certificates.certManager.issuerRef.kind=ClusterIssuer"}
			},
			check: func(t *testing.T, g *gateway) {
				checkCertManager(t, g, cmIssuerRef{"corp-ca", "ClusterIssuer"})
				if len(g.m.All("Issuer")) != 0 {
					t.Fatal("a self-signed Issuer rendered although issuerRef is set")
				}
			},
		},
		{
			name: "user-certs",
			setup: func(t *testing.T, ns string) []string {
				caPEM, certPEM, keyPEM := testCA(t, chart.Release+"."+ns+".svc")
				// As a user would: the Secret exists before the install.
				if _, err := hubAdmin(t).CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Name: "my-serving-cert"},
					Type:       corev1.SecretTypeTLS,
					Data:       map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM},
				}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				caFile := filepath.Join(t.TempDir(), "ca.crt")
				if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
					t.Fatal(err)
				}
				return []string{"--set", "certificates.mode=secret", "--set", "certificates.secret.name=my-serving-cert",
					"--set-file", "certificates.secret.caBundle=" + caFile}
			},
			check: func(t *testing.T, g *gateway) {
				if g.volumeSecret(t, "serving-cert") != "my-serving-cert" {
					t.Fatalf("the pods mount %s, not the user's Secret", g.volumeSecret(t, "serving-cert"))
				}
				if g.m.Find("Secret", g.ns, "my-serving-cert") != nil {
					t.Fatal("the chart renders the user's own Secret")
				}
				s, err := hubAdmin(t).CoreV1().Secrets(g.ns).Get(ctx, "my-serving-cert", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				verifyChain(t, "user-supplied serving certificate", g.caBundle, s.Data["tls.crt"], s.Data["tls.key"], g.servingDNS, x509.ExtKeyUsageServerAuth)
			},
		},
		{
			name: "custom",
			setup: func(t *testing.T, ns string) []string {
				createHubNamespace(ctx, t, ns+"-credentials")
				values := fmt.Sprintf(`replicaCount: 3
fullnameOverride: gw
image: {repository: example.invalid/platform/kube-gateway, tag: v9.9.9-test, pullPolicy: Always}
imagePullSecrets: [{name: pull-secret}]
resources: {requests: {cpu: 500m, memory: 512Mi}, limits: {cpu: "2", memory: 2Gi}}
podAntiAffinity: hard
secretNamespace: %s-credentials
service: {port: 8443}
gateway: {securePort: 9443, authorizeProxySubpath: true, maxLongRunningRequestsPerUser: 500, logVerbosity: 4, extraArgs: ["--request-timeout=2m"], goGC: 0}
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Equal, value: gateway, effect: NoSchedule}]
podAnnotations: {example.invalid/team: platform}
etcd:
  bundled:
    persistence: {size: 20Gi, storageClassName: fast-ssd}
    resources: {requests: {cpu: "1", memory: 1Gi}}
    networkPolicy: {enabled: false}
`, ns)
				file := filepath.Join(t.TempDir(), "values.yaml")
				if err := os.WriteFile(file, []byte(values), 0o644); err != nil {
					t.Fatal(err)
				}
				return []string{"--values", file}
			},
			check: func(t *testing.T, g *gateway) {
				pod := g.deploy.Spec.Template.Spec
				if g.deploy.Name != "gw" || *g.deploy.Spec.Replicas != 3 {
					t.Fatalf("Deployment %s with %d replicas, want gw with 3", g.deploy.Name, *g.deploy.Spec.Replicas)
				}
				if g.container.Image != "example.invalid/platform/kube-gateway:v9.9.9-test" || g.container.ImagePullPolicy != corev1.PullAlways ||
					len(pod.ImagePullSecrets) != 1 || pod.ImagePullSecrets[0].Name != "pull-secret" {
					t.Fatalf("image %s %s %v", g.container.Image, g.container.ImagePullPolicy, pod.ImagePullSecrets)
				}
				wantRes := corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("2Gi")},
				}
				if !reflect.DeepEqual(g.container.Resources.Requests, wantRes.Requests) || !reflect.DeepEqual(g.container.Resources.Limits, wantRes.Limits) {
					t.Fatalf("resources %+v, want %+v", g.container.Resources, wantRes)
				}
				if pod.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
					t.Fatal("podAntiAffinity: hard is not required anti-affinity")
				}
				for flag, want := range map[string]string{
					"--secret-namespace": g.ns + "-credentials", "--secure-port": "9443", "--v": "4",
					"--request-timeout": "2m", "--authorize-proxy-subpath": "", "--max-long-running-requests-per-user": "500",
					"--status-lease-name": "gw-status", // from fullnameOverride: installs sharing a namespace differ
				} {
					if got, ok := g.args[flag]; !ok || got != want {
						t.Fatalf("%s=%q (set: %v), want %q", flag, got, ok, want)
					}
				}
				if e := g.env("GOGC"); e != nil {
					t.Fatalf("GOGC %+v with goGC: 0, want Go's default (unset)", e)
				}
				if g.service.Spec.Ports[0].Port != 8443 {
					t.Fatalf("Service port %d", g.service.Spec.Ports[0].Port)
				}
				if pod.NodeSelector["kubernetes.io/os"] != "linux" || len(pod.Tolerations) != 1 || g.deploy.Spec.Template.Annotations["example.invalid/team"] != "platform" {
					t.Fatalf("node selector %v, tolerations %v, annotations %v", pod.NodeSelector, pod.Tolerations, g.deploy.Spec.Template.Annotations)
				}
				sts := checkBundledEtcd(t, g, 1, true)
				pvc := sts.Spec.VolumeClaimTemplates[0].Spec
				if pvc.StorageClassName == nil || *pvc.StorageClassName != "fast-ssd" || pvc.Resources.Requests.Storage().String() != "20Gi" {
					t.Fatalf("etcd volume claim %+v", pvc)
				}
				if len(g.m.All("NetworkPolicy")) != 0 {
					t.Fatal("NetworkPolicy rendered although disabled")
				}
				checkGeneratedServingCert(t, g)
			},
		},
		{
			name: "direct-access",
			setup: func(*testing.T, string) []string {
				return []string{"--set", "directAccess.enabled=true", "--set", "directAccess.service.type=LoadBalancer",
					"--set", "directAccess.service.port=6443", "--set", "directAccess.service.nodePort=31443",
					"--set", "directAccess.service.loadBalancerSourceRanges={10.0.0.0/8}",
					"--set", "directAccess.service.annotations.example\\.invalid/lb=internal"}
			},
			check: func(t *testing.T, g *gateway) {
				checkDirectAccess(t, g, true)
				svc := chart.Convert[corev1.Service](t, g.m.Get(t, "Service", g.ns, g.deploy.Name+"-direct"))
				p := svc.Spec.Ports[0]
				if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || p.Port != 6443 || p.NodePort != 31443 ||
					!slices.Equal(svc.Spec.LoadBalancerSourceRanges, []string{"10.0.0.0/8"}) || svc.Annotations["example.invalid/lb"] != "internal" {
					t.Fatalf("direct Service %+v, annotations %v", svc.Spec, svc.Annotations)
				}
				checkGeneratedServingCert(t, g)
			},
		},
		{
			name: "member-door",
			setup: func(*testing.T, string) []string {
				return []string{"--set", "memberDoor.enabled=true", "--set", "memberDoor.service.type=NodePort", "--set", "memberDoor.service.nodePort=31643"}
			},
			check: func(t *testing.T, g *gateway) {
				svc := chart.Convert[corev1.Service](t, g.m.Get(t, "Service", g.ns, g.deploy.Name+"-member-door"))
				p := svc.Spec.Ports[0]
				if svc.Spec.Type != corev1.ServiceTypeNodePort || p.Port != 443 || p.NodePort != 31643 || p.TargetPort.String() != "member-door" {
					t.Fatalf("member door Service %+v", svc.Spec)
				}
				if args := g.deploy.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--member-door-port=6443") {
					t.Fatalf("gateway args %v, want --member-door-port=6443", args)
				}
			},
		},
		{
			name: "direct-access-no-audit",
			setup: func(*testing.T, string) []string {
				return []string{"--set", "directAccess.enabled=true", "--set", "directAccess.audit.enabled=false"}
			},
			check: func(t *testing.T, g *gateway) {
				checkDirectAccess(t, g, false)
				svc := chart.Convert[corev1.Service](t, g.m.Get(t, "Service", g.ns, g.deploy.Name+"-direct"))
				if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].NodePort != 0 {
					t.Fatalf("direct Service %+v, want ClusterIP port 443", svc.Spec)
				}
			},
		},
	}
}

// checkNoDirectAccess wants the default: no --direct-access, no direct
// Service, no audit flags.
func checkNoDirectAccess(t *testing.T, g *gateway) {
	t.Helper()
	for _, flag := range []string{"--direct-access", "--audit-policy-file", "--audit-log-path"} {
		if _, ok := g.args[flag]; ok {
			t.Fatalf("%s set by default", flag)
		}
	}
	for _, svc := range g.m.All("Service") {
		if svc.GetName() != g.service.Name && !strings.HasPrefix(svc.GetName(), g.deploy.Name+"-etcd") {
			t.Fatalf("Service %s by default, want the APIService's (and the bundled etcd's) only", svc.GetName())
		}
	}
	if len(g.m.All("ConfigMap")) != 0 {
		t.Fatalf("%d ConfigMaps by default, want none", len(g.m.All("ConfigMap")))
	}
}

// checkDirectAccess wants --direct-access, a direct Service of its own next to
// the APIService's (which checkGateway checked) sending to the gateway's pods,
// and, with audit, the gateway's audit policy mounted and logged to stdout.
func checkDirectAccess(t *testing.T, g *gateway, audit bool) {
	t.Helper()
	if v, ok := g.args["--direct-access"]; !ok || v != "" {
		t.Fatalf("--direct-access: %q (set: %v)", v, ok)
	}
	svc := chart.Convert[corev1.Service](t, g.m.Get(t, "Service", g.ns, g.deploy.Name+"-direct"))
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(g.deploy.Spec.Template.Labels)) ||
		len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "https" {
		t.Fatalf("direct Service does not send its one port to the pods' https port: %+v", svc.Spec)
	}
	if svc.Name == g.service.Name {
		t.Fatal("the direct Service is the APIService's")
	}
	cm := g.m.Find("ConfigMap", g.ns, g.deploy.Name+"-audit-policy")
	if !audit {
		if cm != nil || g.args["--audit-policy-file"] != "" || g.args["--audit-log-path"] != "" {
			t.Fatalf("audit rendered with directAccess.audit.enabled=false: %v", g.args)
		}
		return
	}
	if cm == nil {
		t.Fatal("no audit policy ConfigMap")
	}
	var policy struct {
		APIVersion string           `json:"apiVersion"`
		Kind       string           `json:"kind"`
		Rules      []map[string]any `json:"rules"`
	}
	data := chart.Convert[corev1.ConfigMap](t, cm).Data["policy.yaml"]
	if err := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(data), 4096).Decode(&policy); err != nil {
		t.Fatalf("audit policy: %v\n%s", err, data)
	}
	if policy.APIVersion != "audit.k8s.io/v1" || policy.Kind != "Policy" || len(policy.Rules) == 0 || policy.Rules[0]["level"] != "Metadata" {
		t.Fatalf("audit policy %+v", policy)
	}
	var cmVolume string
	for _, v := range g.deploy.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.GetName() {
			cmVolume = v.Name
		}
	}
	if cmVolume == "" || g.args["--audit-policy-file"] != g.mountPath(t, cmVolume)+"/policy.yaml" ||
		g.args["--audit-log-path"] != "-" || g.args["--audit-log-format"] != "json" {
		t.Fatalf("audit flags %q %q %q, policy volume %q", g.args["--audit-policy-file"], g.args["--audit-log-path"], g.args["--audit-log-format"], cmVolume)
	}
	if g.deploy.Spec.Template.Annotations["checksum/audit-policy"] == "" {
		t.Fatal("no checksum/audit-policy annotation: a changed policy would not roll the pods")
	}
}

// The gateway chart passes `helm lint --strict` and renders, for default and
// non-default values, into objects that hold what matters (probes, security
// context, RBAC, caBundle matching the serving certificate, etcd flags), and the
// real hub accepts every one of them in a server-side dry run. cert-manager's Issuer and Certificate are checked
// against minimal CRDs installed for the test.
func TestChartGatewayOnTheHub(t *testing.T) {
	ctx := testContext(t, 10*time.Minute)
	installCertManagerCRDs(ctx, t)
	for _, c := range gatewayChartCases(ctx) {
		t.Run(c.name, func(t *testing.T) {
			ns := "chart-" + c.name
			createHubNamespace(ctx, t, ns)
			args := c.setup(t, ns)
			lint := append([]string{"lint", "--strict", chart.Path(t, "kube-gateway"), "--namespace", ns}, args...)
			if out, err := helm().Run(ctx, t, lint...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			m := helm().Render(ctx, t, "kube-gateway", ns, args...)
			g := checkGateway(t, m, ns)
			c.check(t, g)
			dryRunOnHub(ctx, t, m)
		})
	}
}

// The certificates the chart generates are kept across upgrades: rendered
// against the hub (`--dry-run=server`, as `helm upgrade` renders), the chart
// reuses the existing Secrets (lookup) and the caBundle stays the CA that signed
// them; without them every render makes a new CA.
func TestChartKeepsGeneratedCertificatesOnUpgrade(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	ns := "chart-upgrade"
	createHubNamespace(ctx, t, ns)
	first := helm().Render(ctx, t, "kube-gateway", ns)
	second := helm().Render(ctx, t, "kube-gateway", ns)
	g1, g2 := checkGateway(t, first, ns), checkGateway(t, second, ns)
	if string(g1.caBundle) == string(g2.caBundle) {
		t.Fatal("two renders without a cluster made the same CA")
	}
	// The Secrets of the first install exist.
	list := map[string]any{"apiVersion": "v1", "kind": "List", "items": []any{}}
	for _, s := range first.All("Secret") {
		list["items"] = append(list["items"].([]any), s.Object)
	}
	data, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "secrets.json")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := env.Kubectl(ctx, "hub-admin", "apply", "-f", file); err != nil {
		t.Fatal(err)
	}
	// The hub already has the APIService (the harness's): --take-ownership lets
	// the dry run render over it without changing anything.
	upgrade := helm().Render(ctx, t, "kube-gateway", ns, "--dry-run=server", "--take-ownership", "--kubeconfig", env.Kubeconfig("hub-admin"))
	g3 := checkGateway(t, upgrade, ns)
	if string(g3.caBundle) != string(g1.caBundle) {
		t.Fatal("the caBundle changed although the serving Secret exists")
	}
	for _, s := range first.All("Secret") {
		if !reflect.DeepEqual(secretData(t, s), secretData(t, upgrade.Get(t, "Secret", ns, s.GetName()))) {
			t.Fatalf("Secret %s was regenerated", s.GetName())
		}
	}
	checkGeneratedServingCert(t, g3)
	checkBundledEtcd(t, g3, 1, true)
}

func writeTestKubeconfig(t *testing.T, server string, caPEM []byte, token string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "test.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// The member chart, installed with helm on member-b, gives the gateway an
// identity whose token may impersonate there and nothing else, and a cache
// identity whose token may read configmaps and nothing else; registered on the
// hub with the commands of docs/install.md, it carries hub users to member-b.
func TestChartMemberIdentityImpersonates(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	// The harness gave member-b the gateway identity "kube-gateway" already:
	// this install is named differently so that both live side by side.
	const ns, name, cluster = "kube-gateway", "kube-gateway-e2e", "chart-member"
	member := env.Members[harness.MemberB]
	memberKC := env.Kubeconfig(harness.MemberB + "-admin")
	if _, err := helm().Run(ctx, t, "install", "kube-gateway-member", chart.Path(t, "kube-gateway-member"),
		"--kubeconfig", memberKC, "--namespace", ns, "--create-namespace", "--set", "name="+name,
		"--set", "cache.enabled=true", "--set", "cache.resources={configmaps}"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if _, err := helm().Run(ctx, t, "uninstall", "kube-gateway-member", "--kubeconfig", memberKC, "--namespace", ns); err != nil {
			t.Errorf("helm uninstall: %v", err)
		}
		_ = memberB(t).CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})

	cs := memberB(t)
	secret, err := cs.CoreV1().Secrets(ns).Get(ctx, name+"-token", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if secret.Type != corev1.SecretTypeServiceAccountToken || secret.Annotations[corev1.ServiceAccountNameKey] != name {
		t.Fatalf("Secret %s is %s for %q, want a token of ServiceAccount %s", secret.Name, secret.Type, secret.Annotations[corev1.ServiceAccountNameKey], name)
	}

	// docs/install.md: read the token and CA from the member, once the member's
	// token controller filled them in...
	readSecret := func(ctx context.Context, secret, key string) ([]byte, error) {
		out, _, err := env.Kubectl(ctx, memberKC, "-n", ns, "get", "secret", secret, "-o", "jsonpath={.data."+strings.ReplaceAll(key, ".", `\.`)+"}")
		if err != nil {
			return nil, err
		}
		b, err := base64.StdEncoding.DecodeString(out)
		if err != nil || len(b) == 0 {
			return nil, errorf("%s of Secret %s: %q %v", key, secret, out, err)
		}
		return b, nil
	}
	read := func(ctx context.Context, key string) ([]byte, error) { return readSecret(ctx, name+"-token", key) }
	var token, caPEM, cacheToken []byte
	eventually(t, time.Minute, func(ctx context.Context) (err error) {
		if token, err = read(ctx, "token"); err != nil {
			return err
		}
		if cacheToken, err = readSecret(ctx, name+"-cache-token", "token"); err != nil {
			return err
		}
		caPEM, err = read(ctx, "ca.crt")
		return err
	})

	// ... with which the gateway's identity may impersonate on member-b, and only that.
	gw := writeTestKubeconfig(t, member.Servers[0].URL, caPEM, string(token))
	eventually(t, 30*time.Second, func(context.Context) error {
		out, _, err := env.Kubectl(ctx, gw, "auth", "can-i", "impersonate", "users")
		if strings.TrimSpace(out) != "yes" {
			return errorf("kubectl auth can-i impersonate users: %q %v", out, err)
		}
		return nil
	})
	gwClient, err := kubernetes.NewForConfig(&rest.Config{Host: member.Servers[0].URL, BearerToken: string(token), TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "users", Name: "alice"}, true},
		{authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "groups", Name: "dev-team"}, true},
		{authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "serviceaccounts", Namespace: "default", Name: "default"}, true},
		{authorizationv1.ResourceAttributes{Verb: "impersonate", Group: "authentication.k8s.io", Resource: "uids", Name: "alice-uid"}, true},
		{authorizationv1.ResourceAttributes{Verb: "impersonate", Group: "authentication.k8s.io", Resource: "userextras", Subresource: "scopes"}, true},
		{authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"}, false},
		{authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Namespace: "default"}, false},
		{authorizationv1.ResourceAttributes{Verb: "*", Group: "*", Resource: "*"}, false},
	} {
		r, err := gwClient.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &c.attrs}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != c.want {
			t.Fatalf("the chart's identity may %+v: %v, want %v", c.attrs, r.Status.Allowed, c.want)
		}
	}
	// The cache identity reads configmaps, in every namespace, and nothing else.
	cacheClient, err := kubernetes.NewForConfig(&rest.Config{Host: member.Servers[0].URL, BearerToken: string(cacheToken), TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps"}, true},
		{authorizationv1.ResourceAttributes{Verb: "watch", Resource: "configmaps", Namespace: "kube-system"}, true},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: "default", Name: "x"}, true},
		{authorizationv1.ResourceAttributes{Verb: "create", Resource: "configmaps", Namespace: "default"}, false},
		{authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"}, false},
		{authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}, false},
		{authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "users", Name: "alice"}, false},
	} {
		r, err := cacheClient.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &c.attrs}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != c.want {
			t.Fatalf("the chart's cache identity may %+v: %v, want %v", c.attrs, r.Status.Allowed, c.want)
		}
	}

	out, _, err := env.Kubectl(ctx, gw, "auth", "whoami", "--as=alice", "--as-group=dev-team", "--as-uid=alice-uid",
		"-o", "jsonpath={.status.userInfo.username} {.status.userInfo.uid} {.status.userInfo.groups}")
	if err != nil {
		t.Fatal(err)
	}
	if want := `alice alice-uid ["dev-team","system:authenticated"]`; out != want {
		t.Fatalf("an impersonated request with the chart's token: whoami %q, want %q", out, want)
	}

	// ... and on the hub: the credential Secret and the UpstreamCluster.
	caFile := filepath.Join(t.TempDir(), "member-ca.crt")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := env.Kubectl(ctx, "hub-admin", "-n", harness.GatewayNamespace, "create", "secret", "generic", cluster,
		"--from-literal=token="+string(token), "--from-file=ca.crt="+caFile); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = hubAdmin(t).CoreV1().Secrets(harness.GatewayNamespace).Delete(context.Background(), cluster, metav1.DeleteOptions{})
	})
	if _, _, err := env.Kubectl(ctx, "hub-admin", "-n", harness.GatewayNamespace, "create", "secret", "generic", cluster+"-cache",
		"--from-literal=token="+string(cacheToken), "--from-file=ca.crt="+caFile); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = hubAdmin(t).CoreV1().Secrets(harness.GatewayNamespace).Delete(context.Background(), cluster+"-cache", metav1.DeleteOptions{})
	})
	ucFile := filepath.Join(t.TempDir(), "uc.yaml")
	uc := fmt.Sprintf(`apiVersion: gateway.kubewharf.io/v1alpha1
kind: UpstreamCluster
metadata:
  name: %s
spec:
  servers:
  - endpoint: %s
  clientConfig:
    secretRef: {namespace: %s, name: %s}
    cacheSecretRef: {namespace: %s, name: %s-cache}
`, cluster, member.Servers[0].URL, harness.GatewayNamespace, cluster, harness.GatewayNamespace, cluster)
	if err := os.WriteFile(ucFile, []byte(uc), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := env.Kubectl(ctx, "hub-admin", "apply", "-f", ucFile); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _, _ = env.Kubectl(context.Background(), "hub-admin", "delete", "--ignore-not-found", "-f", ucFile)
	})
	waitUsable(t, cluster)

	// alice through the hub and the gateway is alice on member-b, and member-b
	// saw the chart's ServiceAccount impersonate her.
	via := writeTestKubeconfig(t, env.Hub.Servers[0].URL+harness.ProxyPath(cluster), env.Hub.CAData, env.Hub.Tokens[harness.UserAlice])
	out, _, err = env.Kubectl(ctx, via, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
	if err != nil {
		t.Fatal(err)
	}
	if out != harness.UserAlice {
		t.Fatalf("whoami through the hub: %q", out)
	}
	gatewayUser := "system:serviceaccount:" + ns + ":" + name
	eventually(t, 10*time.Second, func(context.Context) error {
		if n := countAudit(t, member.Servers[0], func(ev *auditEvent) bool {
			return ev.User.Username == gatewayUser && ev.ImpersonatedUser != nil && ev.ImpersonatedUser.Username == harness.UserAlice &&
				ev.ObjectRef != nil && ev.ObjectRef.Resource == "selfsubjectreviews"
		}); n == 0 {
			return errorf("member-b's audit log has no selfsubjectreview by %s impersonating alice", gatewayUser)
		}
		return nil
	})
}

// The gateway chart's liveness and readiness probe paths: etcd is left out, so
// that an outage of the gateway's own etcd (which only UpstreamCluster writes
// need) neither takes the pods out of the hub's Service nor restarts them.
const (
	chartLivenessPath  = "/livez?exclude=etcd"
	chartReadinessPath = "/readyz?exclude=etcd&exclude=etcd-readiness"
)
