package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewharf/kube-gateway/apis/client/clientset/versioned"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// joined is what `kube-gateway join` creates for the test's member: its
// objects on both sides, read back.
type joined struct {
	t                    *testing.T
	name, identity, saNS string
	member, hub          kubernetes.Interface
	gateway              versioned.Interface
}

// versions returns the resource version of every object join creates (the
// UpstreamCluster's status changes on its own: its generation and join's
// managed fields stand for it), "" for an object that does not exist.
func (j *joined) versions(ctx context.Context) map[string]string {
	j.t.Helper()
	out := map[string]string{}
	record := func(what string, obj metav1.Object, err error) {
		switch {
		case apierrors.IsNotFound(err):
			out[what] = ""
		case err != nil:
			j.t.Fatalf("%s: %v", what, err)
		default:
			out[what] = obj.GetResourceVersion()
		}
	}
	role := j.identity + ":impersonator"
	sa, err := j.member.CoreV1().ServiceAccounts(j.saNS).Get(ctx, j.identity, metav1.GetOptions{})
	record("member serviceaccount", sa, err)
	cr, err := j.member.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
	record("member clusterrole", cr, err)
	crb, err := j.member.RbacV1().ClusterRoleBindings().Get(ctx, role, metav1.GetOptions{})
	record("member clusterrolebinding", crb, err)
	rb, err := j.member.RbacV1().RoleBindings("kube-system").Get(ctx, j.identity+":authentication-reader", metav1.GetOptions{})
	record("member rolebinding", rb, err)
	s, err := j.hub.CoreV1().Secrets(harness.GatewayNamespace).Get(ctx, j.name, metav1.GetOptions{})
	record("hub secret", s, err)
	uc, err := j.gateway.GatewayV1alpha1().UpstreamClusters().Get(ctx, j.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		out["hub upstreamcluster"] = ""
	case err != nil:
		j.t.Fatal(err)
	default:
		fields := ""
		for _, f := range uc.ManagedFields {
			if f.Manager == "kube-gateway-join" {
				fields = f.Time.String() + " " + string(f.FieldsV1.Raw)
			}
		}
		out["hub upstreamcluster"] = sprintf("generation %d, join's fields %s", uc.Generation, fields)
	}
	return out
}

func (j *joined) wantNone(ctx context.Context, when string) {
	j.t.Helper()
	for what, v := range j.versions(ctx) {
		if v != "" {
			j.t.Errorf("%s: %s exists (%s), want none", when, what, v)
		}
	}
}

// runGatewayCLI runs argv (a binary and its arguments) without an inherited
// KUBECONFIG, with dir first on PATH, and returns stdout; a failure fails the
// test with stderr.
func runGatewayCLI(ctx context.Context, t *testing.T, pathDir string, argv ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, "PATH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PATH="+pathDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(argv, " "), err, stdout.String(), stderr.String())
	}
	t.Logf("%s %s:\n%s", filepath.Base(argv[0]), strings.Join(argv[1:3], " "), stdout.String())
	return stdout.String()
}

// `kube-gateway join` registers member-b under a new name with one command,
// using only an admin kubeconfig of member-b and of the hub: the identity it
// creates on member-b carries hub users there. Run again (here as the kubectl
// plugin), it changes nothing; --dry-run changes nothing; `unjoin` removes all
// of it, and again succeeds.
func TestJoinRegistersAMember(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	bin, ok := harness.GatewayBinary(env.BinDir)
	if !ok {
		t.Fatalf("no kube-gateway binary in %s: run make build", env.BinDir)
	}
	// kubectl finds plugins as kubectl-NAME on PATH.
	pluginDir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(pluginDir, "kubectl-gateway")); err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(env.BinDir, "kubectl")

	gw, err := versioned.NewForConfig(env.HubConfig(harness.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	// Named apart from the identity the harness gave member-b.
	j := &joined{t: t, name: "member-b-joined", identity: "kube-gateway-joined", saNS: "kube-system",
		member: memberB(t), hub: hubAdmin(t), gateway: gw}
	flags := []string{"--kubeconfig", env.Kubeconfig("hub-admin"), "--member-kubeconfig", env.Kubeconfig("member-b-admin"),
		"--identity-name", j.identity, "--timeout", "90s"}
	join := func(extra ...string) string {
		return runGatewayCLI(ctx, t, pluginDir, append(append([]string{bin, "join", j.name}, flags...), extra...)...)
	}
	unjoin := func(extra ...string) string {
		return runGatewayCLI(ctx, t, pluginDir, append(append([]string{bin, "unjoin", j.name}, flags[:len(flags)-2]...), extra...)...)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = exec.CommandContext(ctx, bin, append([]string{"unjoin", j.name}, flags[:len(flags)-2]...)...).Run()
	})

	// --dry-run: every object would be created; none is.
	out := join("--dry-run")
	for _, obj := range []string{
		"member: serviceaccount/kube-system/" + j.identity, "member: clusterrole/" + j.identity + ":impersonator",
		"member: clusterrolebinding/" + j.identity + ":impersonator",
		"member: rolebinding/kube-system/" + j.identity + ":authentication-reader",
		"hub: secret/" + harness.GatewayNamespace + "/" + j.name, "hub: upstreamcluster/" + j.name,
	} {
		if !strings.Contains(out, obj+" created (server dry run)") {
			t.Errorf("join --dry-run does not say it would create %s:\n%s", obj, out)
		}
	}
	j.wantNone(ctx, "after join --dry-run")

	out = join()
	sameAsMemberChart(ctx, t, j.identity, j.saNS, false)
	if !strings.Contains(out, "upstreamcluster "+j.name+" is Ready") || !strings.Contains(out, "kube-gateway kubeconfig --cluster "+j.name) {
		t.Fatalf("join does not say how to use the cluster:\n%s", out)
	}

	// alice reaches member-b through the hub; member-b authenticates the
	// joined ServiceAccount, impersonating alice.
	alice, err := kubernetes.NewForConfig(env.ProxyConfig(harness.UserAlice, j.name))
	if err != nil {
		t.Fatal(err)
	}
	review, err := alice.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if review.Status.UserInfo.Username != harness.UserAlice {
		t.Fatalf("member-b sees %q through %s, want alice", review.Status.UserInfo.Username, j.name)
	}
	identity := "system:serviceaccount:kube-system:" + j.identity
	eventually(t, 30*time.Second, func(context.Context) error {
		if n := countAudit(t, env.Members[harness.MemberB].Servers[0], func(ev *auditEvent) bool {
			return ev.User.Username == identity && ev.ImpersonatedUser != nil && ev.ImpersonatedUser.Username == harness.UserAlice &&
				ev.ObjectRef != nil && ev.ObjectRef.Resource == "selfsubjectreviews"
		}); n == 0 {
			return errorf("member-b's audit log has no selfsubjectreview by %s impersonating alice", identity)
		}
		return nil
	})

	// Once the servers' health is known, nothing but join writes the objects.
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		uc, err := gw.GatewayV1alpha1().UpstreamClusters().Get(ctx, j.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, s := range uc.Status.Servers {
			if s.Healthy == nil || !*s.Healthy {
				return errorf("server %s: healthy %v", s.Endpoint, s.Healthy)
			}
		}
		if len(uc.Status.Servers) == 0 {
			return errorf("no server status yet")
		}
		return nil
	})
	before := j.versions(ctx)

	// Again, as `kubectl gateway join`: nothing changes, the token is kept.
	out = runGatewayCLI(ctx, t, pluginDir, append([]string{kubectl, "gateway", "join", j.name}, flags...)...)
	if strings.Contains(out, "created") || strings.Contains(out, "configured") || strings.Contains(out, "token of serviceaccount") {
		t.Errorf("join run again changes something:\n%s", out)
	}
	if after := j.versions(ctx); !maps.Equal(before, after) {
		t.Errorf("join run again changed objects:\nbefore %v\nafter  %v", before, after)
	}
	// A changed flag changes what it decides; as a dry run, nothing else.
	out = join("--dry-run", "--server", env.Members[harness.MemberB].Servers[0].URL, "--server", "https://127.0.0.1:1")
	if !strings.Contains(out, "hub: upstreamcluster/"+j.name+" configured (server dry run)") || strings.Count(out, "unchanged (server dry run)") != 5 {
		t.Errorf("join --dry-run with a second server:\n%s", out)
	}
	if after := j.versions(ctx); !maps.Equal(before, after) {
		t.Errorf("join --dry-run changed objects:\nbefore %v\nafter  %v", before, after)
	}
	// The plugin is the client commands only, and says so.
	if out := runGatewayCLI(ctx, t, pluginDir, kubectl, "gateway", "--help"); !strings.Contains(out, "kubectl gateway [command]") || strings.Contains(out, "--secure-port") {
		t.Errorf("kubectl gateway --help:\n%s", out)
	}
	// kubectl gateway clusters shows it, Ready.
	out = runGatewayCLI(ctx, t, pluginDir, kubectl, "gateway", "clusters", "--kubeconfig", env.Kubeconfig("hub-admin"))
	if !strings.HasPrefix(out, "NAME ") || !hasRow(out, j.name, "True") || !hasRow(out, harness.MemberA) {
		t.Errorf("kubectl gateway clusters:\n%s", out)
	}

	// --renew-token: a new token in the hub Secret, which the gateway uses.
	out = join("--renew-token")
	if !strings.Contains(out, "hub: secret/"+harness.GatewayNamespace+"/"+j.name+" configured") {
		t.Errorf("join --renew-token does not renew the token:\n%s", out)
	}
	waitUsable(t, j.name)

	// unjoin --dry-run deletes nothing; unjoin deletes all; again, nothing to do.
	before = j.versions(ctx)
	out = unjoin("--dry-run")
	if !strings.Contains(out, "hub: upstreamcluster/"+j.name+" deleted (server dry run)") || !strings.Contains(out, "member: clusterrole/"+j.identity+":impersonator deleted (server dry run)") {
		t.Errorf("unjoin --dry-run:\n%s", out)
	}
	if after := j.versions(ctx); !maps.Equal(before, after) {
		t.Errorf("unjoin --dry-run changed objects:\nbefore %v\nafter  %v", before, after)
	}
	unjoin()
	j.wantNone(ctx, "after unjoin")
	if out := unjoin(); strings.Contains(out, "deleted") {
		t.Errorf("unjoin run again deletes something:\n%s", out)
	}
}

// hasRow says whether a line of a printed table starts with name and has
// every one of cells.
func hasRow(table, name string, cells ...string) bool {
	for _, line := range strings.Split(table, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != name {
			continue
		}
		ok := true
		for _, c := range cells {
			ok = ok && strings.Contains(" "+strings.Join(fields[1:], " ")+" ", " "+c+" ")
		}
		if ok {
			return true
		}
	}
	return false
}

// With --long-lived-token, join waits for member-b's token controller
// (kube-controller-manager) to fill the token Secret it creates and registers
// that token, and likewise the cache identity's (--cache-resources); join
// without the flags then replaces it with a bound token and deletes the
// Secrets and the cache identity.
func TestJoinLongLivedToken(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	bin, ok := harness.GatewayBinary(env.BinDir)
	if !ok {
		t.Fatalf("no kube-gateway binary in %s: run make build", env.BinDir)
	}
	const name, identity, ns = "member-b-long-lived", "kube-gateway-long-lived", "kube-system"
	flags := []string{"--kubeconfig", env.Kubeconfig("hub-admin"), "--member-kubeconfig", env.Kubeconfig("member-b-admin"), "--identity-name", identity}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = exec.CommandContext(ctx, bin, append([]string{"unjoin", name}, flags...)...).Run()
	})
	member := memberB(t)

	out := runGatewayCLI(ctx, t, t.TempDir(), append([]string{bin, "join", name, "--long-lived-token", "--cache-resources=configmaps", "--timeout", "90s"}, flags...)...)
	for _, s := range []string{identity + "-token", identity + "-cache-token"} {
		if !strings.Contains(out, "member: secret/"+ns+"/"+s+" created") {
			t.Errorf("join --long-lived-token does not create the token Secret %s:\n%s", s, out)
		}
	}
	tokenSecret, err := member.CoreV1().Secrets(ns).Get(ctx, identity+"-token", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tokenSecret.Data[corev1.ServiceAccountTokenKey]
	if len(token) == 0 {
		t.Fatal("join --long-lived-token returned before the token Secret had a token")
	}
	sameAsMemberChart(ctx, t, identity, ns, true, "configmaps")
	hubSecret, err := hubAdmin(t).CoreV1().Secrets(harness.GatewayNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(hubSecret.Data["token"], token) {
		t.Fatalf("the hub Secret's token is not the long-lived token of the member Secret")
	}
	cacheToken, err := member.CoreV1().Secrets(ns).Get(ctx, identity+"-cache-token", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hubCacheSecret, err := hubAdmin(t).CoreV1().Secrets(harness.GatewayNamespace).Get(ctx, name+"-cache", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if t1, t2 := hubCacheSecret.Data["token"], cacheToken.Data[corev1.ServiceAccountTokenKey]; len(t1) == 0 || !bytes.Equal(t1, t2) {
		t.Fatalf("the hub cache Secret's token is not the long-lived token of the member's cache token Secret")
	}
	waitUsable(t, name)
	// Again: nothing changes.
	out = runGatewayCLI(ctx, t, t.TempDir(), append([]string{bin, "join", name, "--long-lived-token", "--cache-resources=configmaps"}, flags...)...)
	if strings.Contains(out, "created") || strings.Contains(out, "configured") || strings.Contains(out, "deleted") {
		t.Errorf("join --long-lived-token run again changes something:\n%s", out)
	}

	// Without the flags: a bound token, and the long-lived one goes, the
	// cache identity's with it.
	out = runGatewayCLI(ctx, t, t.TempDir(), append([]string{bin, "join", name}, flags...)...)
	for _, want := range []string{
		"member: secret/" + ns + "/" + identity + "-token deleted",
		"member: secret/" + ns + "/" + identity + "-cache-token deleted",
		"member: serviceaccount/" + ns + "/" + identity + "-cache deleted",
		"member: token of serviceaccount " + ns + "/" + identity + " requested",
		"hub: secret/" + harness.GatewayNamespace + "/" + name + " configured",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("join without --long-lived-token: no %q in\n%s", want, out)
		}
	}
	if _, err := member.CoreV1().Secrets(ns).Get(ctx, identity+"-token", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the long-lived token Secret after join without --long-lived-token: %v, want NotFound", err)
	}
	waitUsable(t, name)
	runGatewayCLI(ctx, t, t.TempDir(), append([]string{bin, "unjoin", name}, flags...)...)
}

// join refuses, in one line that names what to fix, a member kubeconfig
// whose user may not create the identity, one without the member's CA, and
// to take over an identity of the same name that it did not create; unjoin
// then removes only what join wrote.
func TestJoinErrorsNameWhatToFix(t *testing.T) {
	ctx := testContext(t, time.Minute)
	bin, ok := harness.GatewayBinary(env.BinDir)
	if !ok {
		t.Fatalf("no kube-gateway binary in %s: run make build", env.BinDir)
	}
	b := env.Members[harness.MemberB]
	// The harness's gateway user on member-b may impersonate, nothing more.
	mayNotCreate := writeTestKubeconfig(t, b.Servers[0].URL, b.CAData, b.Tokens[harness.UserGateway])
	noCA := writeTestKubeconfig(t, b.Servers[0].URL, nil, b.Tokens[harness.UserAdmin])
	for _, c := range []struct {
		kubeconfig, want string
		flags            []string
	}{
		{mayNotCreate, "the member refused", []string{"--identity-name", "kube-gateway-refused"}},
		{noCA, "the member kubeconfig has no CA", []string{"--identity-name", "kube-gateway-refused"}},
		// The harness's own identity on member-b binds its impersonator
		// ClusterRole to a user: join does not take it over unasked.
		{env.Kubeconfig("member-b-admin"), "the member has it already, with other values", []string{"--identity-name", "kube-gateway"}},
	} {
		cmd := exec.CommandContext(ctx, bin, append([]string{"join", "member-b-refused", "--kubeconfig", env.Kubeconfig("hub-admin"),
			"--member-kubeconfig", c.kubeconfig}, c.flags...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 1 {
			t.Fatalf("join with %s: %v, want exit code 1", c.want, err)
		}
		msg := strings.TrimSpace(stderr.String())
		t.Logf("%s", msg)
		if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "Error: ") || !strings.Contains(msg, c.want) {
			t.Errorf("join: stderr %q, want one line \"Error: ...%s...\"", msg, c.want)
		}
	}
	// The conflicting join stopped at the binding, having created the
	// ServiceAccount: unjoin removes that, and keeps the harness's role and
	// binding, which join did not write.
	out := runGatewayCLI(ctx, t, t.TempDir(), bin, "unjoin", "member-b-refused", "--kubeconfig", env.Kubeconfig("hub-admin"),
		"--member-kubeconfig", env.Kubeconfig("member-b-admin"), "--identity-name", "kube-gateway")
	if !strings.Contains(out, "member: serviceaccount/kube-system/kube-gateway deleted") || !strings.Contains(out, "member: clusterrolebinding/kube-gateway:impersonator kept") {
		t.Errorf("unjoin after a conflicting join:\n%s", out)
	}
	crb, err := memberB(t).RbacV1().ClusterRoleBindings().Get(ctx, "kube-gateway:impersonator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(crb.Subjects) != 1 || crb.Subjects[0].Kind != "User" || crb.Subjects[0].Name != harness.UserGateway {
		t.Errorf("the harness's impersonator binding on member-b now binds %+v", crb.Subjects)
	}
	if _, err := memberB(t).RbacV1().ClusterRoles().Get(ctx, "kube-gateway:impersonator", metav1.GetOptions{}); err != nil {
		t.Errorf("the harness's impersonator role on member-b: %v", err)
	}
	waitUsable(t, harness.MemberB)
	if _, err := memberB(t).CoreV1().ServiceAccounts("kube-system").Get(ctx, "kube-gateway-refused", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused join's ServiceAccount: %v, want NotFound", err)
	}
	if _, err := hubAdmin(t).CoreV1().Secrets(harness.GatewayNamespace).Get(ctx, "member-b-refused", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused join's hub Secret: %v, want NotFound", err)
	}
}

// sameAsMemberChart checks that join created on member-b what the member
// chart renders for the same name and namespace (but the token Secrets unless
// withToken), and for the cache resources if any (join's --cache-resources,
// the chart's cache.resources): same objects, names, rules, subjects; labels
// and what the apiserver adds aside. join and the chart can then replace each
// other.
func sameAsMemberChart(ctx context.Context, t *testing.T, identity, ns string, withToken bool, cache ...string) {
	t.Helper()
	args := []string{"--set", "name=" + identity}
	if len(cache) > 0 {
		args = append(args, "--set", "cache.enabled=true", "--set", "cache.resources={"+strings.Join(cache, ",")+"}")
	}
	rendered := helm().Render(ctx, t, "kube-gateway-member", ns, args...)
	cs := memberB(t)
	for _, want := range rendered.Objs {
		var live runtime.Object
		var err error
		name := want.GetName()
		switch want.GetKind() {
		case "ServiceAccount":
			live, err = cs.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{})
		case "Secret":
			if !withToken {
				continue
			}
			live, err = cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		case "ClusterRole":
			live, err = cs.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
		case "ClusterRoleBinding":
			live, err = cs.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{})
		case "RoleBinding":
			live, err = cs.RbacV1().RoleBindings(want.GetNamespace()).Get(ctx, name, metav1.GetOptions{})
		default:
			t.Errorf("the member chart renders a %s %s that join does not create", want.GetKind(), name)
			continue
		}
		if err != nil {
			t.Errorf("the member chart renders %s %s; join created: %v", want.GetKind(), name, err)
			continue
		}
		got, err := runtime.DefaultUnstructuredConverter.ToUnstructured(live)
		if err != nil {
			t.Fatal(err)
		}
		a, b := chartComparable(want.Object, want.GetAnnotations()), chartComparable(got, want.GetAnnotations())
		if !reflect.DeepEqual(a, b) {
			aj, _ := json.MarshalIndent(a, "", "  ")
			bj, _ := json.MarshalIndent(b, "", "  ")
			t.Errorf("%s %s: the member chart renders\n%s\njoin created\n%s", want.GetKind(), name, aj, bj)
		}
	}
}

// chartComparable keeps of an object what the chart decides: name,
// namespace, the annotations the chart sets, and every field but metadata
// and the data the token controller fills.
func chartComparable(obj map[string]any, annotations map[string]string) map[string]any {
	u := (&unstructured.Unstructured{Object: obj}).DeepCopy()
	out := map[string]any{"name": u.GetName(), "namespace": u.GetNamespace()}
	kept := map[string]any{}
	for k := range annotations {
		kept[k] = u.GetAnnotations()[k]
	}
	out["annotations"] = kept
	for k, v := range u.Object {
		switch k {
		case "metadata", "kind", "apiVersion", "data":
		default:
			out[k] = v
		}
	}
	return out
}
