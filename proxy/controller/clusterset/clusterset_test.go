package clusterset

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/health"
)

// hookLog records what the hooks were told.
type hookLog struct {
	mu       sync.Mutex
	invalid  []string // name/reason/message
	observed []string // name
}

func (h *hookLog) hooks() Hooks {
	return Hooks{
		Invalid: func(name string, generation int64, err error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.invalid = append(h.invalid, name+"/"+cluster.ConfigErrorReason(err)+"/"+err.Error())
		},
		Observed: func(name string, _ int64, _ []health.ServerHealth) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.observed = append(h.observed, name)
		},
	}
}

func (h *hookLog) snapshot() (invalid, observed []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.invalid...), append([]string(nil), h.observed...)
}

// plainListWatch is a list and watch without WatchList semantics (the fake
// watch sends no initial-events bookmark).
type plainListWatch struct{ *cache.ListWatch }

func (plainListWatch) IsWatchListSemanticsUnSupported() bool { return true }

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// A cluster whose Secret is missing is reported Invalid with its reason; once
// the Secret exists it is compiled and Observed, and its enabled servers are
// listed for metrics.
func TestControllerReportsInvalidClusters(t *testing.T) {
	uc := &gatewayv1alpha1.UpstreamCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "member-a", UID: "uid-a", Generation: 1, ResourceVersion: "1"},
		Spec: gatewayv1alpha1.UpstreamClusterSpec{
			Servers: []gatewayv1alpha1.UpstreamServer{
				{Endpoint: "https://127.0.0.1:1"},
				{Endpoint: "https://127.0.0.1:2", Disabled: true},
			},
			ClientConfig: gatewayv1alpha1.ClientConfig{SecretRef: gatewayv1alpha1.SecretReference{Namespace: "kube-gateway", Name: "member-a-cred"}},
		},
	}
	watcher := watch.NewFake()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &gatewayv1alpha1.UpstreamClusterList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []gatewayv1alpha1.UpstreamCluster{*uc}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watcher, nil },
	}
	hub := fake.NewClientset()
	factory := informers.NewSharedInformerFactoryWithOptions(hub, 0, informers.WithNamespace("kube-gateway"))
	secrets := factory.Core().V1().Secrets().Informer()
	log := &hookLog{}
	c, err := NewController(plainListWatch{lw}, secrets, log.hooks())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	go c.Run(ctx)

	poll(t, "the missing Secret to be reported", func() bool { inv, _ := log.snapshot(); return len(inv) > 0 })
	invalid, observed := log.snapshot()
	if want := "member-a/SecretNotFound/its credential Secret kube-gateway/member-a-cred was not found on the hub"; invalid[0] != want || len(observed) != 0 {
		t.Fatalf("invalid %q observed %v, want %q and nothing observed", invalid, observed, want)
	}
	if _, err := c.Lookup("member-a"); err == nil || !strings.Contains(err.Error(), "was not found") {
		t.Fatalf("Lookup: %v", err)
	}
	var listed []string
	c.EachServer(func(cl, endpoint string, _ bool) { listed = append(listed, cl+" "+endpoint) })
	if len(listed) != 0 {
		t.Fatalf("servers of an unusable cluster listed: %v", listed)
	}

	if _, err := hub.CoreV1().Secrets("kube-gateway").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-gateway", Name: "member-a-cred"},
		Data:       map[string][]byte{"token": []byte("t")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the cluster to compile", func() bool { _, obs := log.snapshot(); return len(obs) > 0 })
	if _, err := c.Lookup("member-a"); err != nil {
		t.Fatalf("Lookup after the Secret appeared: %v", err)
	}
	listed = nil
	c.EachServer(func(cl, endpoint string, _ bool) { listed = append(listed, cl+" "+endpoint) })
	sort.Strings(listed)
	if len(listed) != 1 || listed[0] != "member-a https://127.0.0.1:1" {
		t.Fatalf("EachServer listed %v, want the enabled server only", listed)
	}
}
