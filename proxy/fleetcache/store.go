package fleetcache

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Object is one cached object: its JSON as the member served it, and what
// reads filter on.
type Object struct {
	Namespace, Name, ResourceVersion string
	Labels                           map[string]string
	JSON                             []byte
	// cells are the member's Table cells of the object (JSON), nil when it
	// answered no Table.
	cells []byte
	kind  string // not counted: a constant string
	// key is namespace/name, the store's key and the lists' order; counted
	// by objectOverhead: it shares its bytes with the store's map key.
	key string
}

// objectOverhead and labelOverhead approximate what an Object costs beside
// its strings and JSON (the struct, its key and map entry, the labels map),
// so that the counted bytes match the heap (BenchmarkStoreMemory,
// docs/benchmark.md).
const (
	objectOverhead = 360
	labelOverhead  = 48
)

// size is about how much memory o takes.
func (o *Object) size() int64 {
	n := objectOverhead + len(o.Namespace) + len(o.Name) + len(o.ResourceVersion) + len(o.JSON) + len(o.cells)
	for k, v := range o.Labels {
		n += len(k) + len(v) + labelOverhead
	}
	return int64(n)
}

// DefaultMemory is the default of --fleet-cache-memory.
const DefaultMemory = "1Gi"

// Memory bounds the bytes that every cache together holds. It is safe for
// concurrent use.
type Memory struct {
	limit int64 // <= 0: no bound
	used  atomic.Int64
}

// NewMemory returns a bound of limit bytes; 0 or less: no bound.
func NewMemory(limit int64) *Memory { return &Memory{limit: limit} }

// Used is how many bytes the caches hold.
func (m *Memory) Used() int64 { return m.used.Load() }

// Limit is the bound, 0 or less for none.
func (m *Memory) Limit() int64 { return m.limit }

// take reserves delta bytes (a negative delta frees them); false, and nothing
// taken, when a growth would pass the limit.
func (m *Memory) take(delta int64) bool {
	for {
		used := m.used.Load()
		if delta > 0 && m.limit > 0 && used+delta > m.limit {
			return false
		}
		if m.used.CompareAndSwap(used, used+delta) {
			return true
		}
	}
}

// ErrMemoryLimit is returned by a Store whose growth would pass its Memory.
var ErrMemoryLimit = errors.New("the caches would pass --fleet-cache-memory")

// Store is the cache of one resource of one member, filled by a Reflector
// (it is its cache.ReflectorStore). Objects are kept as JSON, not as decoded
// maps: a decoded object costs several times its JSON.
type Store struct {
	memory *Memory
	// overLimit is called, once, when a change would pass memory; the store
	// has then dropped its objects and refuses every change.
	overLimit func()

	mu      sync.RWMutex
	objects map[string]*Object
	bytes   int64
	rv      string
	full    bool // the bound was hit: the store holds nothing more
	// needed is what the store would have held when it hit the bound.
	needed int64
	// listKind is the kind of the member's lists (e.g. ConfigMapList),
	// kind that of its objects (ConfigMap).
	listKind, kind string
	// columns are the member's Table columns (JSON), nil while it sent
	// none.
	columns []byte
	// history holds the last changes, complete after historyFrom (the
	// resourceVersion of the first list, or of the last change let go);
	// watchers are told every change.
	history      []Event
	historyFrom  string
	historyBytes int64 // of objects only the history holds
	watchers     map[*Watcher]struct{}
}

// NewStore returns an empty store drawing on memory.
func NewStore(memory *Memory, overLimit func()) *Store {
	return &Store{memory: memory, overLimit: overLimit, objects: map[string]*Object{}}
}

var _ cache.ReflectorStore = &Store{}
var _ cache.ResourceVersionUpdater = &Store{}

// toObject encodes what the reflector hands over; columns are the Table
// columns it carried (tables.go).
func toObject(obj any) (o *Object, columns []byte, err error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil, fmt.Errorf("fleet cache: unexpected object %T", obj)
	}
	cells, columns, err := takeTableFields(u.Object)
	if err != nil {
		return nil, nil, err
	}
	raw, err := u.MarshalJSON()
	if err != nil {
		return nil, nil, err
	}
	// The encoder ends the object with a newline: not part of it, and the
	// end of an event in a watch stream.
	raw = bytes.TrimRight(raw, "\n")
	return &Object{Namespace: u.GetNamespace(), Name: u.GetName(), ResourceVersion: u.GetResourceVersion(),
		Labels: u.GetLabels(), JSON: raw, cells: cells, kind: u.GetKind(), key: key(u.GetNamespace(), u.GetName())}, columns, nil
}

func key(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// Add puts obj in the store.
func (s *Store) Add(obj any) error { return s.put(obj, watch.Added) }

// Update replaces obj in the store.
func (s *Store) Update(obj any) error { return s.put(obj, watch.Modified) }

func (s *Store) put(obj any, kind watch.EventType) error {
	o, columns, err := toObject(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.full {
		return ErrMemoryLimit
	}
	s.setColumnsLocked(columns)
	k := o.key
	delta := o.size()
	old := s.objects[k]
	if old != nil {
		delta -= old.size()
	}
	if !s.takeLocked(delta) {
		return s.overflowLocked(s.bytes + delta)
	}
	s.objects[k] = o
	s.bytes += delta
	s.rv = o.ResourceVersion
	s.kind = o.kind
	s.publishLocked(Event{Type: kind, Object: o, Prev: old, ResourceVersion: o.ResourceVersion})
	return nil
}

// Delete removes obj (or a cache.DeletedFinalStateUnknown) from the store.
func (s *Store) Delete(obj any) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	// Watchers are told the object as the member's event had it (its final
	// state, at the deletion's resourceVersion), as a member's watch tells
	// them; encoded before the lock, as put does.
	final, _, finalErr := toObject(obj)
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(m.GetNamespace(), m.GetName())
	if rv := m.GetResourceVersion(); rv != "" {
		s.rv = rv
	}
	if old := s.objects[k]; old != nil {
		delete(s.objects, k)
		s.bytes -= old.size()
		s.memory.take(-old.size())
		switch {
		case finalErr != nil:
			final = old
		case final.cells == nil:
			final.cells = old.cells
		}
		s.publishLocked(Event{Type: watch.Deleted, Object: final, Prev: old, ResourceVersion: s.rv})
	}
	return nil
}

// Replace swaps the store's content for list, the answer of a complete list
// at resourceVersion.
func (s *Store) Replace(list []any, resourceVersion string) error {
	objects := make(map[string]*Object, len(list))
	var bytes int64
	var columns []byte
	for _, obj := range list {
		o, cols, err := toObject(obj)
		if err != nil {
			return err
		}
		if cols != nil {
			columns = cols
		}
		k := o.key
		if old := objects[k]; old != nil {
			bytes -= old.size()
		}
		objects[k] = o
		bytes += o.size()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.full {
		return ErrMemoryLimit
	}
	if !s.takeLocked(bytes - s.bytes) {
		return s.overflowLocked(bytes)
	}
	old := s.objects
	s.objects, s.bytes, s.rv = objects, bytes, resourceVersion
	s.setColumnsLocked(columns)
	for _, o := range objects {
		s.kind = o.kind
		break
	}
	if s.historyFrom == "" {
		s.historyFrom = resourceVersion // the first list: nothing to tell
		return nil
	}
	// A list again (the member's watch could not go on): watchers learn
	// what changed in between as changes at the list's resourceVersion.
	for k, o := range objects {
		switch prev := old[k]; {
		case prev == nil:
			s.publishLocked(Event{Type: watch.Added, Object: o, ResourceVersion: resourceVersion})
		case prev.ResourceVersion != o.ResourceVersion:
			s.publishLocked(Event{Type: watch.Modified, Object: o, Prev: prev, ResourceVersion: resourceVersion})
		}
	}
	for k, prev := range old {
		if objects[k] == nil {
			s.publishLocked(Event{Type: watch.Deleted, Object: prev, Prev: prev, ResourceVersion: resourceVersion})
		}
	}
	return nil
}

// Resync does nothing: the store has no consumer to replay to.
func (s *Store) Resync() error { return nil }

// UpdateResourceVersion records the resourceVersion the reflector reached,
// bookmarks included.
func (s *Store) UpdateResourceVersion(rv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv = rv
	s.publishLocked(Event{Type: watch.Bookmark, ResourceVersion: rv})
}

// overflowLocked drops every object and refuses changes from now on; needed
// is what the store would have held.
func (s *Store) overflowLocked(needed int64) error {
	s.dropLocked()
	s.full, s.needed = true, needed
	if s.overLimit != nil {
		go s.overLimit() // not under the lock: it stops the reflector
	}
	return ErrMemoryLimit
}

func (s *Store) dropLocked() {
	s.memory.take(-s.bytes)
	s.objects, s.bytes = map[string]*Object{}, 0
	s.endAllLocked()
}

// Drop frees every object; the store refuses changes from now on. Call it
// once the reflector is stopped.
func (s *Store) Drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked()
	s.full = true
}

// Needed is how many bytes the store would have held when it hit the
// Memory bound; 0 while it did not.
func (s *Store) Needed() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.needed
}

// Counts are how many objects the store holds, about how many bytes, and
// the resourceVersion it reached.
func (s *Store) Counts() (objects, bytes int64, resourceVersion string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return int64(len(s.objects)), s.bytes, s.rv
}

// ResourceVersion is the resourceVersion the store reached.
func (s *Store) ResourceVersion() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rv
}

// Get returns the object namespace/name, nil when the store has none.
func (s *Store) Get(namespace, name string) *Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.objects[key(namespace, name)]
}

// List calls fn for every object, under the store's read lock, and returns
// the resourceVersion they are at. Objects are never changed once stored:
// fn may keep them, and must not change them.
func (s *Store) List(fn func(*Object)) (resourceVersion string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, o := range s.objects {
		fn(o)
	}
	return s.rv
}

// SetListKind records the kind of the member's lists, which the objects do
// not say (ConfigMapList for ConfigMaps), when the reflector lists (not
// when it watches with initial events).
func (s *Store) SetListKind(kind string) {
	s.mu.Lock()
	s.listKind = kind
	s.mu.Unlock()
}

// SetColumns records the member's Table columns (JSON) of a list.
func (s *Store) SetColumns(columns []byte) {
	s.mu.Lock()
	s.setColumnsLocked(columns)
	s.mu.Unlock()
}

func (s *Store) setColumnsLocked(columns []byte) {
	if columns != nil {
		s.columns = columns
	}
}

// Columns are the member's Table columns (JSON), nil when it answered no
// Table.
func (s *Store) Columns() []byte {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.columns
}

// Kinds are the kind of the member's objects and of its lists; "" while the
// store has seen no object. The list kind is the one the member's list said,
// else the objects' with "List", as Kubernetes names lists.
func (s *Store) Kinds() (kind, listKind string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.kind == "" {
		return "", ""
	}
	if s.listKind != "" {
		return s.kind, s.listKind
	}
	return s.kind, s.kind + "List"
}
