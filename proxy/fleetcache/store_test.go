package fleetcache

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

func configMap(ns, name, rv, data string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"namespace": ns, "name": name, "resourceVersion": rv, "labels": map[string]any{"app": name}},
		"data":     map[string]any{"k": data},
	}}
}

// sizeOf is what the store counts for obj.
func sizeOf(t *testing.T, obj *unstructured.Unstructured) int64 {
	t.Helper()
	o, _, err := toObject(obj.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	return o.size()
}

func TestStoreKeepsJSONAndCounts(t *testing.T) {
	mem := NewMemory(0)
	s := NewStore(mem, nil)
	a, b := configMap("ns", "a", "1", "x"), configMap("ns", "b", "2", "y")
	if err := s.Replace([]any{a, b}, "5"); err != nil {
		t.Fatal(err)
	}
	objects, bytes, rv := s.Counts()
	if objects != 2 || rv != "5" || bytes != sizeOf(t, a)+sizeOf(t, b) || mem.Used() != bytes {
		t.Fatalf("after Replace: %d objects, %d bytes (memory %d), rv %q", objects, bytes, mem.Used(), rv)
	}
	got := s.Get("ns", "a")
	var decoded map[string]any
	if err := json.Unmarshal(got.JSON, &decoded); err != nil || decoded["data"].(map[string]any)["k"] != "x" {
		t.Fatalf("JSON kept: %s (%v)", got.JSON, err)
	}
	if got.Labels["app"] != "a" || got.ResourceVersion != "1" || got.Namespace != "ns" || got.Name != "a" {
		t.Fatalf("filter fields: %+v", got)
	}

	bigger := configMap("ns", "a", "6", "a much longer value than before")
	if err := s.Update(bigger); err != nil {
		t.Fatal(err)
	}
	c := configMap("ns", "c", "7", "z")
	if err := s.Add(c); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(cache.DeletedFinalStateUnknown{Key: "ns/b", Obj: b}); err != nil {
		t.Fatal(err)
	}
	s.UpdateResourceVersion("9") // a bookmark
	objects, bytes, rv = s.Counts()
	// The history keeps a's state before the update and the deleted b, as
	// the store held it and as the deletion told it.
	history := sizeOf(t, a) + 2*sizeOf(t, b)
	if want := sizeOf(t, bigger) + sizeOf(t, c); objects != 2 || bytes != want || mem.Used() != want+history || rv != "9" {
		t.Fatalf("after update, add, delete: %d objects, %d bytes (memory %d, want %d and %d of history), rv %q", objects, bytes, mem.Used(), want, history, rv)
	}
	if s.Get("ns", "b") != nil {
		t.Fatal("deleted object still there")
	}

	if err := s.Replace([]any{c}, "10"); err != nil {
		t.Fatal(err)
	}
	history += sizeOf(t, bigger) // deleted by the Replace
	if objects, bytes, _ := s.Counts(); objects != 1 || bytes != sizeOf(t, c) || mem.Used() != bytes+history {
		t.Fatalf("after a smaller Replace: %d objects, %d bytes, memory %d", objects, bytes, mem.Used())
	}
	s.Drop()
	if objects, bytes, _ := s.Counts(); objects != 0 || bytes != 0 || mem.Used() != 0 {
		t.Fatalf("after Drop: %d objects, %d bytes, memory %d", objects, bytes, mem.Used())
	}
}

// A store that would pass the memory bound drops its objects, refuses what
// follows and says so once; the other stores keep theirs.
func TestStoreMemoryLimit(t *testing.T) {
	a, b := configMap("ns", "a", "1", "x"), configMap("ns", "b", "2", "y")
	mem := NewMemory(sizeOf(t, a) + sizeOf(t, b) + sizeOf(t, a)/2)
	other := NewStore(mem, nil)
	if err := other.Add(a); err != nil {
		t.Fatal(err)
	}
	over := make(chan struct{}, 2)
	s := NewStore(mem, func() { over <- struct{}{} })
	if err := s.Add(b); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(configMap("ns", "c", "3", "z")); !errors.Is(err, ErrMemoryLimit) {
		t.Fatalf("Add past the bound: %v", err)
	}
	<-over
	if objects, bytes, _ := s.Counts(); objects != 0 || bytes != 0 {
		t.Fatalf("store past the bound holds %d objects, %d bytes", objects, bytes)
	}
	if mem.Used() != sizeOf(t, a) {
		t.Fatalf("memory used %d, want the other store's %d", mem.Used(), sizeOf(t, a))
	}
	if err := s.Replace(nil, "4"); !errors.Is(err, ErrMemoryLimit) {
		t.Fatalf("Replace after the bound: %v", err)
	}
	if len(over) != 0 {
		t.Fatal("told twice")
	}
	// A Replace that would pass the bound is refused as a whole.
	s2 := NewStore(mem, func() {})
	if err := s2.Replace([]any{a, b, configMap("ns", "c", "3", "z")}, "5"); !errors.Is(err, ErrMemoryLimit) {
		t.Fatalf("Replace past the bound: %v", err)
	}
	if mem.Used() != sizeOf(t, a) {
		t.Fatalf("memory used %d after a refused Replace", mem.Used())
	}
}

// The history's old states count against the bound and give way to objects:
// updates past the bound trim the history, never the objects.
func TestStoreHistoryGivesWayToObjects(t *testing.T) {
	a := configMap("ns", "a", "1", "x")
	mem := NewMemory(3*sizeOf(t, a) + sizeOf(t, a)/2)
	over := make(chan struct{}, 1)
	s := NewStore(mem, func() { over <- struct{}{} })
	if err := s.Replace([]any{a}, "1"); err != nil {
		t.Fatal(err)
	}
	for i := 2; i < 10; i++ {
		if err := s.Update(configMap("ns", "a", fmt.Sprint(i), "x")); err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
		if mem.Used() > mem.Limit() {
			t.Fatalf("memory %d past the bound %d", mem.Used(), mem.Limit())
		}
	}
	// Two more objects take the history's room.
	for _, name := range []string{"b", "c"} {
		if err := s.Add(configMap("ns", name, "20", "x")); err != nil {
			t.Fatalf("add %s: %v", name, err)
		}
	}
	if len(over) != 0 {
		t.Fatal("the store dropped its objects for its history")
	}
	if _, _, _, ok := s.Watch("2"); ok {
		t.Error("a watch from a change the history let go was accepted")
	}
	if _, w, _, ok := s.Watch("9"); !ok {
		t.Error("a watch from the store's last update refused")
	} else if ev := next(t, w); ev.Object.Name != "b" {
		t.Errorf("replay from 9: %+v, want b ADDED", ev)
	}
	s.Drop()
	if mem.Used() != 0 {
		t.Errorf("memory %d after Drop", mem.Used())
	}
}

// BenchmarkStoreMemory measures what a cached object costs on the heap
// against what the store counts for it (heap-B/obj vs counted-B/obj), for
// ConfigMaps of about 1 KiB of JSON with a few labels and their Table cells.
func BenchmarkStoreMemory(b *testing.B) {
	const n = 20000
	value := strings.Repeat("x", 900)
	list := make([]any, 0, n)
	for i := range n {
		cm := configMap("namespace-1", fmt.Sprintf("configmap-%06d", i), strconv.Itoa(1000+i), value)
		cm.SetLabels(map[string]string{"app": "bench", "tier": "backend", "index": strconv.Itoa(i)})
		list = append(list, cm)
	}
	var jsonBytes int64
	for _, o := range list {
		raw, _ := o.(*unstructured.Unstructured).MarshalJSON()
		jsonBytes += int64(len(raw))
	}
	b.ResetTimer()
	for range b.N {
		// With the cells of a member's Table (the store takes them out of
		// the objects).
		filled := make([]any, len(list))
		for i, o := range list {
			cm := o.(*unstructured.Unstructured).DeepCopy()
			cm.Object[cellsField] = []any{cm.GetName(), int64(1), "5m"}
			filled[i] = cm
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := NewStore(NewMemory(0), nil)
		if err := s.Replace(filled, "1"); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		_, counted, _ := s.Counts()
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/obj")
		b.ReportMetric(float64(counted)/n, "counted-B/obj")
		b.ReportMetric(float64(jsonBytes)/n, "json-B/obj")
		runtime.KeepAlive(s)
		runtime.KeepAlive(filled)
	}
}
