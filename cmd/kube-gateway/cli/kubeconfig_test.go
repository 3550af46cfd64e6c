package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

const proxyA = "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-a/proxy"

// hubKubeconfig has two contexts: "hub" (current; CA data, server name, token)
// and "other" (a path prefix, insecure, client certificate files, exec plugin).
func hubKubeconfig() clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["hub-cluster"] = &clientcmdapi.Cluster{
		Server:                   "https://hub.example:6443",
		CertificateAuthorityData: []byte("CA PEM"),
		TLSServerName:            "hub.internal",
		ProxyURL:                 "http://proxy.example:3128",
	}
	cfg.Clusters["other-cluster"] = &clientcmdapi.Cluster{
		Server:                "https://rancher.example/k8s/clusters/c-1/",
		InsecureSkipTLSVerify: true,
	}
	cfg.AuthInfos["hub-user"] = &clientcmdapi.AuthInfo{Token: "hub-token"}
	cfg.AuthInfos["other-user"] = &clientcmdapi.AuthInfo{
		ClientCertificate: "/certs/user.crt",
		ClientKey:         "/certs/user.key",
		Exec:              &clientcmdapi.ExecConfig{Command: "get-token", APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode},
	}
	cfg.Contexts["hub"] = &clientcmdapi.Context{Cluster: "hub-cluster", AuthInfo: "hub-user", Namespace: "hub-ns"}
	cfg.Contexts["other"] = &clientcmdapi.Context{Cluster: "other-cluster", AuthInfo: "other-user"}
	cfg.CurrentContext = "hub"
	return *cfg
}

func TestMemberKubeconfig(t *testing.T) {
	hub := hubKubeconfig()
	got, err := memberKubeconfig(hub, "", "member-a", "")
	if err != nil {
		t.Fatal(err)
	}
	want := clientcmdapi.NewConfig()
	want.Clusters["member-a"] = &clientcmdapi.Cluster{
		Server:                   "https://hub.example:6443" + proxyA,
		CertificateAuthorityData: []byte("CA PEM"),
		TLSServerName:            "hub.internal",
		ProxyURL:                 "http://proxy.example:3128",
	}
	want.AuthInfos["member-a"] = &clientcmdapi.AuthInfo{Token: "hub-token"}
	want.Contexts["member-a"] = &clientcmdapi.Context{Cluster: "member-a", AuthInfo: "member-a"}
	want.CurrentContext = "member-a"
	normalize(got)
	normalize(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%s\nwant\n%s", dump(t, got), dump(t, want))
	}
	// The hub config is left as it was.
	if !reflect.DeepEqual(hub, hubKubeconfig()) {
		t.Fatal("the hub kubeconfig was modified")
	}
}

func TestMemberKubeconfigOtherContext(t *testing.T) {
	got, err := memberKubeconfig(hubKubeconfig(), "other", "member-b", "b-through-hub")
	if err != nil {
		t.Fatal(err)
	}
	if got.CurrentContext != "b-through-hub" || len(got.Contexts) != 1 || len(got.Clusters) != 1 || len(got.AuthInfos) != 1 {
		t.Fatalf("want exactly one context b-through-hub, got %s", dump(t, got))
	}
	ctx := got.Contexts["b-through-hub"]
	if ctx == nil || ctx.Cluster != "b-through-hub" || ctx.AuthInfo != "b-through-hub" || ctx.Namespace != "" {
		t.Fatalf("context %+v", ctx)
	}
	c := got.Clusters["b-through-hub"]
	if c.Server != "https://rancher.example/k8s/clusters/c-1/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-b/proxy" || !c.InsecureSkipTLSVerify {
		t.Fatalf("cluster %+v", c)
	}
	u := got.AuthInfos["b-through-hub"]
	if u.ClientCertificate != "/certs/user.crt" || u.ClientKey != "/certs/user.key" || u.Exec == nil || u.Exec.Command != "get-token" {
		t.Fatalf("user %+v", u)
	}
}

func TestMemberKubeconfigHostPort(t *testing.T) {
	hub := hubKubeconfig()
	hub.Clusters["hub-cluster"].Server = "hub.example:6443"
	got, err := memberKubeconfig(hub, "", "member-a", "")
	if err != nil {
		t.Fatal(err)
	}
	// With a CA, client-go reads host:port as https; so does the printed server.
	if s := got.Clusters["member-a"].Server; s != "https://hub.example:6443"+proxyA {
		t.Fatalf("server %q", s)
	}
}

func TestMemberKubeconfigErrors(t *testing.T) {
	noCurrent := hubKubeconfig()
	noCurrent.CurrentContext = ""
	noServer := hubKubeconfig()
	noServer.Clusters["hub-cluster"].Server = ""
	missingCluster := hubKubeconfig()
	delete(missingCluster.Clusters, "hub-cluster")
	for _, tc := range []struct {
		name            string
		hub             clientcmdapi.Config
		context, member string
		want            string
	}{
		{"invalid member", hubKubeconfig(), "", "Member_A", "invalid cluster name"},
		{"member with a slash", hubKubeconfig(), "", "a/b", "invalid cluster name"},
		{"empty member", hubKubeconfig(), "", "", "must not be empty"},
		{"unknown context", hubKubeconfig(), "nope", "member-a", `context "nope" not found`},
		{"no current context", noCurrent, "", "member-a", "no current context"},
		{"no server", noServer, "", "member-a", "has no server"},
		{"missing cluster", missingCluster, "", "member-a", `cluster "hub-cluster" of context "hub" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := memberKubeconfig(tc.hub, tc.context, tc.member, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q; got %v", err, tc.want, got)
			}
		})
	}
}

// The command loads the hub kubeconfig like kubectl, writes only the kubeconfig
// to stdout, and what it writes loads into a working client config.
func TestKubeconfigCommand(t *testing.T) {
	dir := t.TempDir()
	hubPath := filepath.Join(dir, "hub.kubeconfig")
	hub := hubKubeconfig()
	// A relative CA file is resolved against the hub kubeconfig's folder.
	hub.Clusters["hub-cluster"].CertificateAuthorityData = nil
	hub.Clusters["hub-cluster"].CertificateAuthority = "ca.crt"
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), []byte("CA FILE"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := clientcmd.WriteToFile(hub, hubPath); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", filepath.Join(dir, "does-not-matter"))

	run := func(args ...string) (string, string, error) {
		// NewCommand can only be called once per process (it registers
		// feature gates); a bare parent is enough here.
		cmd := &cobra.Command{Use: "kube-gateway", SilenceErrors: true, SilenceUsage: true}
		cmd.AddCommand(newKubeconfigCommand())
		var stdout, stderr bytes.Buffer
		cmd.SetOut(&stdout)
		cmd.SetErr(&stderr)
		cmd.SetArgs(append([]string{"kubeconfig"}, args...))
		err := cmd.Execute()
		return stdout.String(), stderr.String(), err
	}

	out, _, err := run("--kubeconfig", hubPath, "--cluster", "member-a")
	if err != nil {
		t.Fatal(err)
	}
	got, err := clientcmd.Load([]byte(out))
	if err != nil {
		t.Fatalf("stdout is not a kubeconfig: %v\n%s", err, out)
	}
	if got.CurrentContext != "member-a" {
		t.Fatalf("current context %q", got.CurrentContext)
	}
	if ca := got.Clusters["member-a"].CertificateAuthority; ca != filepath.Join(dir, "ca.crt") {
		t.Fatalf("CA file %q, want the absolute path", ca)
	}
	restCfg, err := clientcmd.NewDefaultClientConfig(*got, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if restCfg.Host != "https://hub.example:6443"+proxyA || restCfg.BearerToken != "hub-token" || restCfg.ServerName != "hub.internal" {
		t.Fatalf("client config %+v", restCfg)
	}

	// --flatten embeds the CA file; --context and --context-name; KUBECONFIG
	// is used when --kubeconfig is not given.
	t.Setenv("KUBECONFIG", hubPath)
	out, _, err = run("--cluster", "member-a", "--flatten", "--context-name", "a")
	if err != nil {
		t.Fatal(err)
	}
	if got, err = clientcmd.Load([]byte(out)); err != nil {
		t.Fatal(err)
	}
	if c := got.Clusters["a"]; c == nil || string(c.CertificateAuthorityData) != "CA FILE" || c.CertificateAuthority != "" || got.CurrentContext != "a" {
		t.Fatalf("flattened: %s", out)
	}
	out, _, err = run("--cluster", "member-b", "--context", "other")
	if err != nil {
		t.Fatal(err)
	}
	if got, err = clientcmd.Load([]byte(out)); err != nil {
		t.Fatal(err)
	}
	if s := got.Clusters["member-b"].Server; !strings.HasPrefix(s, "https://rancher.example/k8s/clusters/c-1/apis/") {
		t.Fatalf("--context other: server %q", s)
	}

	// Errors print nothing on stdout.
	for _, args := range [][]string{
		{"--cluster", "Not/Valid"},
		{"--cluster", "member-a", "--context", "nope"},
		{"--kubeconfig", filepath.Join(dir, "missing"), "--cluster", "member-a"},
		{},
	} {
		out, _, err := run(args...)
		if err == nil || out != "" {
			t.Errorf("%v: err %v, stdout %q", args, err, out)
		}
	}
}

// --direct keeps the hub user and points the cluster at the gateway's direct
// address, with the gateway's CA and server name instead of the hub's TLS
// settings.
func TestKubeconfigDirect(t *testing.T) {
	dir := t.TempDir()
	hubPath := filepath.Join(dir, "hub.kubeconfig")
	if err := clientcmd.WriteToFile(hubKubeconfig(), hubPath); err != nil {
		t.Fatal(err)
	}
	caPath := filepath.Join(dir, "gateway-ca.crt")
	if err := os.WriteFile(caPath, []byte("GATEWAY CA"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		return runKubeconfig(append([]string{"--kubeconfig", hubPath}, args...)...)
	}
	out, err := run("--cluster", "member-a", "--direct", "--direct-server", "https://203.0.113.7:8443",
		"--direct-ca-file", caPath, "--direct-tls-server-name", "kube-gateway.kube-gateway.svc", "--flatten")
	if err != nil {
		t.Fatal(err)
	}
	got, err := clientcmd.Load([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	restCfg, err := clientcmd.NewDefaultClientConfig(*got, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if restCfg.Host != "https://203.0.113.7:8443"+proxyA || restCfg.BearerToken != "hub-token" ||
		restCfg.ServerName != "kube-gateway.kube-gateway.svc" || string(restCfg.CAData) != "GATEWAY CA" || restCfg.Proxy != nil {
		t.Fatalf("client config %+v", restCfg)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--direct"}, "needs --direct-server"},
		{[]string{"--direct", "--direct-server", "http://203.0.113.7"}, "want https://"},
		{[]string{"--direct", "--direct-server", "203.0.113.7:443"}, "want https://"},
		{[]string{"--direct", "--direct-server", "https://203.0.113.7", "--direct-ca-file", filepath.Join(dir, "missing")}, "--direct-ca-file"},
		{[]string{"--direct-server", "https://203.0.113.7"}, "need --direct"},
	} {
		out, err := run(append([]string{"--cluster", "member-a"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || out != "" {
			t.Errorf("%v: err %v, stdout %q; want an error with %q", tc.args, err, out, tc.want)
		}
	}
}

// checkUpstreamCluster asks the hub for the UpstreamCluster with the generated
// clientset.
func TestCheckUpstreamCluster(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/member-a") {
			_ = json.NewEncoder(w).Encode(gatewayv1alpha1.UpstreamCluster{
				TypeMeta:   metav1.TypeMeta{APIVersion: "gateway.kubewharf.io/v1alpha1", Kind: "UpstreamCluster"},
				ObjectMeta: metav1.ObjectMeta{Name: "member-a"},
			})
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(metav1.Status{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
			Status:   metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound,
			Message: "upstreamclusters.gateway.kubewharf.io not found",
		})
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	if err := checkUpstreamCluster(context.Background(), cfg, "member-a", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	err := checkUpstreamCluster(context.Background(), cfg, "member-z", 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), `upstreamcluster "member-z" not found`) {
		t.Fatalf("missing cluster: %v", err)
	}
	want := []string{
		"GET /apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-a",
		"GET /apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-z",
	}
	if !reflect.DeepEqual(paths, want) {
		t.Fatalf("requests %q, want %q", paths, want)
	}
}

func normalize(c *clientcmdapi.Config) {
	for _, x := range c.Clusters {
		x.LocationOfOrigin = ""
		if len(x.Extensions) == 0 {
			x.Extensions = nil
		}
	}
	for _, x := range c.AuthInfos {
		x.LocationOfOrigin = ""
		if len(x.Extensions) == 0 {
			x.Extensions = nil
		}
	}
	for _, x := range c.Contexts {
		x.LocationOfOrigin = ""
		if len(x.Extensions) == 0 {
			x.Extensions = nil
		}
	}
}

func dump(t *testing.T, c *clientcmdapi.Config) string {
	t.Helper()
	data, err := clientcmd.Write(*c)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// Member kubeconfigs printed from different hub kubeconfigs merge safely even
// when the hub users share a name (local kubeconfigs often all say "admin"):
// each merged context keeps its own credentials, whatever the order.
func TestMemberKubeconfigsMerge(t *testing.T) {
	hubOf := func(token string) clientcmdapi.Config {
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["hub"] = &clientcmdapi.Cluster{Server: "https://hub.example:6443"}
		cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
		cfg.Contexts["hub"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: "admin"}
		cfg.CurrentContext = "hub"
		return *cfg
	}
	dir := t.TempDir()
	var files []string
	want := map[string]string{} // context -> token
	for _, c := range []struct{ token, cluster, contextName, context string }{
		{"admin-token", "member-a", "", "member-a"},
		{"alice-token", "member-a", "alice@member-a", "alice@member-a"},
		{"alice-token", "member-b", "", "member-b"},
	} {
		out, err := memberKubeconfig(hubOf(c.token), "", c.cluster, c.contextName)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, c.context+".kubeconfig")
		if err := clientcmd.WriteToFile(*out, f); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		want[c.context] = c.token
	}
	reversed := slices.Clone(files)
	slices.Reverse(reversed)
	for _, merged := range [][]string{files, reversed} {
		for context, token := range want {
			rules := &clientcmd.ClientConfigLoadingRules{Precedence: merged}
			cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.BearerToken != token {
				t.Errorf("merged %v: context %q has token %q, want %q", merged, context, cfg.BearerToken, token)
			}
		}
	}
}

// runKubeconfig runs `kube-gateway kubeconfig args...` and returns its stdout.
func runKubeconfig(args ...string) (string, error) {
	cmd := &cobra.Command{Use: "kube-gateway", SilenceErrors: true, SilenceUsage: true}
	cmd.AddCommand(newKubeconfigCommand())
	var stdout bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs(append([]string{"kubeconfig"}, args...))
	err := cmd.Execute()
	return stdout.String(), err
}
