package e2e

import (
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/faultproxy"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// fanOutPath is the hub path prefix that fans out to the clusters the name
// segment selects; spelled out, not taken from the code under test.
func fanOutPath(segment string) string {
	return "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/" + segment + "/proxy"
}

// fanOutGet GETs path (with query parameters) through the hub as user and
// returns the body, the status code and the warnings the client received.
func fanOutGet(ctx context.Context, t *testing.T, user, path string, params map[string]string) ([]byte, int, []string) {
	t.Helper()
	cfg := env.HubConfig(user)
	warnings := &warningCollector{}
	cfg.WarningHandler = warnings
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req := c.CoreV1().RESTClient().Get().AbsPath(path).MaxRetries(0)
	for k, v := range params {
		req = req.Param(k, v)
	}
	var code int
	body, _ := req.Do(ctx).StatusCode(&code).Raw()
	return body, code, warnings.get()
}

// fanOutClusters returns the cluster annotation of each named ConfigMap in a
// fan-out list.
func fanOutClusters(t *testing.T, body []byte) map[string]string {
	t.Helper()
	var list corev1.ConfigMapList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("not a ConfigMapList: %v: %s", err, body)
	}
	got := map[string]string{}
	for _, cm := range list.Items {
		got[cm.Name] = cm.Annotations["gateway.kubewharf.io/cluster"]
	}
	return got
}

// fanOutKubeconfig writes a kubeconfig of hub user's whose server fans out to
// every UpstreamCluster.
func fanOutKubeconfig(t *testing.T, user string) string {
	t.Helper()
	return fanOutKubeconfigFor(t, user, "*")
}

// fanOutKubeconfigFor writes a kubeconfig of hub user's whose server fans out
// to the UpstreamClusters segment selects.
func fanOutKubeconfigFor(t *testing.T, user, segment string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(env.Kubeconfig("hub-" + user))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = strings.TrimSuffix(c.Server, "/") + fanOutPath(segment)
	}
	path := filepath.Join(t.TempDir(), "fanout-"+user+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// bothMembers tells why rv is not a fan-out resourceVersion (base64url JSON,
// spelled out here, not taken from the code under test) naming member-a's
// and member-b's.
func bothMembers(rv string) error {
	raw, err := base64.RawURLEncoding.DecodeString(rv)
	var versions map[string]string
	if err == nil {
		err = json.Unmarshal(raw, &versions)
	}
	if err != nil || versions[harness.MemberA] == "" || versions[harness.MemberB] == "" {
		return fmt.Errorf("resourceVersion %q is not a composite of both members' (%v): %s", rv, err, raw)
	}
	return nil
}

func hasWarningAbout(warnings []string, cluster string) bool {
	for _, w := range warnings {
		if strings.Contains(w, `upstream cluster "`+cluster+`"`) {
			return true
		}
	}
	return false
}

// One list over every member: items of both, each annotated with its
// cluster; kubectl through a fan-out kubeconfig prints a CLUSTER column; a
// label selector in the name segment selects by UpstreamCluster labels; a
// member that cannot answer is a warning (an error with strict); a member
// that forbids the user is a warning; other verbs get a clear Status.
func TestFanOutList(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	ns := "fanout-" + utilrand.String(5)
	for _, m := range []string{harness.MemberA, harness.MemberB} {
		cs := kubernetes.NewForConfigOrDie(env.Members[m].Config(harness.UserAdmin, 0))
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + m}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	configMaps := "/api/v1/namespaces/" + ns + "/configmaps"

	t.Run("raw list", func(t *testing.T) {
		out, _, err := env.Kubectl(ctx, "hub-admin", "get", "--raw", fanOutPath("*")+configMaps)
		if err != nil {
			t.Fatal(err)
		}
		got := fanOutClusters(t, []byte(out))
		if got["cm-member-a"] != harness.MemberA || got["cm-member-b"] != harness.MemberB {
			t.Fatalf("cluster annotations %v, want cm-member-a on %s and cm-member-b on %s", got, harness.MemberA, harness.MemberB)
		}
		var list metav1.List
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatal(err)
		}
		if err := bothMembers(list.ResourceVersion); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("kubectl get with a fan-out kubeconfig", func(t *testing.T) {
		out, _, err := env.Kubectl(ctx, fanOutKubeconfig(t, harness.UserAdmin), "get", "configmaps", "-n", ns)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) == 0 || !strings.HasPrefix(lines[0], "CLUSTER") {
			t.Fatalf("kubectl get printed no CLUSTER column first:\n%s", out)
		}
		for _, m := range []string{harness.MemberA, harness.MemberB} {
			found := false
			for _, l := range lines[1:] {
				f := strings.Fields(l)
				found = found || (len(f) > 1 && f[0] == m && f[1] == "cm-"+m)
			}
			if !found {
				t.Errorf("no row of %s's cm-%s with its cluster:\n%s", m, m, out)
			}
		}
	})

	t.Run("label selector", func(t *testing.T) {
		key := "fanout-e2e-" + ns
		ucs := upstreamClusters(t)
		patch := []byte(`{"metadata":{"labels":{"` + key + `":"yes"}}}`)
		if _, err := ucs.Patch(ctx, harness.MemberA, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = ucs.Patch(context.Background(), harness.MemberA, types.MergePatchType, []byte(`{"metadata":{"labels":{"`+key+`":null}}}`), metav1.PatchOptions{})
		})
		// Both spellings cross the hub; the client URL-encodes the spaces of the second.
		for _, selector := range []string{key + "=yes", key + " in (yes,maybe)"} {
			// The test's context, not the poll's: the last answer is kept whole.
			eventually(t, 30*time.Second, func(context.Context) error {
				body, code, _ := fanOutGet(ctx, t, harness.UserAdmin, fanOutPath(selector)+configMaps, nil)
				if code != http.StatusOK {
					return errorf("%d: %s", code, body)
				}
				if got := fanOutClusters(t, body); len(got) != 1 || got["cm-member-a"] != harness.MemberA {
					return errorf("selector %q: items %v, want member-a's only", selector, got)
				}
				return nil
			})
		}
	})

	t.Run("a member the user may not read is a warning", func(t *testing.T) {
		cs := kubernetes.NewForConfigOrDie(env.Members[harness.MemberA].Config(harness.UserAdmin, 0))
		if _, err := cs.CoreV1().ConfigMaps(harness.AliceNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.CoreV1().ConfigMaps(harness.AliceNamespace).Delete(context.Background(), ns, metav1.DeleteOptions{})
		})
		body, code, warnings := fanOutGet(ctx, t, harness.UserAlice, fanOutPath("*")+"/api/v1/namespaces/"+harness.AliceNamespace+"/configmaps", nil)
		if code != http.StatusOK {
			t.Fatalf("alice's fan-out list: %d %s", code, body)
		}
		got := fanOutClusters(t, body)
		if got[ns] != harness.MemberA {
			t.Errorf("alice's items %v, want member-a's", got)
		}
		if !hasWarningAbout(warnings, harness.MemberB) || hasWarningAbout(warnings, harness.MemberA) {
			t.Errorf("warnings %q, want one about member-b (forbidden) only", warnings)
		}
	})

	t.Run("other verbs get a Status", func(t *testing.T) {
		for _, c := range []struct {
			path   string
			params map[string]string
			want   string
		}{
			{configMaps + "/cm-member-a", nil, "support list"},
		} {
			body, code, _ := fanOutGet(ctx, t, harness.UserAdmin, fanOutPath("*")+c.path, c.params)
			var status metav1.Status
			_ = json.Unmarshal(body, &status)
			if code != http.StatusMethodNotAllowed || !strings.Contains(status.Message, c.want) {
				t.Errorf("%s %v: %d %q, want 405 saying %q", c.path, c.params, code, status.Message, c.want)
			}
		}
	})

	t.Run("a large list is compressed", func(t *testing.T) {
		// One ConfigMap of 200 KiB per member, in a namespace of its own: the
		// merged list is larger than the 128 KiB above which the apiserver
		// compresses, and the gateway compresses as it does.
		big := ns + "-big"
		value := strings.Repeat("0123456789abcdef", 200<<10/16)
		for _, m := range []string{harness.MemberA, harness.MemberB} {
			cs := kubernetes.NewForConfigOrDie(env.Members[m].Config(harness.UserAdmin, 0))
			if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: big}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), big, metav1.DeleteOptions{}) })
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "big-" + m}, Data: map[string]string{"value": value}}
			if _, err := cs.CoreV1().ConfigMaps(big).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		client, err := rest.HTTPClientFor(env.HubConfig(harness.UserAdmin))
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.HubConfig(harness.UserAdmin).Host+fanOutPath("*")+"/api/v1/namespaces/"+big+"/configmaps", nil)
		if err != nil {
			t.Fatal(err)
		}
		// Set by hand, the transport leaves the answer compressed.
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("%s, Content-Encoding %q: want a gzip-compressed list", resp.Status, resp.Header.Get("Content-Encoding"))
		}
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var list corev1.ConfigMapList
		if err := json.NewDecoder(zr).Decode(&list); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, cm := range list.Items {
			if cm.Data["value"] != value {
				t.Errorf("%s: its value changed on the way (%d bytes, want %d)", cm.Name, len(cm.Data["value"]), len(value))
			}
			got[cm.Name] = cm.Annotations["gateway.kubewharf.io/cluster"]
		}
		if len(got) != 2 || got["big-member-a"] != harness.MemberA || got["big-member-b"] != harness.MemberB {
			t.Errorf("items and their clusters %v, want big-member-a on %s and big-member-b on %s", got, harness.MemberA, harness.MemberB)
		}
	})

	t.Run("a list larger than the gateway holds for fan-out lists", func(t *testing.T) {
		// Three ConfigMaps of 800 KiB on member-a, more than the gateway's
		// --fan-out-list-memory of 2 MiB together, less than it one by one.
		// A cluster listed before member-a answers through a relay 2 s
		// late: until its answer begins, the list cannot, and holds
		// member-a's answer whole.
		slow := faultyReplica(t, faultproxy.Mode{Latency: slowLatency})
		uc := memberACluster("fanout-slow-" + utilrand.String(5))
		uc.Spec.Servers = []gatewayv1alpha1.UpstreamServer{{Endpoint: slow.URL()}}
		uc.Spec.HealthCheck = faultProbes
		createCluster(t, uc)
		waitUsable(t, uc.Name)
		huge := ns + "-huge"
		cs := kubernetes.NewForConfigOrDie(env.Members[harness.MemberA].Config(harness.UserAdmin, 0))
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: huge}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), huge, metav1.DeleteOptions{}) })
		value := strings.Repeat("0123456789abcdef", 800<<10/16)
		for i := range 3 {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "huge-" + strconv.Itoa(i)}, Data: map[string]string{"value": value}}
			if _, err := cs.CoreV1().ConfigMaps(huge).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// Deleted now, not with the namespace later: other tests list
		// ConfigMaps of every namespace through fan-out paths.
		t.Cleanup(func() {
			_ = cs.CoreV1().ConfigMaps(huge).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
		})
		refused := gatewayCounter(t, "kube_gateway_fanout_lists_refused_total", map[string]string{"reason": "TooLarge"})
		body, code, _ := fanOutGet(ctx, t, harness.UserAdmin, fanOutPath("*")+"/api/v1/namespaces/"+huge+"/configmaps", nil)
		var status metav1.Status
		_ = json.Unmarshal(body, &status)
		if code != http.StatusRequestEntityTooLarge || status.Reason != metav1.StatusReasonRequestEntityTooLarge ||
			!strings.Contains(status.Message, "--fan-out-list-memory") || !strings.Contains(status.Message, "limit") {
			t.Errorf("list of 2.4 MiB with a bound of 2 MiB: %d %.300s, want a 413 Status telling to page", code, body)
		}
		if got := gatewayCounter(t, "kube_gateway_fanout_lists_refused_total", map[string]string{"reason": "TooLarge"}); got != refused+1 {
			t.Errorf("kube_gateway_fanout_lists_refused_total{reason=TooLarge} went from %v to %v, want one more", refused, got)
		}
		// Paged, a page holds one member's page at a time (the slow cluster
		// left out: it would only make it slower).
		_ = upstreamClusters(t).Delete(ctx, uc.Name, metav1.DeleteOptions{})
		out, _, err := env.Kubectl(ctx, fanOutKubeconfig(t, harness.UserAdmin), "get", "configmaps", "-n", huge, "--chunk-size=1", "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if !strings.Contains(out, "configmap/huge-"+strconv.Itoa(i)+"\n") {
				t.Errorf("kubectl get --chunk-size=1 did not list huge-%d:\n%s", i, out)
			}
		}
	})

	t.Run("a member whose answer breaks off", func(t *testing.T) {
		// About 1.2 MB of incompressible ConfigMaps on member-a, listed
		// through member-a and through a cluster before it whose relay
		// resets the connection once 256 KiB came: that cluster's answer
		// breaks off before or after the merged list began. Either way the
		// client never gets a list without its items and without a warning
		// about it.
		rnd := ns + "-random"
		cs := kubernetes.NewForConfigOrDie(env.Members[harness.MemberA].Config(harness.UserAdmin, 0))
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rnd}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), rnd, metav1.DeleteOptions{}) })
		const items = 24
		for i := range items {
			data := make([]byte, 36<<10)
			_, _ = rand.Read(data)
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "random-" + strconv.Itoa(i)}, Data: map[string]string{"data": base64.StdEncoding.EncodeToString(data)}}
			if _, err := cs.CoreV1().ConfigMaps(rnd).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			_ = cs.CoreV1().ConfigMaps(rnd).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
		})
		broken := faultyReplica(t, faultproxy.Mode{ResetAfter: 256 << 10})
		uc := memberACluster("fanout-reset-" + utilrand.String(5))
		uc.Spec.Servers = []gatewayv1alpha1.UpstreamServer{{Endpoint: broken.URL()}}
		uc.Spec.HealthCheck = faultProbes
		createCluster(t, uc)
		waitUsable(t, uc.Name)
		for i := range 3 {
			warnings := &warningCollector{}
			cfg := env.HubConfig(harness.UserAdmin)
			cfg.WarningHandler = warnings
			c := kubernetes.NewForConfigOrDie(cfg)
			var code int
			body, err := c.CoreV1().RESTClient().Get().AbsPath(fanOutPath("*") + "/api/v1/namespaces/" + rnd + "/configmaps").MaxRetries(0).Do(ctx).StatusCode(&code).Raw()
			if err != nil {
				t.Logf("list %d: %d %v", i, code, err) // broken off, or a Status while none of it was sent
				continue
			}
			var list corev1.ConfigMapList
			if err := json.Unmarshal(body, &list); err != nil {
				t.Fatalf("list %d: %v", i, err)
			}
			perCluster := map[string]int{}
			for _, cm := range list.Items {
				perCluster[cm.Annotations["gateway.kubewharf.io/cluster"]]++
			}
			if perCluster[uc.Name] != 0 || perCluster[harness.MemberA] != items || !hasWarningAbout(warnings.get(), uc.Name) {
				t.Fatalf("list %d without an error: items per cluster %v (want member-a's %d only), warnings %q (want one about %s)", i, perCluster, items, warnings.get(), uc.Name)
			}
		}
	})

	t.Run("a member that cannot answer", func(t *testing.T) {
		port, err := harness.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		closed := "fanout-closed-" + utilrand.String(5)
		createCluster(t, newCluster(closed, "https://127.0.0.1:"+strconv.Itoa(port)))
		out, stderr, err := env.Kubectl(ctx, fanOutKubeconfig(t, harness.UserAdmin), "get", "configmaps", "-n", ns)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "cm-member-a") || !strings.Contains(out, "cm-member-b") {
			t.Errorf("the other members' items are missing:\n%s", out)
		}
		if !strings.Contains(stderr, `upstream cluster "`+closed+`"`) {
			t.Errorf("kubectl printed no warning about %s:\n%s", closed, stderr)
		}
		body, code, _ := fanOutGet(ctx, t, harness.UserAdmin, fanOutPath("*")+configMaps, map[string]string{"gateway.kubewharf.io/strict": "true"})
		var status metav1.Status
		_ = json.Unmarshal(body, &status)
		if code != http.StatusServiceUnavailable || !strings.Contains(status.Message, closed) {
			t.Errorf("strict list with %s unreachable: %d %q, want 503 naming it", closed, code, status.Message)
		}
	})
}

// A dynamic informer whose Host is the hub plus a fan-out prefix sees both
// members' ConfigMaps (annotated with their cluster), their updates and
// deletes, and goes on seeing new objects of both when a member-a replica
// dies; kubectl get --watch through a fan-out kubeconfig prints an event of
// each member; kubectl get --chunk-size=1 pages through both members.
func TestFanOutWatch(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	ns := "fanwatch-" + utilrand.String(5)
	members := map[string]*kubernetes.Clientset{}
	for _, m := range []string{harness.MemberA, harness.MemberB} {
		// Replica 0 of member-a (the informer step makes its own clients while it kills replicas).
		cs := kubernetes.NewForConfigOrDie(env.Members[m].Config(harness.UserAdmin, 0))
		members[m] = cs
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	}
	create := func(t *testing.T, m, name string) {
		t.Helper()
		if _, err := members[m].CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A selector of member-a and member-b only: other tests' UpstreamClusters
	// (e.g. more names for member-a) stay out.
	key := "fanout-watch-" + ns
	ucs := upstreamClusters(t)
	for _, m := range []string{harness.MemberA, harness.MemberB} {
		if _, err := ucs.Patch(ctx, m, types.MergePatchType, []byte(`{"metadata":{"labels":{"`+key+`":"yes"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = ucs.Patch(context.Background(), m, types.MergePatchType, []byte(`{"metadata":{"labels":{"`+key+`":null}}}`), metav1.PatchOptions{})
		})
	}
	segment := key + "=yes"
	create(t, harness.MemberA, "seed-a")
	create(t, harness.MemberA, "seed-a2")
	create(t, harness.MemberB, "seed-b")
	configMaps := fanOutPath(segment) + "/api/v1/namespaces/" + ns + "/configmaps"
	eventually(t, 30*time.Second, func(context.Context) error {
		body, code, _ := fanOutGet(ctx, t, harness.UserAdmin, configMaps, nil)
		if code != http.StatusOK {
			return errorf("%d: %s", code, body)
		}
		if got := fanOutClusters(t, body); len(got) != 3 {
			return errorf("the selector lists %v, want seed-a, seed-a2 and seed-b", got)
		}
		return nil
	})
	kubeconfig := fanOutKubeconfigFor(t, harness.UserAdmin, segment)

	t.Run("kubectl get --chunk-size=1", func(t *testing.T) {
		out, _, err := env.Kubectl(ctx, kubeconfig, "get", "configmaps", "-n", ns, "--chunk-size=1", "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]int{"seed-a": 1, "seed-a2": 1, "seed-b": 1} {
			if got := strings.Count(out, "configmap/"+name+"\n"); got != want {
				t.Errorf("paged list has %s %d times, want %d:\n%s", name, got, want, out)
			}
		}
	})

	t.Run("kubectl get --watch", func(t *testing.T) {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		lines, stderr := kubectlLines(wctx, t, kubeconfig, "get", "configmaps", "-A", "--watch")
		// The list comes first: seed-a's row says the watch follows.
		want := map[string]string{"seed-a": harness.MemberA}
		created := false
		var seen []string
		for len(want) > 0 {
			l, ok := <-lines
			if !ok {
				t.Fatalf("kubectl ended before printing %v (stderr %s):\n%s", want, stderr.String(), strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			f := strings.Fields(l)
			for name, cluster := range want {
				if slices.Contains(f, name) && slices.Contains(f, cluster) {
					delete(want, name)
				}
			}
			if len(want) == 0 && !created {
				created = true
				create(t, harness.MemberA, "kw-a")
				create(t, harness.MemberB, "kw-b")
				want = map[string]string{"kw-a": harness.MemberA, "kw-b": harness.MemberB}
			}
		}
	})

	t.Run("resume from a bookmark", func(t *testing.T) {
		// A watch that asks for bookmarks gets objects with their own
		// resourceVersions and bookmarks with the composite; a watch from
		// the last bookmark resumes both members where the first ended.
		cfg := env.HubConfig(harness.UserAdmin)
		cfg.Host = strings.TrimSuffix(cfg.Host, "/") + fanOutPath(segment)
		cms := dynamic.NewForConfigOrDie(cfg).Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(ns)
		list, err := cms.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// watch collects the events of a watch of timeout seconds from rv,
		// creating name on member-a once the watch is open.
		watch := func(rv string, name string) (added []string, bookmark string) {
			t.Helper()
			timeout := int64(3)
			w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			if name != "" {
				create(t, harness.MemberA, name)
			}
			for ev := range w.ResultChan() {
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					t.Fatalf("event %s of %T", ev.Type, ev.Object)
				}
				switch ev.Type {
				case "ADDED":
					added = append(added, u.GetName())
					if err := bothMembers(u.GetResourceVersion()); err == nil {
						t.Errorf("%s came with the composite resourceVersion, want its own", u.GetName())
					}
				case "BOOKMARK":
					bookmark = u.GetResourceVersion()
				}
			}
			return added, bookmark
		}
		added, mark := watch(list.GetResourceVersion(), "resume-1")
		if !slices.Contains(added, "resume-1") || mark == "" {
			t.Fatalf("first watch: ADDED %v, last bookmark %q; want resume-1 and a bookmark", added, mark)
		}
		if err := bothMembers(mark); err != nil {
			t.Fatalf("bookmark: %v", err)
		}
		create(t, harness.MemberB, "resume-2") // while no watch is open
		added, _ = watch(mark, "")
		if !slices.Contains(added, "resume-2") || slices.Contains(added, "resume-1") || slices.Contains(added, "seed-a") {
			t.Errorf("watch from the bookmark: ADDED %v, want resume-2 only", added)
		}
	})

	t.Run("dynamic informer", func(t *testing.T) {
		cfg := env.HubConfig(harness.UserAdmin)
		cfg.Host = strings.TrimSuffix(cfg.Host, "/") + fanOutPath(segment)
		factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dynamic.NewForConfigOrDie(cfg), 0, ns, nil)
		informer := factory.ForResource(corev1.SchemeGroupVersion.WithResource("configmaps")).Informer()
		var mu sync.Mutex
		deleted := map[string]bool{}
		if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				mu.Lock()
				deleted[u.GetName()] = true
				mu.Unlock()
			}
		}}); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		factory.Start(stop)
		defer func() {
			close(stop)
			factory.Shutdown() // waits for the informer to stop
		}()
		if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			t.Fatal("the informer never synced")
		}
		// has waits until the informer holds name with the cluster annotation
		// and, if set, data value v.
		has := func(t *testing.T, name, cluster, v string) {
			t.Helper()
			eventually(t, time.Minute, func(context.Context) error {
				obj, ok, _ := informer.GetStore().GetByKey(ns + "/" + name)
				if !ok {
					return errorf("the informer has no %s", name)
				}
				u := obj.(*unstructured.Unstructured)
				if got := u.GetAnnotations()["gateway.kubewharf.io/cluster"]; got != cluster {
					return errorf("%s has cluster annotation %q, want %q", name, got, cluster)
				}
				if got, _, _ := unstructured.NestedString(u.Object, "data", "v"); got != v {
					return errorf("%s has data v=%q, want %q", name, got, v)
				}
				return nil
			})
		}
		has(t, "seed-a", harness.MemberA, "")
		has(t, "seed-b", harness.MemberB, "")
		create(t, harness.MemberA, "inf-a")
		create(t, harness.MemberB, "inf-b")
		has(t, "inf-a", harness.MemberA, "")
		has(t, "inf-b", harness.MemberB, "")

		patch := []byte(`{"data":{"v":"2"}}`)
		if _, err := members[harness.MemberA].CoreV1().ConfigMaps(ns).Patch(ctx, "inf-a", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		has(t, "inf-a", harness.MemberA, "2")
		// The informer asks for bookmarks: its objects keep their member's
		// resourceVersion, and it resumes from the composite of a bookmark.
		eventually(t, time.Minute, func(ctx context.Context) error {
			cm, err := members[harness.MemberA].CoreV1().ConfigMaps(ns).Get(ctx, "inf-a", metav1.GetOptions{})
			if err != nil {
				return err
			}
			obj, _, _ := informer.GetStore().GetByKey(ns + "/inf-a")
			if got := obj.(*unstructured.Unstructured).GetResourceVersion(); got != cm.ResourceVersion {
				return errorf("inf-a has resourceVersion %q in the informer, %q on member-a", got, cm.ResourceVersion)
			}
			return bothMembers(informer.LastSyncResourceVersion())
		})
		if err := members[harness.MemberB].CoreV1().ConfigMaps(ns).Delete(ctx, "inf-b", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if _, ok, _ := informer.GetStore().GetByKey(ns + "/inf-b"); ok || !deleted["inf-b"] {
				return errorf("inf-b still in the informer (delete seen: %v)", deleted["inf-b"])
			}
			return nil
		})

		// A crash of each member-a replica in turn: the member's watch is on
		// one of them, so one crash ends it, and the gateway re-opens it on
		// the other replica.
		replicas := env.Members[harness.MemberA].Servers
		for i, victim := range []int{1, 0} {
			if err := replicas[victim].Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			restarted := false
			t.Cleanup(func() {
				if !restarted {
					_ = replicas[victim].Process.Restart(context.Background())
				}
			})
			alive := kubernetes.NewForConfigOrDie(env.Members[harness.MemberA].Config(harness.UserAdmin, 1-victim))
			name := fmt.Sprintf("after-kill-%d", i)
			if _, err := alive.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-a"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			create(t, harness.MemberB, name+"-b")
			has(t, name+"-a", harness.MemberA, "")
			has(t, name+"-b", harness.MemberB, "")
			if err := replicas[victim].Process.Restart(ctx); err != nil {
				t.Fatalf("restarting member-a replica %d: %v", victim, err)
			}
			restarted = true
		}
	})
}
