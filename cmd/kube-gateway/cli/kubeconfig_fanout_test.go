package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

const ucsPath = "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters"

func TestProxyServer(t *testing.T) {
	for _, c := range []struct {
		hub, cluster, want, wantErr string
	}{
		{hub: "https://hub.example:6443", cluster: "member-a", want: "https://hub.example:6443" + ucsPath + "/member-a/proxy"},
		{hub: "https://hub.example:6443", cluster: "*", want: "https://hub.example:6443" + ucsPath + "/*/proxy"},
		{hub: "https://hub.example:6443/", cluster: "env=prod", want: "https://hub.example:6443" + ucsPath + "/env=prod/proxy"},
		{hub: "https://hub.example:6443", cluster: "env in (prod,staging)", want: "https://hub.example:6443" + ucsPath + "/env%20in%20(prod,staging)/proxy"},
		{hub: "https://hub.example:6443", cluster: "!legacy", want: "https://hub.example:6443" + ucsPath + "/!legacy/proxy"},
		{hub: "https://hub.example:6443", cluster: "env!=prod,region=eu", want: "https://hub.example:6443" + ucsPath + "/env!=prod,region=eu/proxy"},
		{hub: "https://rancher.example/k8s/clusters/c-1", cluster: "*", want: "https://rancher.example/k8s/clusters/c-1" + ucsPath + "/*/proxy"},
		{hub: "https://rancher.example/k8s/a%20b", cluster: "env=prod", want: "https://rancher.example/k8s/a%20b" + ucsPath + "/env=prod/proxy"},
		// A bare key is a cluster name, as the gateway reads it.
		{hub: "https://hub.example:6443", cluster: "env", want: "https://hub.example:6443" + ucsPath + "/env/proxy"},
		{hub: "https://hub.example:6443", cluster: "example.com/env=prod", wantErr: "a label key with a prefix"},
		{hub: "https://hub.example:6443", cluster: "env in (prod", wantErr: "is neither an UpstreamCluster name nor a valid label selector"},
		{hub: "https://hub.example:6443", cluster: "Member_A", wantErr: "invalid cluster name"},
		{hub: "", cluster: "*", wantErr: "no server"},
	} {
		got, err := proxyServer(&rest.Config{Host: c.hub}, c.cluster)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%q on %q: %q, %v; want an error with %q", c.cluster, c.hub, got, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q on %q: %q, %v; want %q", c.cluster, c.hub, got, err, c.want)
		}
	}
}

// A fan-out kubeconfig's server, read by client-go, sends requests whose
// path the gateway reads back as the selector: the escaping survives
// client-go's decoding and re-encoding of the server's path.
func TestFanOutServerThroughClientGo(t *testing.T) {
	paths := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths <- r.URL.Path // decoded, as the gateway splits it
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","items":[]}`))
	}))
	defer srv.Close()
	for _, selector := range []string{"*", "env=prod", "env in (prod,staging)", "!legacy", "env!=prod,region=eu", "tier notin (a, b)"} {
		hub := clientcmdapi.NewConfig()
		hub.Clusters["hub"] = &clientcmdapi.Cluster{Server: srv.URL}
		hub.Contexts["hub"] = &clientcmdapi.Context{Cluster: "hub"}
		hub.CurrentContext = "hub"
		cfg, err := memberKubeconfig(*hub, "", selector, "fleet")
		if err != nil {
			t.Fatal(err)
		}
		data, err := clientcmd.Write(*cfg)
		if err != nil {
			t.Fatal(err)
		}
		restCfg, err := clientcmd.RESTConfigFromKubeConfig(data)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfig(restCfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if got, want := <-paths, ucsPath+"/"+selector+"/proxy/api/v1/pods"; got != want {
			t.Errorf("%q: the server got path %q, want %q (kubeconfig server %s)", selector, got, want, cfg.Clusters["fleet"].Server)
		}
	}
}

// kubeconfig --cluster '*' or a selector prints a fan-out kubeconfig; its
// context is fleet for '*' and must be named for a selector; --check asks
// the hub whether the selection is empty, --direct works the same.
func TestKubeconfigCommandFanOut(t *testing.T) {
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.Path+"?"+r.URL.Query().Get("labelSelector"))
		w.Header().Set("Content-Type", "application/json")
		list := gatewayv1alpha1.UpstreamClusterList{TypeMeta: metav1.TypeMeta{APIVersion: "gateway.kubewharf.io/v1alpha1", Kind: "UpstreamClusterList"}}
		if r.URL.Query().Get("labelSelector") != "env=nowhere" {
			list.Items = []gatewayv1alpha1.UpstreamCluster{{ObjectMeta: metav1.ObjectMeta{Name: "member-a"}}}
		}
		_ = json.NewEncoder(w).Encode(list)
	}))
	defer srv.Close()
	dir := t.TempDir()
	hubPath := filepath.Join(dir, "hub.kubeconfig")
	hub := clientcmdapi.NewConfig()
	hub.Clusters["hub"] = &clientcmdapi.Cluster{Server: srv.URL}
	hub.AuthInfos["alice"] = &clientcmdapi.AuthInfo{Token: "alice-token"}
	hub.Contexts["hub"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: "alice"}
	hub.CurrentContext = "hub"
	if err := clientcmd.WriteToFile(*hub, hubPath); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		return runKubeconfig(append([]string{"--kubeconfig", hubPath, "--request-timeout", "10s"}, args...)...)
	}
	for _, c := range []struct {
		args                  []string
		context, server, want string
	}{
		{args: []string{"--cluster", "*"}, context: "fleet", server: srv.URL + ucsPath + "/*/proxy"},
		{args: []string{"--cluster", "*", "--check"}, context: "fleet", server: srv.URL + ucsPath + "/*/proxy"},
		{args: []string{"--cluster", "*", "--context-name", "all"}, context: "all", server: srv.URL + ucsPath + "/*/proxy"},
		{args: []string{"--cluster", "env in (prod,staging)", "--context-name", "prod", "--check"}, context: "prod", server: srv.URL + ucsPath + "/env%20in%20(prod,staging)/proxy"},
		{args: []string{"--cluster", "*", "--direct", "--direct-server", "https://203.0.113.7:8443"}, context: "fleet", server: "https://203.0.113.7:8443" + ucsPath + "/*/proxy"},
		{args: []string{"--cluster", "env=prod"}, want: `--cluster "env=prod" is a label selector: name the printed kubeconfig's context with --context-name`},
		{args: []string{"--cluster", "env=nowhere", "--context-name", "x", "--check"}, want: `no upstreamcluster on the hub ` + srv.URL + ` matches "env=nowhere"`},
		{args: []string{"--cluster", "example.com/env=prod", "--context-name", "x"}, want: "a label key with a prefix"},
	} {
		out, err := run(c.args...)
		if c.want != "" {
			if err == nil || !strings.Contains(err.Error(), c.want) || out != "" {
				t.Errorf("%q: err %v, stdout %q; want an error with %q", c.args, err, out, c.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		got, err := clientcmd.Load([]byte(out))
		if err != nil {
			t.Fatal(err)
		}
		if got.CurrentContext != c.context || got.Clusters[c.context] == nil || got.Clusters[c.context].Server != c.server || got.AuthInfos[c.context].Token != "alice-token" {
			t.Errorf("%q: want context %q with server %q, got\n%s", c.args, c.context, c.server, out)
		}
	}
	want := []string{ucsPath + "?", ucsPath + "?env in (prod,staging)", ucsPath + "?env=nowhere"}
	if strings.Join(queries, "\n") != strings.Join(want, "\n") {
		t.Errorf("--check listed %q, want %q", queries, want)
	}
}
