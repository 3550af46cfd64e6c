package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kubewharf/kube-gateway/apis/client/clientset/versioned"
	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// keptLabel selects the UpstreamClusters of TestUnchangedObjectsAreWrittenFromKeptJSON.
const keptLabel = "e2e-kept"

// LISTs and WATCHes of UpstreamClusters through the hub write the objects
// unchanged since an earlier response from the JSON kept then, byte for
// byte. A dry-run update answers with the stored object's UID and
// resourceVersion but other content: what later LISTs and WATCHes write is
// still the stored object.
func TestUnchangedObjectsAreWrittenFromKeptJSON(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	const n = 3
	for i := range n {
		// A disabled server: one status write, no probes that change it later.
		uc := newCluster(fmt.Sprintf("kept-%d", i), "https://127.0.0.1:1")
		uc.Spec.Servers[0].Disabled = true
		uc.Labels = map[string]string{keptLabel: "yes", "color": "blue"}
		createCluster(t, uc)
	}
	c, err := versioned.NewForConfig(env.HubConfig(harness.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	rest := c.GatewayV1alpha1().RESTClient()
	read := func() (list, watched map[string][]byte) {
		t.Helper()
		body, err := rest.Get().Resource("upstreamclusters").Param("labelSelector", keptLabel+"=yes").
			SetHeader("Accept", "application/json").DoRaw(ctx)
		if err != nil {
			t.Fatalf("LIST: %v", err)
		}
		var l struct{ Items []json.RawMessage }
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatalf("LIST: %v: %s", err, body)
		}
		list = byName(t, l.Items)

		// A watch from no resourceVersion starts with an ADDED event of
		// every object: the initial events the kept JSON serves.
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := rest.Get().Resource("upstreamclusters").Param("watch", "true").Param("labelSelector", keptLabel+"=yes").
			SetHeader("Accept", "application/json").Stream(wctx)
		if err != nil {
			t.Fatalf("WATCH: %v", err)
		}
		defer stream.Close()
		dec := json.NewDecoder(stream)
		var objects []json.RawMessage
		for len(objects) < n {
			var e struct {
				Type   string
				Object json.RawMessage
			}
			if err := dec.Decode(&e); err != nil {
				t.Fatalf("WATCH after %d events: %v", len(objects), err)
			}
			if e.Type != "ADDED" {
				t.Fatalf("WATCH: a %s event among the initial events", e.Type)
			}
			objects = append(objects, e.Object)
		}
		return list, byName(t, objects)
	}

	// The status writer's one write lands after the create: read until
	// two reads in a row find the same versions, the second from kept JSON.
	var list, watched map[string][]byte
	eventually(t, time.Minute, func(context.Context) error {
		encodings := objectEncodings(t)
		l, w := read()
		delta := objectEncodings(t).minus(encodings)
		same := list != nil && sameBytes(list, l) && sameBytes(watched, w)
		list, watched = l, w
		if !same {
			return errorf("the objects changed between two reads")
		}
		// Other tests do not run meanwhile: every object came from the cache.
		if delta.listKept < n || delta.watchKept < n {
			return errorf("%.0f list items and %.0f watch events of %d unchanged objects kept: %+v", delta.listKept, delta.watchKept, n, delta)
		}
		return nil
	})

	// A dry-run update: its answer has the new label, the stored object not.
	uc, err := upstreamClusters(t).Get(ctx, "kept-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uc.Labels["color"] = "red"
	answer, err := upstreamClusters(t).Update(ctx, uc, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	if answer.Labels["color"] != "red" {
		t.Fatalf("the dry-run update answered labels %v", answer.Labels)
	}
	t.Logf("stored resourceVersion %s, dry-run answer's %s", uc.ResourceVersion, answer.ResourceVersion)
	l, w := read()
	for name, read := range map[string]struct{ before, after map[string][]byte }{"LIST": {list, l}, "WATCH": {watched, w}} {
		if !sameBytes(read.before, read.after) {
			t.Errorf("%s after a dry-run update wrote other bytes than before it:\n%s\n%s", name, read.before["kept-0"], read.after["kept-0"])
		}
		got := read.after
		var stored gatewayv1alpha1.UpstreamCluster
		if err := json.Unmarshal(got["kept-0"], &stored); err != nil {
			t.Fatal(err)
		}
		if stored.Labels["color"] != "blue" {
			t.Errorf("%s after a dry-run update shows labels %v, want the stored color=blue", name, stored.Labels)
		}
	}
}

// byName indexes the JSON of UpstreamClusters by name.
func byName(t *testing.T, objects []json.RawMessage) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, o := range objects {
		var m metav1.PartialObjectMetadata
		if err := json.Unmarshal(o, &m); err != nil {
			t.Fatalf("%v: %s", err, o)
		}
		out[m.Name] = bytes.Clone(o)
	}
	return out
}

func sameBytes(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// encodingCounts are the gateway's kube_gateway_object_encodings_total.
type encodingCounts struct{ listKept, listEncoded, watchKept, watchEncoded float64 }

func (a encodingCounts) minus(b encodingCounts) encodingCounts {
	return encodingCounts{a.listKept - b.listKept, a.listEncoded - b.listEncoded, a.watchKept - b.watchKept, a.watchEncoded - b.watchEncoded}
}

func objectEncodings(t *testing.T) encodingCounts {
	t.Helper()
	get := func(response, result string) float64 {
		return gatewayCounter(t, "kube_gateway_object_encodings_total", map[string]string{"response": response, "result": result})
	}
	return encodingCounts{get("list", "kept"), get("list", "encoded"), get("watch", "kept"), get("watch", "encoded")}
}

// A watch from no resourceVersion, or from "0", starts with an ADDED event
// of every object it selects and goes on with what changes after them:
// nothing between the two missed, nothing sent twice. A watch-list request
// (sendInitialEvents, bookmarks allowed: client-go's reflectors) also gets the
// bookmark that marks the end of the initial events, before any change.
func TestWatchFromNoResourceVersionStartsWithTheState(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	const label = "e2e-watch-state"
	for i, color := range []string{"red", "red", "blue"} {
		// A disabled server: one status write, no probes that change it later.
		uc := newCluster(fmt.Sprintf("watch-state-%d", i), "https://127.0.0.1:1")
		uc.Spec.Servers[0].Disabled = true
		uc.Labels = map[string]string{label: color}
		createCluster(t, uc)
	}
	ucs := upstreamClusters(t)
	yes := true
	for round, opts := range []metav1.ListOptions{
		{ResourceVersion: ""},
		{ResourceVersion: "0"},
		{SendInitialEvents: &yes, AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan},
	} {
		opts.LabelSelector = label + "=red"
		name := fmt.Sprintf("watch from %q, sendInitialEvents %v", opts.ResourceVersion, opts.SendInitialEvents != nil)
		w, err := ucs.Watch(ctx, opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		next := func() (watch.EventType, *gatewayv1alpha1.UpstreamCluster) {
			t.Helper()
			for {
				select {
				case ev, ok := <-w.ResultChan():
					if !ok {
						t.Fatalf("%s: the watch ended", name)
					}
					uc, ok := ev.Object.(*gatewayv1alpha1.UpstreamCluster)
					if !ok {
						t.Fatalf("%s: a %s event of %T: %v", name, ev.Type, ev.Object, ev.Object)
					}
					if ev.Type == watch.Bookmark && uc.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
						continue // a periodic bookmark
					}
					return ev.Type, uc
				case <-ctx.Done():
					t.Fatalf("%s: %v", name, ctx.Err())
				}
			}
		}
		added := map[string]bool{}
		for len(added) < 2 {
			typ, uc := next()
			if typ != watch.Added || added[uc.Name] || uc.Labels[label] != "red" {
				t.Fatalf("%s: initial event %s of %s (labels %v), want an ADDED event of each red cluster", name, typ, uc.Name, uc.Labels)
			}
			added[uc.Name] = true
		}
		if opts.AllowWatchBookmarks {
			if typ, uc := next(); typ != watch.Bookmark || uc.ResourceVersion == "" {
				t.Fatalf("%s: %s event of %q (resourceVersion %q) after the initial events, want the bookmark that ends them", name, typ, uc.Name, uc.ResourceVersion)
			}
		}
		// A change after the initial events arrives, and no initial event
		// again before it (status writes may come in between).
		touched := fmt.Sprint(round)
		patch := []byte(`{"metadata":{"annotations":{"e2e-touched":"` + touched + `"}}}`)
		if _, err := ucs.Patch(ctx, "watch-state-0", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		for {
			typ, uc := next()
			if typ != watch.Modified {
				t.Fatalf("%s: %s event of %s after the initial events, want MODIFIED", name, typ, uc.Name)
			}
			if uc.Name == "watch-state-0" && uc.Annotations["e2e-touched"] == touched {
				break
			}
		}
		w.Stop()
	}
}
