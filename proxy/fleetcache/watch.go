package fleetcache

import (
	"strconv"

	"k8s.io/apimachinery/pkg/watch"
)

// Event is one change of a Store, as a watch of the member reported it (or as
// a relist found it).
type Event struct {
	Type watch.EventType
	// Object is the object after the change; for Deleted, the last state the
	// store held. Prev is the state before a Modified or Deleted change, for
	// watches with selectors. Neither is set for a Bookmark.
	Object, Prev    *Object
	ResourceVersion string
}

// historySize is how many events a Store keeps for watches that start from a
// resourceVersion behind its own (a client's watch after its list, a merged
// watch reopened): as kube-apiserver's watch cache, an older start is
// answered by the member itself. The objects only the history holds (the
// states before changes) count against the Memory bound, and the history
// gives way to the objects when the bound is reached.
const historySize = 256

// retained is what ev keeps alive that the store no longer holds: the state
// before a change or a deletion, and a deleted object's final state.
func retained(ev Event) int64 {
	var n int64
	if ev.Prev != nil {
		n = ev.Prev.size()
	}
	if ev.Type == watch.Deleted && ev.Object != ev.Prev {
		n += ev.Object.size()
	}
	return n
}

// forgetOldestLocked lets the oldest change of the history go.
func (s *Store) forgetOldestLocked() {
	old := s.history[0]
	s.historyFrom = old.ResourceVersion
	s.memory.take(-retained(old))
	s.historyBytes -= retained(old)
	s.history[0] = Event{}
	s.history = s.history[1:]
}

// takeLocked reserves delta bytes for objects, letting the history go as far
// as needed; false when even without history they would pass the bound.
func (s *Store) takeLocked(delta int64) bool {
	for !s.memory.take(delta) {
		if len(s.history) == 0 {
			return false
		}
		s.forgetOldestLocked()
	}
	return true
}

// watcherBuffer is how many events a Watcher holds for a client that reads
// slower than the member changes; past it, the Watcher ends (the client
// watches again from its last resourceVersion), as kube-apiserver ends a slow
// watcher rather than holding events for it without bound.
const watcherBuffer = 256

// Watcher receives a Store's events until the store ends it (a slow reader,
// the cache dropped) or Stop.
type Watcher struct {
	s      *Store
	events chan Event
	// after, while not 0, is a resourceVersion the store had not reached
	// when the watch began (the member's, from a list it answered itself):
	// the changes up to it are not the watcher's, its client has them.
	after uint64
}

// Events are the store's changes, in order; closed when the watcher ends.
func (w *Watcher) Events() <-chan Event { return w.events }

// Stop ends the watcher.
func (w *Watcher) Stop() {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.endLocked(w)
}

func (s *Store) endLocked(w *Watcher) {
	if _, ok := s.watchers[w]; ok {
		delete(s.watchers, w)
		close(w.events)
	}
}

// publishLocked records ev in the history and hands it to every watcher.
func (s *Store) publishLocked(ev Event) {
	if ev.Type != watch.Bookmark {
		s.recordLocked(ev)
	}
	var rv uint64
	for w := range s.watchers {
		if w.after != 0 {
			if rv == 0 {
				rv, _ = strconv.ParseUint(ev.ResourceVersion, 10, 64)
			}
			if rv <= w.after {
				continue
			}
			w.after = 0
		}
		select {
		case w.events <- ev:
		default:
			s.endLocked(w) // a slow reader: it watches again
		}
	}
}

// recordLocked adds ev to the history, within historySize and the Memory
// bound; when the bound leaves no room for it, the history starts after it.
func (s *Store) recordLocked(ev Event) {
	cost := retained(ev)
	for len(s.history) >= historySize || (cost > 0 && !s.memory.take(cost)) {
		if len(s.history) == 0 {
			s.historyFrom = ev.ResourceVersion
			return
		}
		s.forgetOldestLocked()
	}
	if len(s.history) == cap(s.history) && len(s.history) > 0 {
		s.history = append(make([]Event, 0, historySize), s.history...) // let the slice's freed front go
	}
	s.history = append(s.history, ev)
	s.historyBytes += cost
}

// endAllLocked ends every watcher and forgets the history: the store's
// objects were dropped.
func (s *Store) endAllLocked() {
	for w := range s.watchers {
		s.endLocked(w)
	}
	s.memory.take(-s.historyBytes)
	s.history, s.historyFrom, s.historyBytes = nil, "", 0
}

// Watch follows the store. With from "" it returns every object the store
// holds and a Watcher of the changes after them, atomically. Otherwise it
// returns a Watcher that first replays the changes after resourceVersion
// from, or, when the store has not reached from yet, one that is told the
// changes after from once the store gets them: the changes of a member come
// in resourceVersion order, so none after from is missed. ok is false when
// from is not one the store can start from (older than its history, or not
// a number), and the caller asks the member instead; the caller makes sure
// that a from the store has not reached is one the member has.
func (s *Store) Watch(from string) (objects []*Object, w *Watcher, resourceVersion string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.full {
		return nil, nil, "", false
	}
	var replay []Event
	var after uint64
	if from != "" {
		n, err := strconv.ParseUint(from, 10, 64)
		if err != nil || !Reached(from, s.historyFrom) {
			return nil, nil, "", false
		}
		if !Reached(s.rv, from) {
			after = n
		}
		for _, ev := range s.history {
			if v, _ := strconv.ParseUint(ev.ResourceVersion, 10, 64); v > n {
				replay = append(replay, ev)
			}
		}
	} else {
		objects = make([]*Object, 0, len(s.objects))
		for _, o := range s.objects {
			objects = append(objects, o)
		}
	}
	if len(replay) > watcherBuffer {
		return nil, nil, "", false
	}
	w = &Watcher{s: s, events: make(chan Event, watcherBuffer), after: after}
	for _, ev := range replay {
		w.events <- ev
	}
	if s.watchers == nil {
		s.watchers = map[*Watcher]struct{}{}
	}
	s.watchers[w] = struct{}{}
	return objects, w, s.rv, true
}

// Reached tells whether resourceVersion rv is at or past want, both
// kube-apiserver's (decimal numbers); false when either is not.
func Reached(rv, want string) bool {
	a, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return false
	}
	b, err := strconv.ParseUint(want, 10, 64)
	return err == nil && a >= b
}
