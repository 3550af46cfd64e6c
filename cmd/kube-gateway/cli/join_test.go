package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/kubewharf/kube-gateway/apis/client/clientset/versioned"
	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// typed decodes an apply configuration into the object it applies.
func typed[T any](t *testing.T, ac any) *T {
	t.Helper()
	b, err := json.Marshal(ac)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func TestMemberAccess(t *testing.T) {
	withCA := &rest.Config{Host: "https://member.example:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("CA"), ServerName: "member.internal"}}
	for _, c := range []struct {
		name    string
		cfg     *rest.Config
		servers []string
		want    *memberAccess
		wantErr string
	}{{
		name: "the kubeconfig's server", cfg: withCA,
		want: &memberAccess{servers: []string{"https://member.example:6443"}, caPEM: []byte("CA"), serverName: "member.internal"},
	}, {
		name: "servers given", cfg: withCA, servers: []string{"https://10.0.0.1:6443", "https://10.0.0.2"},
		want: &memberAccess{servers: []string{"https://10.0.0.1:6443", "https://10.0.0.2"}, caPEM: []byte("CA"), serverName: "member.internal"},
	}, {
		name: "no CA", cfg: &rest.Config{Host: "https://member.example", TLSClientConfig: rest.TLSClientConfig{Insecure: true}},
		wantErr: "the member kubeconfig has no CA",
	}, {
		name: "a path", cfg: withCA, servers: []string{"https://rancher.example/k8s/clusters/c-1"},
		wantErr: `"https://rancher.example/k8s/clusters/c-1": want https://HOST[:PORT], without path`,
	}, {
		name: "http", cfg: withCA, servers: []string{"http://10.0.0.1:6443"},
		wantErr: "want https://HOST[:PORT]",
	}, {
		name: "twice", cfg: withCA, servers: []string{"https://10.0.0.1", "https://10.0.0.1"},
		wantErr: "given twice",
	}} {
		t.Run(c.name, func(t *testing.T) {
			got, err := memberAccessFrom(c.cfg, c.servers)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestHubObjects(t *testing.T) {
	access := &memberAccess{servers: []string{"https://10.0.0.1:6443", "https://10.0.0.2:6443/"}, caPEM: []byte("CA"), serverName: "member.internal"}
	uc := typed[gatewayv1alpha1.UpstreamCluster](t, upstreamCluster("member-a", "gw", access, "", nil, ""))
	want := gatewayv1alpha1.UpstreamClusterSpec{
		Servers: []gatewayv1alpha1.UpstreamServer{{Endpoint: "https://10.0.0.1:6443"}, {Endpoint: "https://10.0.0.2:6443"}},
		ClientConfig: gatewayv1alpha1.ClientConfig{
			SecretRef:  gatewayv1alpha1.SecretReference{Namespace: "gw", Name: "member-a"},
			ServerName: "member.internal",
		},
	}
	if uc.Name != "member-a" || !reflect.DeepEqual(uc.Spec, want) {
		t.Fatalf("upstreamcluster %s %+v, want member-a %+v", uc.Name, uc.Spec, want)
	}
	s := typed[corev1.Secret](t, hubSecret("member-a", "gw", []byte("TOKEN"), []byte("CA"), nil))
	if s.Namespace != "gw" || s.Name != "member-a" || string(s.Data["token"]) != "TOKEN" || string(s.Data["ca.crt"]) != "CA" || len(s.Data) != 2 {
		t.Fatalf("secret %s/%s %v", s.Namespace, s.Name, s.Data)
	}

	// Through an egress proxy: its URL in the spec, its credential and CA in
	// the Secret, read from files (a trailing newline is not the password's).
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	proxy := egressProxy{url: "https://proxy.internal:3128", username: "gw", passwordFile: write("password", "s3cret\n"), caFile: write("ca.pem", "PROXY CA")}
	data, err := proxy.secretData()
	if err != nil {
		t.Fatal(err)
	}
	uc = typed[gatewayv1alpha1.UpstreamCluster](t, upstreamCluster("member-a", "gw", access, proxy.url, nil, ""))
	if uc.Spec.ClientConfig.ProxyURL != proxy.url {
		t.Fatalf("proxyURL %q, want %q", uc.Spec.ClientConfig.ProxyURL, proxy.url)
	}
	s = typed[corev1.Secret](t, hubSecret("member-a", "gw", []byte("TOKEN"), []byte("CA"), data))
	wantData := map[string]string{"token": "TOKEN", "ca.crt": "CA", "proxy-username": "gw", "proxy-password": "s3cret", "proxy-ca.crt": "PROXY CA"}
	got := map[string]string{}
	for k, v := range s.Data {
		got[k] = string(v)
	}
	if !reflect.DeepEqual(got, wantData) {
		t.Fatalf("secret data %v, want %v", got, wantData)
	}
	// Through a konnectivity server: named in the spec, with its Secret.
	k, err := tunnel{addresses: []string{"konnectivity.gw.svc:8090"}, secret: "konnectivity-client", serverName: "konnectivity"}.config("gw")
	if err != nil {
		t.Fatal(err)
	}
	uc = typed[gatewayv1alpha1.UpstreamCluster](t, upstreamCluster("member-a", "gw", access, "", k, ""))
	wantTunnel := &gatewayv1alpha1.KonnectivityConfig{Address: "konnectivity.gw.svc:8090",
		SecretRef: gatewayv1alpha1.SecretReference{Namespace: "gw", Name: "konnectivity-client"}, ServerName: "konnectivity"}
	if !reflect.DeepEqual(uc.Spec.ClientConfig.Konnectivity, wantTunnel) {
		t.Fatalf("konnectivity %+v, want %+v", uc.Spec.ClientConfig.Konnectivity, wantTunnel)
	}
	// Through several: each named.
	k, err = tunnel{addresses: []string{"k-0.k.gw.svc:8090", "k-1.k.gw.svc:8090"}, secret: "konnectivity-client"}.config("gw")
	if err != nil {
		t.Fatal(err)
	}
	uc = typed[gatewayv1alpha1.UpstreamCluster](t, upstreamCluster("member-a", "gw", access, "", k, ""))
	wantTunnel = &gatewayv1alpha1.KonnectivityConfig{Addresses: []string{"k-0.k.gw.svc:8090", "k-1.k.gw.svc:8090"},
		SecretRef: gatewayv1alpha1.SecretReference{Namespace: "gw", Name: "konnectivity-client"}}
	if !reflect.DeepEqual(uc.Spec.ClientConfig.Konnectivity, wantTunnel) {
		t.Fatalf("konnectivity %+v, want %+v", uc.Spec.ClientConfig.Konnectivity, wantTunnel)
	}
	if k, err := (tunnel{}).config("gw"); k != nil || err != nil {
		t.Fatalf("no flags: %+v, %v, want no konnectivity", k, err)
	}
	for _, bad := range []tunnel{{addresses: []string{"k:8090"}}, {secret: "s"}, {serverName: "k"}} {
		if _, err := bad.config("gw"); err == nil {
			t.Errorf("%+v: accepted, want an error", bad)
		}
	}
	for _, bad := range []egressProxy{
		{username: "gw", passwordFile: proxy.passwordFile}, // no URL
		{url: proxy.url, username: "gw"},                   // no password
		{url: proxy.url, passwordFile: proxy.passwordFile}, // no user
		{url: proxy.url, caFile: filepath.Join(dir, "missing")},
	} {
		if _, err := bad.secretData(); err == nil {
			t.Errorf("%+v: accepted, want an error", bad)
		}
	}
}

func TestKeepToken(t *testing.T) {
	jwt := func(claims string) []byte {
		enc := base64.RawURLEncoding.EncodeToString
		return []byte(enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(claims)) + ".sig")
	}
	issued := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	expires := issued.Add(24 * time.Hour) // shorter than asked for: the member capped it
	bound := jwt(fmt.Sprintf(`{"sub":"system:serviceaccount:kube-system:kube-gateway","iat":%d,"exp":%d}`, issued.Unix(), expires.Unix()))
	for _, c := range []struct {
		name  string
		token []byte
		now   time.Time
		keep  bool
	}{
		{"fresh", bound, issued.Add(time.Hour), true},
		{"just under half used", bound, issued.Add(11 * time.Hour), true},
		{"half used", bound, issued.Add(12 * time.Hour), false},
		{"expired", bound, expires.Add(time.Hour), false},
		{"long-lived (no exp)", jwt(`{"sub":"system:serviceaccount:kube-system:kube-gateway"}`), issued, false},
		{"not a JWT", []byte("abcdef"), issued, false},
		{"bad payload", []byte("a.!!!.c"), issued, false},
	} {
		exp, keep := keepToken(c.token, c.now)
		if keep != c.keep || (keep && !exp.Equal(expires)) {
			t.Errorf("%s: keep %v (expires %v), want %v", c.name, keep, exp, c.keep)
		}
	}
}

func TestIsPlugin(t *testing.T) {
	for argv0, want := range map[string]bool{
		"kubectl-gateway":                true,
		"/usr/local/bin/kubectl-gateway": true,
		"kubectl-gateway.exe":            true,
		"kube-gateway":                   false,
		"/usr/local/bin/kube-gateway":    false,
		"kubectl":                        false,
		"kubectl-gateway-dev":            false,
	} {
		if got := IsPlugin(argv0); got != want {
			t.Errorf("IsPlugin(%q) = %v, want %v", argv0, got, want)
		}
	}
}

// Without a token controller on the member, join --long-lived-token gives up
// after --timeout and says what to do.
func TestLongLivedTokenNeverFilled(t *testing.T) {
	o := &joinOptions{clusterOptions: newClusterOptions(), longLivedToken: true}
	o.identity = memberIdentity{name: "kube-gateway", namespace: "kube-system"}
	o.timeout = time.Second
	member := fake.NewClientset()
	var out bytes.Buffer
	_, _, err := o.token(context.Background(), &clients{member: member}, &reporter{out: &out}, o.identity, nil,
		metav1.ApplyOptions{FieldManager: joinFieldManager, Force: true})
	if err == nil || !strings.Contains(err.Error(), "member Secret kube-system/kube-gateway-token still has no token after 1s") ||
		!strings.Contains(err.Error(), "leave out --long-lived-token") {
		t.Fatalf("error %v, want one that says the token Secret was not filled and what to do", err)
	}
	if _, err := member.CoreV1().Secrets("kube-system").Get(context.Background(), "kube-gateway-token", metav1.GetOptions{}); err != nil {
		t.Fatalf("the token Secret: %v", err)
	}
}

// fakeHub answers as a hub would: discovery of the gateway's API as api
// says ("": not served, "unavailable": 503), namespace kube-gateway if
// hasNamespace, and access reviews with allowed. Every other request is a 404.
func fakeHub(t *testing.T, api string, hasNamespace, allowed bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		reply := func(obj any) { _ = json.NewEncoder(w).Encode(obj) }
		switch {
		case r.URL.Path == "/apis/gateway.kubewharf.io/v1alpha1" && api == "unavailable":
			w.WriteHeader(http.StatusServiceUnavailable)
			reply(metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure,
				Reason: metav1.StatusReasonServiceUnavailable, Code: http.StatusServiceUnavailable, Message: "service unavailable"})
		case r.URL.Path == "/apis/gateway.kubewharf.io/v1alpha1" && api == "served":
			reply(metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "gateway.kubewharf.io/v1alpha1",
				APIResources: []metav1.APIResource{{Name: "upstreamclusters", Kind: "UpstreamCluster", Verbs: metav1.Verbs{"get", "patch"}}}})
		case r.URL.Path == "/api/v1/namespaces/kube-gateway" && hasNamespace:
			reply(corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "kube-gateway"}})
		case r.URL.Path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
			var review authorizationv1.SelfSubjectAccessReview
			_ = json.NewDecoder(r.Body).Decode(&review)
			review.TypeMeta = metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectAccessReview"}
			review.Status.Allowed = allowed
			w.WriteHeader(http.StatusCreated)
			reply(review)
		default:
			// What a kube-apiserver answers for a path nothing serves.
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte("404 page not found\n"))
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// join checks the hub before it writes anything to the member: against a
// hub without the gateway's API (or with it down, without the Secret's
// namespace, or refusing the user), it says what to fix and leaves the
// member as it was, dry run or not.
func TestJoinChecksTheHubFirst(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, c := range []struct {
		name string
		hub  string
		want string
	}{
		{"no gateway API", fakeHub(t, "", true, true).URL, "does not serve the gateway's API gateway.kubewharf.io/v1alpha1: install the gateway there first"},
		{"gateway down", fakeHub(t, "unavailable", true, true).URL, "has the gateway's API gateway.kubewharf.io/v1alpha1 registered, but the gateway does not answer"},
		{"no namespace", fakeHub(t, "served", false, true).URL, "has no namespace kube-gateway, where join puts the gateway's credential Secret: pass the namespace"},
		{"not allowed", fakeHub(t, "served", true, false).URL, "does not let the user of --kubeconfig get secrets in namespace kube-gateway, patch secrets in namespace kube-gateway, get upstreamclusters, patch upstreamclusters"},
		{"unreachable", closed.URL, "cannot ask the hub " + closed.URL + " whether it serves the gateway's API"},
	} {
		for _, dryRun := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, dry run %v", c.name, dryRun), func(t *testing.T) {
				hubConfig := &rest.Config{Host: c.hub, Timeout: 10 * time.Second}
				hub, err := kubernetes.NewForConfig(hubConfig)
				if err != nil {
					t.Fatal(err)
				}
				gw, err := versioned.NewForConfig(hubConfig)
				if err != nil {
					t.Fatal(err)
				}
				member := fake.NewClientset()
				cs := &clients{hubConfig: hubConfig, hub: hub, gateway: gw, member: member,
					memberConfig: &rest.Config{Host: "https://member.example:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("CA")}}}
				o := &joinOptions{clusterOptions: newClusterOptions(), tokenExpiration: time.Hour}
				o.name, o.secretNamespace, o.dryRun = "member-a", "kube-gateway", dryRun
				o.identity = memberIdentity{name: "kube-gateway", namespace: "kube-system"}
				var out bytes.Buffer
				err = o.join(context.Background(), cs, &out)
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("error %v, want one containing %q", err, c.want)
				}
				if a := member.Actions(); len(a) > 0 {
					t.Errorf("join sent %d requests to the member before it found the hub unusable, want none; the first: %s %s", len(a), a[0].GetVerb(), a[0].GetResource().Resource)
				}
				if out.Len() > 0 {
					t.Errorf("join printed %q, want nothing", out.String())
				}
			})
		}
	}

	// A hub that passes the checks: join goes on to the member (and here
	// stops at the token, which the fake member does not issue).
	hubConfig := &rest.Config{Host: fakeHub(t, "served", true, true).URL}
	hub, gw := kubernetes.NewForConfigOrDie(hubConfig), versioned.NewForConfigOrDie(hubConfig)
	member := fake.NewClientset()
	cs := &clients{hubConfig: hubConfig, hub: hub, gateway: gw, member: member,
		memberConfig: &rest.Config{Host: "https://member.example:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("CA")}}}
	o := &joinOptions{clusterOptions: newClusterOptions(), tokenExpiration: time.Hour}
	o.name, o.secretNamespace = "member-a", "kube-gateway"
	o.identity = memberIdentity{name: "kube-gateway", namespace: "kube-system"}
	var out bytes.Buffer
	if err := o.join(context.Background(), cs, &out); err == nil || !strings.Contains(err.Error(), "requesting a token") {
		t.Fatalf("error %v, want the fake member's for the token", err)
	}
	if !strings.Contains(out.String(), "member: serviceaccount/kube-system/kube-gateway created") {
		t.Errorf("join past the hub's checks printed %q, want the member's objects created", out.String())
	}
}

// The commands join prints work from where the user ran it: through kubectl
// as the plugin, by the path typed, or by name only when PATH finds it.
func TestSelfCommand(t *testing.T) {
	onPath := func(name string) (string, error) {
		if name == "kube-gateway" {
			return "/usr/local/bin/kube-gateway", nil
		}
		return "", errors.New("not found")
	}
	notOnPath := func(string) (string, error) { return "", errors.New("not found") }
	exe := func() (string, error) { return "/home/me/src/kube-gateway/_output/bin/kube-gateway", nil }
	for _, c := range []struct {
		argv0    string
		lookPath func(string) (string, error)
		want     string
	}{
		{"_output/bin/kube-gateway", notOnPath, "_output/bin/kube-gateway"},
		{"./kube-gateway", notOnPath, "./kube-gateway"},
		{"/opt/kube gateway/kube-gateway", notOnPath, "'/opt/kube gateway/kube-gateway'"},
		{"kube-gateway", onPath, "kube-gateway"},
		{"kube-gateway", notOnPath, "/home/me/src/kube-gateway/_output/bin/kube-gateway"},
		{"", notOnPath, "/home/me/src/kube-gateway/_output/bin/kube-gateway"},
		{"/home/me/.local/bin/kubectl-gateway", notOnPath, "kubectl gateway"},
		{"kubectl-gateway", notOnPath, "kubectl gateway"},
	} {
		if got := selfCommand(c.argv0, c.lookPath, exe); got != c.want {
			t.Errorf("selfCommand(%q) = %q, want %q", c.argv0, got, c.want)
		}
	}
}

// join's closing hint runs the binary as the user ran it, with the hub
// kubeconfig and context join was given.
func TestJoinReadyHint(t *testing.T) {
	o := &joinOptions{clusterOptions: newClusterOptions(), self: "_output/bin/kube-gateway"}
	o.name = "member-c"
	var out bytes.Buffer
	o.printReady(&out, time.Time{}, nil)
	want := `
upstreamcluster member-c is Ready.
Reach it through the hub at /apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-c/proxy/..., for example:
  _output/bin/kube-gateway kubeconfig --cluster member-c > member-c.kubeconfig
  kubectl --kubeconfig member-c.kubeconfig get namespaces
Hub users need a role with verbs on upstreamclusters/proxy (resource name "member-c") to use it.
`
	if out.String() != want {
		t.Errorf("hint:\n%s\nwant:\n%s", out.String(), want)
	}

	o.self = "kubectl gateway"
	o.hubRules.ExplicitPath = "_output/local-up/hub admin.kubeconfig"
	o.hubOverrides.CurrentContext = "hub"
	out.Reset()
	o.printReady(&out, time.Date(2027, 11, 27, 12, 0, 0, 0, time.UTC), nil)
	for _, w := range []string{
		"expires at 2027-11-27T12:00:00Z: run this join again, with the same flags,",
		"\n  kubectl gateway kubeconfig --cluster member-c --kubeconfig '_output/local-up/hub admin.kubeconfig' --context hub > member-c.kubeconfig\n",
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("hint:\n%s\nwant it to contain %q", out.String(), w)
		}
	}
}

func TestPluginExamples(t *testing.T) {
	cmd := NewPluginCommand(context.Background())
	for _, sub := range cmd.Commands() {
		if sub.Example == "" {
			continue
		}
		if strings.Contains(sub.Example, "  kube-gateway ") || !strings.HasPrefix(sub.Example, "  kubectl gateway "+sub.Name()) {
			t.Errorf("kubectl gateway %s --help: examples\n%s\nwant them run as kubectl gateway", sub.Name(), sub.Example)
		}
	}
	if got := pluginExample("  kube-gateway join a \\\n    --server https://kube-gateway.kube-gateway.svc\n  kube-gateway unjoin a"); got != "  kubectl gateway join a \\\n    --server https://kube-gateway.kube-gateway.svc\n  kubectl gateway unjoin a" {
		t.Errorf("pluginExample: %q", got)
	}
}
