package harness

import (
	"slices"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// The kubeconfigs of the environment merge (KUBECONFIG=a:b:..., the first
// entry of each name winning) without any context losing its own server or
// credentials: every file's context resolves, merged with all others in either
// order, to what the file alone gives.
func TestKubeconfigsMergeSafely(t *testing.T) {
	cluster := func(url string, tokens map[string]string) *Cluster {
		return &Cluster{Servers: []*APIServer{{URL: url}}, CAData: []byte("CA of " + url), Tokens: tokens}
	}
	e := &Env{
		WorkDir: t.TempDir(),
		Hub:     cluster("https://hub.test", map[string]string{UserAdmin: "hub-admin", UserAlice: "hub-alice", UserBob: "hub-bob", UserGateway: "hub-gateway"}),
		Members: map[string]*Cluster{
			MemberA: cluster("https://member-a.test", map[string]string{UserAdmin: "member-a-admin"}),
			MemberB: cluster("https://member-b.test", map[string]string{UserAdmin: "member-b-admin"}),
		},
	}
	if err := e.writeKubeconfigs(); err != nil {
		t.Fatal(err)
	}
	files := append(kubeconfigNames(e), e.Kubeconfig("hub-"+UserGateway))
	type resolved struct{ host, token string }
	resolve := func(paths []string, context string) resolved {
		t.Helper()
		rules := &clientcmd.ClientConfigLoadingRules{Precedence: paths}
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
		if err != nil {
			t.Fatalf("context %q of %v: %v", context, paths, err)
		}
		return resolved{cfg.Host, cfg.BearerToken}
	}
	contexts := map[string]string{} // context -> file
	for _, f := range files {
		raw, err := clientcmd.LoadFromFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if other, dup := contexts[raw.CurrentContext]; dup {
			t.Fatalf("%s and %s both name their context %q", f, other, raw.CurrentContext)
		}
		contexts[raw.CurrentContext] = f
	}
	reversed := slices.Clone(files)
	slices.Reverse(reversed)
	for context, f := range contexts {
		alone := resolve([]string{f}, context)
		for _, merged := range [][]string{files, reversed} {
			if got := resolve(merged, context); got != alone {
				t.Errorf("context %q merged resolves to %+v, alone (%s) to %+v", context, got, f, alone)
			}
		}
	}
	// The merged kubeconfig local-up prints: every context as alone, the hub
	// current.
	for context, f := range contexts {
		if context == UserGateway+"@hub" {
			continue // the gateway's own identity is not merged
		}
		if got, alone := resolve([]string{e.MergedKubeconfig()}, context), resolve([]string{f}, context); got != alone {
			t.Errorf("context %q of the merged kubeconfig resolves to %+v, alone (%s) to %+v", context, got, f, alone)
		}
	}
	if got := resolve([]string{e.MergedKubeconfig()}, ""); got != (resolved{"https://hub.test", "hub-admin"}) {
		t.Errorf("the merged kubeconfig's current context resolves to %+v, want the hub's admin", got)
	}
	// The names the docs use: --context hub, --context member-a.
	for context, want := range map[string]resolved{
		"hub":            {"https://hub.test", "hub-admin"},
		"alice@hub":      {"https://hub.test", "hub-alice"},
		MemberA:          {"https://member-a.test", "member-a-admin"},
		"alice@member-a": {"https://hub.test" + ProxyPath(MemberA), "hub-alice"},
		"admin@member-b": {"https://hub.test" + ProxyPath(MemberB), "hub-admin"},
	} {
		if got := resolve(files, context); got != want {
			t.Errorf("context %q resolves to %+v, want %+v", context, got, want)
		}
	}
}
