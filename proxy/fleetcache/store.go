package fleetcache

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

// Object is one cached object: its JSON as the member served it, and what
// reads filter on.
type Object struct {
	Namespace, Name, ResourceVersion string
	Labels                           map[string]string
	JSON                             []byte
}

// objectOverhead and labelOverhead approximate what an Object costs beside
// its strings and JSON (the struct, its key and map entry, the labels map),
// so that the counted bytes match the heap (BenchmarkStoreMemory,
// docs/benchmark.md).
const (
	objectOverhead = 320
	labelOverhead  = 48
)

// size is about how much memory o takes.
func (o *Object) size() int64 {
	n := objectOverhead + len(o.Namespace) + len(o.Name) + len(o.ResourceVersion) + len(o.JSON)
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
}

// NewStore returns an empty store drawing on memory.
func NewStore(memory *Memory, overLimit func()) *Store {
	return &Store{memory: memory, overLimit: overLimit, objects: map[string]*Object{}}
}

var _ cache.ReflectorStore = &Store{}
var _ cache.ResourceVersionUpdater = &Store{}

// toObject encodes what the reflector hands over.
func toObject(obj any) (*Object, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("fleet cache: unexpected object %T", obj)
	}
	raw, err := u.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return &Object{Namespace: u.GetNamespace(), Name: u.GetName(), ResourceVersion: u.GetResourceVersion(),
		Labels: u.GetLabels(), JSON: raw}, nil
}

func key(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// Add puts obj in the store.
func (s *Store) Add(obj any) error { return s.put(obj) }

// Update replaces obj in the store.
func (s *Store) Update(obj any) error { return s.put(obj) }

func (s *Store) put(obj any) error {
	o, err := toObject(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.full {
		return ErrMemoryLimit
	}
	k := key(o.Namespace, o.Name)
	delta := o.size()
	if old := s.objects[k]; old != nil {
		delta -= old.size()
	}
	if !s.memory.take(delta) {
		return s.overflowLocked()
	}
	s.objects[k] = o
	s.bytes += delta
	s.rv = o.ResourceVersion
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
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(m.GetNamespace(), m.GetName())
	if old := s.objects[k]; old != nil {
		delete(s.objects, k)
		s.bytes -= old.size()
		s.memory.take(-old.size())
	}
	if rv := m.GetResourceVersion(); rv != "" {
		s.rv = rv
	}
	return nil
}

// Replace swaps the store's content for list, the answer of a complete list
// at resourceVersion.
func (s *Store) Replace(list []any, resourceVersion string) error {
	objects := make(map[string]*Object, len(list))
	var bytes int64
	for _, obj := range list {
		o, err := toObject(obj)
		if err != nil {
			return err
		}
		k := key(o.Namespace, o.Name)
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
	if !s.memory.take(bytes - s.bytes) {
		return s.overflowLocked()
	}
	s.objects, s.bytes, s.rv = objects, bytes, resourceVersion
	return nil
}

// Resync does nothing: the store has no consumer to replay to.
func (s *Store) Resync() error { return nil }

// UpdateResourceVersion records the resourceVersion the reflector reached,
// bookmarks included.
func (s *Store) UpdateResourceVersion(rv string) {
	s.mu.Lock()
	s.rv = rv
	s.mu.Unlock()
}

// overflowLocked drops every object and refuses changes from now on.
func (s *Store) overflowLocked() error {
	s.dropLocked()
	s.full = true
	if s.overLimit != nil {
		go s.overLimit() // not under the lock: it stops the reflector
	}
	return ErrMemoryLimit
}

func (s *Store) dropLocked() {
	s.memory.take(-s.bytes)
	s.objects, s.bytes = map[string]*Object{}, 0
}

// Drop frees every object; the store refuses changes from now on. Call it
// once the reflector is stopped.
func (s *Store) Drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked()
	s.full = true
}

// Counts are how many objects the store holds, about how many bytes, and
// the resourceVersion it reached.
func (s *Store) Counts() (objects, bytes int64, resourceVersion string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return int64(len(s.objects)), s.bytes, s.rv
}

// Get returns the object namespace/name, nil when the store has none.
func (s *Store) Get(namespace, name string) *Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.objects[key(namespace, name)]
}

// List calls fn for every object, under the store's read lock. Objects are
// never changed once stored: fn may keep them, and must not change them.
func (s *Store) List(fn func(*Object)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, o := range s.objects {
		fn(o)
	}
}
