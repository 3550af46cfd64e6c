package fleetcache

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/watch"
)

// next returns the next event of w, failing when none waits.
func next(t *testing.T, w *Watcher) Event {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		if !ok {
			t.Fatal("the watcher ended")
		}
		return ev
	default:
		t.Fatal("no event")
	}
	return Event{}
}

func noEvent(t *testing.T, w *Watcher) {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		t.Fatalf("unexpected event %+v (open %v)", ev, ok)
	default:
	}
}

// A watch from "" gets every object and then the changes; a watch from a
// resourceVersion gets the changes after it, from the history.
func TestStoreWatch(t *testing.T) {
	s := NewStore(NewMemory(0), nil)
	if err := s.Replace([]any{configMap("ns", "a", "10", "x")}, "10"); err != nil {
		t.Fatal(err)
	}
	objects, all, rv, ok := s.Watch("")
	if !ok || len(objects) != 1 || objects[0].Name != "a" || rv != "10" {
		t.Fatalf("Watch(\"\"): %v objects, rv %q, ok %v", len(objects), rv, ok)
	}
	_, from10, _, ok := s.Watch("10")
	if !ok {
		t.Fatal("Watch(10) at the store's resourceVersion refused")
	}
	if err := s.Add(configMap("ns", "b", "11", "y")); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(configMap("ns", "a", "12", "z")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(configMap("ns", "b", "13", "y")); err != nil {
		t.Fatal(err)
	}
	s.UpdateResourceVersion("14")
	for _, w := range []*Watcher{all, from10} {
		if ev := next(t, w); ev.Type != watch.Added || ev.Object.Name != "b" || ev.ResourceVersion != "11" {
			t.Errorf("first event %+v, want b ADDED at 11", ev)
		}
		if ev := next(t, w); ev.Type != watch.Modified || ev.Object.ResourceVersion != "12" || ev.Prev.ResourceVersion != "10" {
			t.Errorf("second event %+v, want a MODIFIED 10 -> 12", ev)
		}
		if ev := next(t, w); ev.Type != watch.Deleted || ev.Object.Name != "b" || ev.ResourceVersion != "13" {
			t.Errorf("third event %+v, want b DELETED at 13", ev)
		}
		if ev := next(t, w); ev.Type != watch.Bookmark || ev.ResourceVersion != "14" {
			t.Errorf("fourth event %+v, want a bookmark at 14", ev)
		}
		noEvent(t, w)
	}

	// From the history: what came after 11, without the bookmark.
	_, replay, _, ok := s.Watch("11")
	if !ok {
		t.Fatal("Watch(11) refused")
	}
	if ev := next(t, replay); ev.Type != watch.Modified || ev.ResourceVersion != "12" {
		t.Errorf("replay from 11: %+v, want MODIFIED at 12", ev)
	}
	if ev := next(t, replay); ev.Type != watch.Deleted {
		t.Errorf("replay from 11: %+v, want DELETED", ev)
	}
	noEvent(t, replay)

	// Not from the store: older than its first list, not a number.
	for _, from := range []string{"9", "abc"} {
		if _, _, _, ok := s.Watch(from); ok {
			t.Errorf("Watch(%q) accepted", from)
		}
	}
}

// A watch from a resourceVersion the store has not reached (the member's,
// from a list it answered) is told the changes after it, none before.
func TestStoreWatchAhead(t *testing.T) {
	s := NewStore(NewMemory(0), nil)
	if err := s.Replace([]any{configMap("ns", "a", "10", "x")}, "10"); err != nil {
		t.Fatal(err)
	}
	_, w, _, ok := s.Watch("15")
	if !ok {
		t.Fatal("Watch(15) of a store at 10 refused")
	}
	// The changes up to 15 are the client's already.
	if err := s.Add(configMap("ns", "b", "12", "y")); err != nil {
		t.Fatal(err)
	}
	s.UpdateResourceVersion("15")
	noEvent(t, w)
	if err := s.Update(configMap("ns", "a", "16", "z")); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(configMap("ns", "c", "17", "z")); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w); ev.Type != watch.Modified || ev.ResourceVersion != "16" {
		t.Errorf("first event %+v, want a MODIFIED at 16", ev)
	}
	if ev := next(t, w); ev.Type != watch.Added || ev.ResourceVersion != "17" {
		t.Errorf("second event %+v, want c ADDED at 17", ev)
	}
	noEvent(t, w)
}

// The history is bounded: a watch from before it is refused (the member
// answers it instead).
func TestStoreHistoryIsBounded(t *testing.T) {
	s := NewStore(NewMemory(0), nil)
	if err := s.Replace(nil, "100"); err != nil {
		t.Fatal(err)
	}
	for i := range historySize + 10 {
		if err := s.Add(configMap("ns", fmt.Sprint(i), fmt.Sprint(101+i), "x")); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, _, ok := s.Watch("100"); ok {
		t.Error("Watch from before the history accepted")
	}
	if _, w, _, ok := s.Watch(fmt.Sprint(100 + 10 + 5)); !ok {
		t.Error("Watch from within the history refused")
	} else if ev := next(t, w); ev.ResourceVersion != fmt.Sprint(100+10+6) {
		t.Errorf("first replayed event at %s, want %d", ev.ResourceVersion, 100+10+6)
	}
}

// A list again (after the member's watch broke off) tells watchers what
// changed in between; dropping the store ends them; a watcher that does not
// read is ended instead of holding events without bound.
func TestStoreRelistDropAndSlowWatchers(t *testing.T) {
	s := NewStore(NewMemory(0), nil)
	if err := s.Replace([]any{configMap("ns", "a", "1", "x"), configMap("ns", "b", "2", "x"), configMap("ns", "c", "3", "x")}, "3"); err != nil {
		t.Fatal(err)
	}
	_, w, _, _ := s.Watch("3")
	if err := s.Replace([]any{configMap("ns", "a", "1", "x"), configMap("ns", "b", "8", "changed"), configMap("ns", "d", "9", "new")}, "10"); err != nil {
		t.Fatal(err)
	}
	got := map[string]watch.EventType{}
	for range 3 {
		ev := next(t, w)
		if ev.ResourceVersion != "10" {
			t.Errorf("relist event %+v not at the list's resourceVersion", ev)
		}
		got[ev.Object.Name] = ev.Type
	}
	noEvent(t, w)
	if got["b"] != watch.Modified || got["c"] != watch.Deleted || got["d"] != watch.Added {
		t.Errorf("relist events %v, want b MODIFIED, c DELETED, d ADDED", got)
	}

	_, slow, _, _ := s.Watch("10")
	for i := range watcherBuffer + 1 {
		if err := s.Add(configMap("other", fmt.Sprint(i), fmt.Sprint(11+i), "x")); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for range slow.Events() {
		n++
	}
	if n != watcherBuffer {
		t.Errorf("slow watcher got %d events before it ended, want %d", n, watcherBuffer)
	}

	_, w2, _, _ := s.Watch("")
	s.Drop()
	for range w2.Events() {
	}
	if _, _, _, ok := s.Watch(""); ok {
		t.Error("a dropped store accepted a watch")
	}
}
