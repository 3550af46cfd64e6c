package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestThroughGateway(t *testing.T) {
	const ucs = "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters"
	for _, c := range []struct {
		server, segment, hub string
	}{
		{"https://hub.example:6443" + ucs + "/member-a/proxy", "member-a", "https://hub.example:6443"},
		{"https://hub.example:6443" + ucs + "/member-a/proxy/", "member-a", "https://hub.example:6443"},
		{"https://hub.example:6443" + ucs + "/member-a/proxy/api/v1", "member-a", "https://hub.example:6443"},
		{"https://hub.example:6443" + ucs + "/*/proxy", "*", "https://hub.example:6443"},
		{"https://hub.example:6443" + ucs + "/%2A/proxy", "*", "https://hub.example:6443"},
		{"https://hub.example:6443" + ucs + "/env=prod/proxy", "env=prod", "https://hub.example:6443"},
		{"https://hub.example:6443" + ucs + "/env%20in%20(prod,staging)/proxy", "env in (prod,staging)", "https://hub.example:6443"},
		{"hub.example:6443" + ucs + "/member-a/proxy", "member-a", "https://hub.example:6443"},
		// A hub behind a path prefix (Rancher) keeps it.
		{"https://rancher.example/k8s/clusters/c-1" + ucs + "/member-a/proxy", "member-a", "https://rancher.example/k8s/clusters/c-1"},
		// Not through the gateway.
		{"https://hub.example:6443", "", ""},
		{"https://hub.example:6443/", "", ""},
		{"https://rancher.example/k8s/clusters/c-1", "", ""},
		{"https://hub.example:6443" + ucs, "", ""},
		{"https://hub.example:6443" + ucs + "/member-a", "", ""},
		{"https://hub.example:6443" + ucs + "/member-a/status", "", ""},
		{"https://hub.example:6443" + ucs + "/member-a/proxyx", "", ""},
		{"https://hub.example:6443" + ucs + "//proxy", "", ""},
	} {
		segment, hub, ok := throughGateway(c.server)
		if ok != (c.segment != "") || segment != c.segment || hub != c.hub {
			t.Errorf("throughGateway(%q) = %q, %q, %v; want %q, %q", c.server, segment, hub, ok, c.segment, c.hub)
		}
	}
}

// mergedKubeconfig is what KUBECONFIG=a:b:... of local-up's kubeconfigs
// gives: the hub as admin and alice, member-a directly, and member-a and
// fleets through the gateway, the current context being alice's member-a.
func mergedKubeconfig(hubServer string) clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	add := func(context, server string) {
		cfg.Clusters[context] = &clientcmdapi.Cluster{Server: server}
		cfg.AuthInfos[context] = &clientcmdapi.AuthInfo{Token: context + "-token"}
		cfg.Contexts[context] = &clientcmdapi.Context{Cluster: context, AuthInfo: context}
	}
	add("hub", hubServer)
	add("alice@hub", hubServer+"/")
	add("member-a", "https://127.0.0.1:1")
	add("alice@member-a", hubServer+proxyA)
	add("fleet", hubServer+"/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/*/proxy")
	add("prod", hubServer+"/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/env%20in%20(prod)/proxy")
	cfg.CurrentContext = "alice@member-a"
	return *cfg
}

func TestCheckHubContext(t *testing.T) {
	const hub = "https://hub.example:6443"
	cfg := mergedKubeconfig(hub)
	for _, c := range []struct {
		context string
		want    []string // in the error; none: accepted
	}{
		{"", []string{`context "alice@member-a" of the kubeconfig is not the hub's`, hub + proxyA,
			"reaches member cluster member-a through the gateway", "through the gateway: pass --context alice@hub or --context hub, or --kubeconfig with the hub's kubeconfig"}},
		{"fleet", []string{`context "fleet"`, `the member clusters "*" selects`, "--context alice@hub or --context hub"}},
		{"prod", []string{`context "prod"`, `the member clusters "env in (prod)" selects`}},
		{"hub", nil},
		{"alice@hub", nil},
		{"member-a", nil},
		{"missing", nil}, // reported by the caller
	} {
		err := checkHubContext(cfg, c.context)
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("context %q: %v, want it accepted", c.context, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("context %q: accepted, want an error", c.context)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("context %q: error %q, want it to contain %q", c.context, err, w)
			}
		}
	}

	// Without the hub's context in the kubeconfig, the error names its server.
	only := clientcmdapi.NewConfig()
	only.Clusters["c"] = &clientcmdapi.Cluster{Server: hub + proxyA}
	only.Contexts["alice@member-a"] = &clientcmdapi.Context{Cluster: "c"}
	err := checkHubContext(*only, "alice@member-a")
	if err == nil || !strings.Contains(err.Error(), "pass --context with a context of the hub itself (server "+hub+"), or --kubeconfig") {
		t.Errorf("no hub context: %v", err)
	}
}

// Every command that talks to the hub refuses a kubeconfig whose context
// reaches a member through the gateway, before it sends anything, and
// prints nothing on stdout; given the hub's context, it goes on.
func TestHubCommandsRefuseAMemberContext(t *testing.T) {
	var requests int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		http.Error(w, "not a hub", http.StatusTeapot)
	}))
	defer srv.Close()
	dir := t.TempDir()
	merged := filepath.Join(dir, "merged.kubeconfig")
	if err := clientcmd.WriteToFile(mergedKubeconfig(srv.URL), merged); err != nil {
		t.Fatal(err)
	}
	memberPath := filepath.Join(dir, "member.kubeconfig")
	member := clientcmdapi.NewConfig()
	member.Clusters["m"] = &clientcmdapi.Cluster{Server: srv.URL, CertificateAuthorityData: []byte("CA")}
	member.Contexts["m"] = &clientcmdapi.Context{Cluster: "m"}
	member.CurrentContext = "m"
	if err := clientcmd.WriteToFile(*member, memberPath); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", merged)

	run := func(args ...string) (string, error) {
		cmd := &cobra.Command{Use: "kube-gateway", SilenceErrors: true, SilenceUsage: true}
		cmd.AddCommand(newKubeconfigCommand(), newClustersCommand(), newJoinCommand(), newUnjoinCommand())
		var stdout bytes.Buffer
		cmd.SetOut(&stdout)
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(args)
		err := cmd.Execute()
		return stdout.String(), err
	}
	for _, args := range [][]string{
		{"kubeconfig", "--cluster", "member-b"},
		{"clusters"},
		{"join", "member-b", "--member-kubeconfig", memberPath, "--timeout", "1s"},
		{"unjoin", "member-b", "--member-kubeconfig", memberPath},
		{"clusters", "--context", "fleet"},
		{"join", "member-b", "--member-kubeconfig", memberPath, "--context", "prod", "--dry-run"},
	} {
		out, err := run(args...)
		if err == nil || !strings.Contains(err.Error(), "is not the hub's") || !strings.Contains(err.Error(), "--context alice@hub or --context hub") || out != "" {
			t.Errorf("%v: err %v, stdout %q; want the member context refused", args, err, out)
		}
	}
	if requests != 0 {
		t.Errorf("%d requests sent through a member context, want none", requests)
	}

	// The member kubeconfig of join and unjoin must be the member's own.
	throughHub := filepath.Join(dir, "through-hub.kubeconfig")
	member.Clusters["m"].Server = srv.URL + proxyA
	if err := clientcmd.WriteToFile(*member, throughHub); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"join", "member-a", "--context", "hub", "--member-kubeconfig", throughHub},
		{"unjoin", "member-a", "--context", "hub", "--member-kubeconfig", throughHub},
	} {
		_, err := run(args...)
		if err == nil || !strings.Contains(err.Error(), "reaches member-a through the gateway (server "+srv.URL+proxyA+"), not the member's own apiserver: pass with --member-kubeconfig") {
			t.Errorf("%v: err %v, want the member kubeconfig refused", args, err)
		}
	}
	if requests != 0 {
		t.Errorf("%d requests sent with a member kubeconfig through the gateway, want none", requests)
	}

	// With --context hub, the commands talk to the hub.
	out, err := run("kubeconfig", "--cluster", "member-b", "--context", "hub")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := clientcmd.Load([]byte(out)); err != nil || got.Clusters["member-b"].Server != srv.URL+"/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-b/proxy" {
		t.Errorf("kubeconfig --context hub: %v\n%s", err, out)
	}
	if _, err := run("clusters", "--context", "hub"); err == nil || requests == 0 {
		t.Errorf("clusters --context hub: %v after %d requests, want the hub asked (and its 418)", err, requests)
	}
}
