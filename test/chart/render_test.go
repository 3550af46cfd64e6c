package chart

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kubewharf/kube-gateway/cmd/kube-gateway/app"
	"github.com/kubewharf/kube-gateway/proxy/longrunning"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// The checks here need helm and nothing else; the gateway chart's renderings,
// which the hub checks in a server-side dry run, are in test/e2e.

func testContext(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// The member chart passes `helm lint --strict` for both kinds of identity (the
// gateway chart is linted for each value set in test/e2e's TestChartGatewayOnTheHub).
func TestMemberLint(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	helm := DefaultHelm(t)
	for _, set := range [][]string{nil, {"--set", "identity.type=user", "--set", "identity.user.name=gateway.example"},
		{"--set", "cache.enabled=true", "--set", "cache.resources={configmaps,deployments.apps}"}} {
		args := append([]string{"lint", "--strict", Path(t, "kube-gateway-member"), "--namespace", "kube-gateway"}, set...)
		if out, err := helm.Run(ctx, t, args...); err != nil {
			t.Fatalf("member chart %v: %v\n%s", set, err, out)
		}
	}
}

// Invalid values fail before anything is rendered: the schema refuses unknown
// keys and wrong types, the templates refuse inconsistent choices.
func TestRejectsInvalidValues(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	helm := DefaultHelm(t)
	const schemaErr = "don't meet the specifications of the schema"
	for _, c := range []struct {
		chart string
		args  []string
		want  []string
	}{
		{"kube-gateway", []string{"--set", "replicaCout=3"}, []string{schemaErr, "replicaCout"}},
		{"kube-gateway", []string{"--set-string", "replicaCount=x"}, []string{schemaErr, "/replicaCount"}},
		{"kube-gateway", []string{"--set", "image.reposity=x"}, []string{schemaErr, "reposity"}},
		{"kube-gateway", []string{"--set", "etcd.bundled.replicas=2"}, []string{schemaErr, "/etcd/bundled/replicas"}},
		{"kube-gateway", []string{"--set", "certificates.mode=selfSigned"}, []string{schemaErr, "/certificates/mode"}},
		{"kube-gateway", []string{"--set", "certificates.mode=secret", "--set", "certificates.secret.name=x"}, []string{schemaErr, "caBundle"}},
		{"kube-gateway", []string{"--set", "etcd.mode=external"}, []string{schemaErr, "/etcd/external/endpoints"}},
		{"kube-gateway", []string{"--set", "etcd.mode=external", "--set", "etcd.external.endpoints={etcd:2379}"}, []string{schemaErr, "/etcd/external/endpoints/0"}},
		{"kube-gateway", []string{"--set", "apiService.insecureSkipTLSVerify=true"}, []string{schemaErr, "insecureSkipTLSVerify"}},
		{"kube-gateway", []string{"--set", "resources.requests.cpu=lots"}, []string{schemaErr, "/resources/requests/cpu"}},
		{"kube-gateway", []string{"--set", "gateway.goGC=-1"}, []string{schemaErr, "/gateway/goGC"}},
		{"kube-gateway", []string{"--set", "gateway.maxLongRunningRequestsPerUser=-1"}, []string{schemaErr, "/gateway/maxLongRunningRequestsPerUser"}},
		{"kube-gateway", []string{"--set-string", "gateway.maxLongRunningRequestsPerUser=many"}, []string{schemaErr, "/gateway/maxLongRunningRequestsPerUser"}},
		{"kube-gateway", []string{"--set", "gateway.memberResponseHeaderTimeout=90"}, []string{schemaErr, "/gateway/memberResponseHeaderTimeout"}},
		{"kube-gateway", []string{"--set", "gateway.shutdownDelaySeconds=-1"}, []string{schemaErr, "/gateway/shutdownDelaySeconds"}},
		{"kube-gateway", []string{"--set", "gateway.shutdownDelaySeconds=75"}, []string{"terminationGracePeriodSeconds must be longer than gateway.shutdownDelaySeconds"}},
		{"kube-gateway", []string{"--set", "gateway.fanOutListMemory=lots"}, []string{schemaErr, "/gateway/fanOutListMemory"}},
		{"kube-gateway", []string{"--set", "gateway.fanOutListMemory=-1"}, []string{schemaErr, "/gateway/fanOutListMemory"}},
		{"kube-gateway", []string{"--set", "gateway.fleetCacheMemory=lots"}, []string{schemaErr, "/gateway/fleetCacheMemory"}},
		{"kube-gateway", []string{"--set", "directAccess.enable=true"}, []string{schemaErr, "enable"}},
		{"kube-gateway", []string{"--set", "directAccess.service.type=ExternalName"}, []string{schemaErr, "/directAccess/service/type"}},
		{"kube-gateway", []string{"--set", "directAccess.audit.policy.kind=Config"}, []string{schemaErr, "/directAccess/audit/policy/kind"}},
		{"kube-gateway", []string{"--set", "memberDoor.service.type=ExternalName"}, []string{schemaErr, "/memberDoor/service/type"}},
		{"kube-gateway", []string{"--set", "memberDoor.port=0"}, []string{schemaErr, "/memberDoor/port"}},
		// Past the schema, the templates:
		{"kube-gateway", []string{"--set", "etcd.mode=external", "--set", "etcd.external.endpoints={https://etcd:2379}"}, []string{"etcd.external.tls.secretName", "required for https"}},
		{"kube-gateway", []string{"--set", "certificates.mode=secret", "--set", "certificates.secret.name=x", "--set", "certificates.secret.caBundle=not-pem"}, []string{"caBundle must be PEM"}},
		{"kube-gateway", []string{"--set", "memberDoor.enabled=true", "--set", "memberDoor.port=8443", "--set", "gateway.securePort=8443"}, []string{"memberDoor.port must differ from gateway.securePort"}},
		{"kube-gateway-member", []string{"--set", "identity.type=token"}, []string{schemaErr, "/identity/type"}},
		{"kube-gateway-member", []string{"--set", "identity.user.nam=x"}, []string{schemaErr, "nam"}},
		{"kube-gateway-member", []string{"--set", "name=Not_A_Name"}, []string{schemaErr, "/name"}},
		{"kube-gateway-member", []string{"--set", "cache.enabled=true", "--set", "cache.resources={pods/log}"}, []string{schemaErr, "/cache/resources/0"}},
		{"kube-gateway-member", []string{"--set", "cache.enabled=true", "--set", "cache.resources={*}"}, []string{schemaErr, "/cache/resources/0"}},
		{"kube-gateway-member", []string{"--set", "cache.enabled=true", "--set", "cache.resources={ConfigMaps}"}, []string{schemaErr, "/cache/resources/0"}},
		{"kube-gateway-member", []string{"--set", "cache.resourcs={configmaps}"}, []string{schemaErr, "resourcs"}},
		// Past the schema, the member chart's templates:
		{"kube-gateway-member", []string{"--set", "cache.enabled=true"}, []string{"cache.resources is required with cache.enabled"}},
		{"kube-gateway-member", []string{"--set", "cache.enabled=true", "--set", "cache.resources={configmaps,secrets}"}, []string{"cache.resources: secrets are never cached"}},
		{"kube-gateway-member", []string{"--set", "cache.enabled=true", "--set", "cache.resources={configmaps,configmaps}"}, []string{"cache.resources: configmaps given twice"}},
	} {
		args := append([]string{"template", Release, Path(t, c.chart), "--namespace", "kube-gateway"}, c.args...)
		out, err := helm.Run(ctx, t, args...)
		if err == nil {
			t.Fatalf("%s %v rendered:\n%s", c.chart, c.args, out)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%s %v: error does not mention %q: %v", c.chart, c.args, w, err)
			}
		}
	}
}

// The images `make image` tags are the chart's defaults.
func TestDefaultImagesAreWhatMakeImageBuilds(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "make", "-s", "--no-print-directory", "-C", root, "image-names")
	for _, kv := range os.Environ() { // not a sub-make of the make that may run this test
		if !strings.HasPrefix(kv, "MAKEFLAGS=") && !strings.HasPrefix(kv, "MAKELEVEL=") && !strings.HasPrefix(kv, "MFLAGS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make image-names: %v", err)
	}
	want := strings.Fields(string(out))
	m := DefaultHelm(t).Render(ctx, t, "kube-gateway", "kube-gateway")
	got := []string{
		Convert[appsv1.Deployment](t, m.One(t, "Deployment")).Spec.Template.Spec.Containers[0].Image,
		Convert[appsv1.StatefulSet](t, m.One(t, "StatefulSet")).Spec.Template.Spec.Containers[0].Image,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("chart images %v, make image tags %v", got, want)
	}
}

// The chart passes the per-user cap of long-running requests as a whole
// number: by default the gateway's own default, which the chart's memory limit
// is sized for; 0 (no limit) and large values as written.
func TestLongRunningCap(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	helm := DefaultHelm(t)
	flag := "--" + longrunning.Flag + "="
	// From a values file, YAML numbers are floats, which a template prints
	// as 2e+06.
	large := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(large, []byte("gateway: {maxLongRunningRequestsPerUser: 2000000}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		set  []string
		want string
	}{
		{nil, strconv.Itoa(app.NewOptions().MaxLongRunningPerUser)},
		{[]string{"--set", "gateway.maxLongRunningRequestsPerUser=0"}, "0"},
		{[]string{"--values", large}, "2000000"},
	} {
		args := gatewayArgs(ctx, t, helm, c.set...)
		var got []string
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, flag); ok {
				got = append(got, v)
			}
		}
		if len(got) != 1 || got[0] != c.want {
			t.Fatalf("%v: %s%v, want %s%s", c.set, flag, got, flag, c.want)
		}
	}
}

// gateway.memberResponseHeaderTimeout passes --member-response-header-timeout;
// left empty, the gateway's own default applies.
func TestMemberResponseHeaderTimeout(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	helm := DefaultHelm(t)
	args := func(extra ...string) []string { return gatewayArgs(ctx, t, helm, extra...) }
	for _, a := range args() {
		if strings.HasPrefix(a, "--member-response-header-timeout") {
			t.Fatalf("default values pass %s, want the gateway's default", a)
		}
	}
	if got := args("--set", "gateway.memberResponseHeaderTimeout=90s"); !slices.Contains(got, "--member-response-header-timeout=90s") {
		t.Fatalf("with memberResponseHeaderTimeout=90s the args are %v", got)
	}
}

// gateway.shutdownDelaySeconds passes --shutdown-delay-duration, 10s by
// default: a stopping replica keeps serving while the Service takes it out
// (TestRollingRestart in test/e2e rolls replicas with these flags).
func TestShutdownDelay(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	helm := DefaultHelm(t)
	if got := gatewayArgs(ctx, t, helm); !slices.Contains(got, "--shutdown-delay-duration=10s") {
		t.Fatalf("default args %v, want --shutdown-delay-duration=10s", got)
	}
	if got := gatewayArgs(ctx, t, helm, "--set", "gateway.shutdownDelaySeconds=0"); !slices.Contains(got, "--shutdown-delay-duration=0s") {
		t.Fatalf("with shutdownDelaySeconds=0 the args are %v", got)
	}
}

// The konnectivity servers (gateway chart) and agent (member chart) render only
// when enabled, with the mutual TLS files of their Secret, destHost routing,
// --server-count of the servers, and the agent announcing the member's
// endpoint hosts.
func TestKonnectivity(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	helm := DefaultHelm(t)
	if m := helm.Render(ctx, t, "kube-gateway", "kube-gateway"); len(m.All("Deployment")) != 1 {
		t.Fatalf("default values render %d Deployments, want the gateway's only", len(m.All("Deployment")))
	}
	enabled := []string{"--set", "konnectivity.enabled=true",
		"--set", "konnectivity.image.repository=example/proxy-server", "--set", "konnectivity.tlsSecretName=konnectivity-tls"}
	m := helm.Render(ctx, t, "kube-gateway", "kube-gateway", enabled...)
	server := Convert[appsv1.StatefulSet](t, m.Get(t, "StatefulSet", "kube-gateway", "kube-gateway-konnectivity"))
	c := server.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"--mode=grpc", "--server-port=8090", "--agent-port=8091", "--proxy-strategies=destHost",
		"--server-ca-cert=/etc/konnectivity/ca.crt", "--cluster-ca-cert=/etc/konnectivity/ca.crt"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("proxy-server args %v lack %s", c.Args, want)
		}
	}
	if c.Image != "example/proxy-server:v0.34.0" || server.Spec.Template.Spec.Volumes[0].Secret.SecretName != "konnectivity-tls" {
		t.Errorf("proxy-server image %s, volumes %+v", c.Image, server.Spec.Template.Spec.Volumes)
	}
	m.Get(t, "Service", "kube-gateway", "kube-gateway-konnectivity")
	m.Get(t, "Service", "kube-gateway", "kube-gateway-konnectivity-agent")

	// Two servers by default, each counting both, each with an ID of its own
	// (its pod's name) and a DNS name of its own for addresses; one at a time
	// may be disrupted.
	checkServers := func(m *Manifest, replicas int) {
		t.Helper()
		sts := Convert[appsv1.StatefulSet](t, m.Get(t, "StatefulSet", "kube-gateway", "kube-gateway-konnectivity"))
		c := sts.Spec.Template.Spec.Containers[0]
		if sts.Spec.Replicas == nil || int(*sts.Spec.Replicas) != replicas || !slices.Contains(c.Args, fmt.Sprintf("--server-count=%d", replicas)) {
			t.Errorf("konnectivity servers: replicas %v, args %v; want %d and --server-count=%d", sts.Spec.Replicas, c.Args, replicas, replicas)
		}
		if len(c.Env) != 1 || c.Env[0].Name != "PROXY_SERVER_ID" || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.name" {
			t.Errorf("konnectivity server env %+v, want PROXY_SERVER_ID from the pod's name", c.Env)
		}
		headless := Convert[corev1.Service](t, m.Get(t, "Service", "kube-gateway", sts.Spec.ServiceName))
		if headless.Spec.ClusterIP != corev1.ClusterIPNone || !labels.SelectorFromSet(headless.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)) {
			t.Errorf("Service %s (clusterIP %q, selector %v) does not give each server a name", headless.Name, headless.Spec.ClusterIP, headless.Spec.Selector)
		}
		var pdb bool
		for _, u := range m.All("PodDisruptionBudget") {
			p := Convert[policyv1.PodDisruptionBudget](t, u)
			sel, _ := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
				pdb = p.Spec.MaxUnavailable.IntValue() == 1
			}
		}
		if pdb != (replicas > 1) {
			t.Errorf("%d konnectivity servers: a PodDisruptionBudget of one at a time is %v, want %v", replicas, pdb, replicas > 1)
		}
	}
	checkServers(m, 2)
	checkServers(helm.Render(ctx, t, "kube-gateway", "kube-gateway", append(enabled, "--set", "konnectivity.replicas=3")...), 3)
	checkServers(helm.Render(ctx, t, "kube-gateway", "kube-gateway", append(enabled, "--set", "konnectivity.replicas=1")...), 1)

	if m := helm.Render(ctx, t, "kube-gateway-member", "kube-gateway"); len(m.All("Deployment")) != 0 {
		t.Fatal("the member chart renders a Deployment by default")
	}
	m = helm.Render(ctx, t, "kube-gateway-member", "kube-gateway", "--set", "konnectivityAgent.enabled=true",
		"--set", "konnectivityAgent.image.repository=example/proxy-agent", "--set", "konnectivityAgent.tlsSecretName=agent-tls",
		"--set", "konnectivityAgent.server=konnectivity.example.com:8091", "--set", "konnectivityAgent.hosts={kubernetes.default.svc,10.0.0.1}")
	agent := Convert[appsv1.Deployment](t, m.One(t, "Deployment")).Spec.Template.Spec.Containers[0]
	for _, want := range []string{"--proxy-server-host=konnectivity.example.com", "--proxy-server-port=8091",
		"--agent-identifiers=host=kubernetes.default.svc&host=10.0.0.1", "--ca-cert=/etc/konnectivity/ca.crt"} {
		if !slices.Contains(agent.Args, want) {
			t.Errorf("proxy-agent args %v lack %s", agent.Args, want)
		}
	}
	// Enabled without what it needs: refused with the value to set.
	for _, c := range []struct {
		chart string
		args  []string
		want  string
	}{
		{"kube-gateway", []string{"--set", "konnectivity.enabled=true", "--set", "konnectivity.tlsSecretName=x"}, "konnectivity.image.repository is required"},
		{"kube-gateway", []string{"--set", "konnectivity.enabled=true", "--set", "konnectivity.image.repository=x"}, "konnectivity.tlsSecretName is required"},
		{"kube-gateway-member", []string{"--set", "konnectivityAgent.enabled=true", "--set", "konnectivityAgent.image.repository=x", "--set", "konnectivityAgent.tlsSecretName=x"}, "konnectivityAgent.server is required"},
	} {
		args := append([]string{"template", Release, Path(t, c.chart), "--namespace", "kube-gateway"}, c.args...)
		if out, err := helm.Run(ctx, t, args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: %v, want an error with %q\n%s", c.chart, c.args, err, c.want, out)
		}
	}
}

// gateway.probeWithNewConnections passes --probe-with-new-connections; off by
// default.
func TestProbeWithNewConnections(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	helm := DefaultHelm(t)
	args := func(extra ...string) []string { return gatewayArgs(ctx, t, helm, extra...) }
	const flag = "--probe-with-new-connections"
	if got := args(); slices.Contains(got, flag) {
		t.Fatalf("default values pass %s", flag)
	}
	if got := args("--set", "gateway.probeWithNewConnections=true"); !slices.Contains(got, flag) {
		t.Fatalf("with probeWithNewConnections=true the args are %v", got)
	}
}

// gateway.fanOutListMemory passes --fan-out-list-memory, 256Mi by default;
// gateway.fleetCacheMemory --fleet-cache-memory likewise;
// gateway.shareHealthChecks --share-health-checks, true by default.
func TestFanOutListMemory(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	helm := DefaultHelm(t)
	args := func(extra ...string) []string { return gatewayArgs(ctx, t, helm, extra...) }
	for _, c := range []struct {
		set  []string
		want string
	}{
		{nil, "--fleet-cache-memory=256Mi"},
		{[]string{"--set", "gateway.fleetCacheMemory=0"}, "--fleet-cache-memory=0"},
		{nil, "--share-health-checks=true"},
		{[]string{"--set", "gateway.shareHealthChecks=false"}, "--share-health-checks=false"},
		{nil, "--fan-out-list-memory=256Mi"},
		{[]string{"--set", "gateway.fanOutListMemory=1Gi"}, "--fan-out-list-memory=1Gi"},
		{[]string{"--set", "gateway.fanOutListMemory=0"}, "--fan-out-list-memory=0"},
		{[]string{"--set-json", "gateway.fanOutListMemory=536870912"}, "--fan-out-list-memory=536870912"},
	} {
		if got := args(c.set...); !slices.Contains(got, c.want) {
			t.Errorf("%v: args %v, want %s", c.set, got, c.want)
		}
	}
}

// memberDoor.enabled passes --member-door-port, opens the container port and
// creates the door's Service toward it; off, none of them.
func TestMemberDoor(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	helm := DefaultHelm(t)
	off := helm.Render(ctx, t, "kube-gateway", "kube-gateway")
	if args := Convert[appsv1.Deployment](t, off.One(t, "Deployment")).Spec.Template.Spec.Containers[0].Args; slices.ContainsFunc(args, func(a string) bool {
		return strings.HasPrefix(a, "--"+app.MemberDoorPortFlag)
	}) {
		t.Errorf("default values pass the member door's flag: %v", args)
	}
	if s := off.Find("Service", "kube-gateway", "kube-gateway-member-door"); s != nil {
		t.Error("default values create the member door's Service")
	}

	on := helm.Render(ctx, t, "kube-gateway", "kube-gateway", "--set", "memberDoor.enabled=true", "--set", "memberDoor.port=7443",
		"--set", "memberDoor.service.type=LoadBalancer", "--set", "memberDoor.service.port=6443")
	c := Convert[appsv1.Deployment](t, on.One(t, "Deployment")).Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--"+app.MemberDoorPortFlag+"=7443") {
		t.Errorf("args %v, want --%s=7443", c.Args, app.MemberDoorPortFlag)
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "member-door" && p.ContainerPort == 7443 }) {
		t.Errorf("container ports %+v, want member-door 7443", c.Ports)
	}
	svc := Convert[corev1.Service](t, on.Get(t, "Service", "kube-gateway", "kube-gateway-member-door"))
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 6443 || svc.Spec.Ports[0].TargetPort.String() != "member-door" {
		t.Errorf("member door Service %+v, want a LoadBalancer on 6443 to the member-door port", svc.Spec)
	}
}

// gatewayArgs renders the kube-gateway chart with extra helm arguments and
// returns the gateway container's arguments.
func gatewayArgs(ctx context.Context, t *testing.T, helm Helm, extra ...string) []string {
	t.Helper()
	m := helm.Render(ctx, t, "kube-gateway", "kube-gateway", extra...)
	return Convert[appsv1.Deployment](t, m.One(t, "Deployment")).Spec.Template.Spec.Containers[0].Args
}

// cache.enabled renders the cache identity: a ServiceAccount <name>-cache and
// its token Secret (or, for identity.type user, a user), bound to a
// ClusterRole that may get, list and watch exactly cache.resources, one rule
// per group, sorted (as kube-gateway join writes it; test/e2e compares both
// on a member). Off, nothing of it.
func TestMemberCacheIdentity(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	helm := DefaultHelm(t)
	off := helm.Render(ctx, t, "kube-gateway-member", "kube-gateway", "--set", "cache.resources={configmaps}")
	if r := off.Find("ClusterRole", "", "kube-gateway:cache-reader"); r != nil || off.Find("ServiceAccount", "kube-gateway", "kube-gateway-cache") != nil {
		t.Fatal("cache.enabled false renders the cache identity")
	}
	on := helm.Render(ctx, t, "kube-gateway-member", "kube-gateway", "--set", "cache.enabled=true",
		"--set", "cache.resources={statefulsets.apps,pods,widgets.example.com,configmaps,deployments.apps}")
	on.Get(t, "ServiceAccount", "kube-gateway", "kube-gateway-cache")
	token := Convert[corev1.Secret](t, on.Get(t, "Secret", "kube-gateway", "kube-gateway-cache-token"))
	if token.Type != corev1.SecretTypeServiceAccountToken || token.Annotations[corev1.ServiceAccountNameKey] != "kube-gateway-cache" {
		t.Errorf("cache token Secret: %s for %q", token.Type, token.Annotations[corev1.ServiceAccountNameKey])
	}
	role := Convert[rbacv1.ClusterRole](t, on.Get(t, "ClusterRole", "", "kube-gateway:cache-reader"))
	read := []string{"get", "list", "watch"}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps", "pods"}, Verbs: read},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets"}, Verbs: read},
		{APIGroups: []string{"example.com"}, Resources: []string{"widgets"}, Verbs: read},
	}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("cache role rules %+v, want %+v", role.Rules, want)
	}
	binding := Convert[rbacv1.ClusterRoleBinding](t, on.Get(t, "ClusterRoleBinding", "", "kube-gateway:cache-reader"))
	if s := binding.Subjects; binding.RoleRef.Name != role.Name || len(s) != 1 || s[0].Kind != "ServiceAccount" || s[0].Name != "kube-gateway-cache" || s[0].Namespace != "kube-gateway" {
		t.Errorf("cache binding to %s for %+v", binding.RoleRef.Name, s)
	}

	user := helm.Render(ctx, t, "kube-gateway-member", "kube-gateway", "--set", "cache.enabled=true", "--set", "cache.resources={configmaps}",
		"--set", "identity.type=user", "--set", "cache.user.name=cache.example")
	if user.Find("ServiceAccount", "kube-gateway", "kube-gateway-cache") != nil || user.Find("Secret", "kube-gateway", "kube-gateway-cache-token") != nil {
		t.Error("identity.type user renders a cache ServiceAccount or token")
	}
	binding = Convert[rbacv1.ClusterRoleBinding](t, user.Get(t, "ClusterRoleBinding", "", "kube-gateway:cache-reader"))
	if s := binding.Subjects; len(s) != 1 || s[0].Kind != "User" || s[0].Name != "cache.example" {
		t.Errorf("cache binding with identity.type user: %+v", s)
	}
}
