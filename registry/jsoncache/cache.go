// Package jsoncache writes the gateway's own objects from the JSON kept since
// they were last written: a LIST writes each unchanged item's kept JSON, a
// WATCH each initial event's. A version of an object is named by its UID and
// resourceVersion: storage keeps objects whole under a resourceVersion, so the
// same pair in the same encoding is the same bytes.
//
// Encoding is most of what a LIST or a WATCH of UpstreamClusters costs the
// gateway: their managed fields and timestamps marshal themselves, and
// encoding/json re-compacts what they produce (docs/benchmark.md, "10,000
// clusters"). What the cache writes is byte for byte what the API server
// writes without it.
package jsoncache

import (
	"fmt"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Cache keeps the JSON of one group version's objects for its LISTs and
// WATCHes: serve the group with NegotiatedSerializer and pass the storage's
// watches through Watch.
type Cache struct {
	serializer runtime.NegotiatedSerializer
	// plainEncoder is the identifier of the encoder a watch writes its
	// objects with when it converts none (to a Table, say).
	plainEncoder runtime.Identifier
	lists        *itemCache
	events       *itemCache
	// Encodings of watch events seen, runtime.Identifier to int32: a number
	// above 0 for those kept, -1 for the others. They are few: event types
	// times media types times conversions.
	eventEncodings sync.Map
	lastEncoding   atomic.Int32
}

// New returns a cache for gv's objects served with ns, keeping at most
// maxBytes of JSON for LISTs and as much again for WATCHes.
func New(ns runtime.NegotiatedSerializer, gv schema.GroupVersion, maxBytes int64) (*Cache, error) {
	c := &Cache{lists: newItemCache(maxBytes), events: newItemCache(maxBytes)}
	c.serializer = wrapLists(ns, gv.String(), c.lists)
	info, ok := runtime.SerializerInfoForMediaType(c.serializer.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		return nil, fmt.Errorf("no %s serializer to keep the JSON of", runtime.ContentTypeJSON)
	}
	// What the API server's watch handler builds for a watch that converts
	// nothing (k8s.io/apiserver endpoints/handlers, serveWatchHandler).
	c.plainEncoder = c.serializer.EncoderForVersion(info.Serializer, gv).Identifier()
	return c, nil
}

// NegotiatedSerializer is the group's serializer with LISTs from the cache.
func (c *Cache) NegotiatedSerializer() runtime.NegotiatedSerializer { return c.serializer }

// Writes counts objects written since the start, from the cache (Kept) or
// encoded and then kept (Encoded). Objects the cache cannot keep (without a
// UID or resourceVersion, or converted to a Table) are not counted.
type Writes struct {
	ListKept, ListEncoded, WatchKept, WatchEncoded uint64
}

// Writes returns the counts so far.
func (c *Cache) Writes() Writes {
	return Writes{
		ListKept: c.lists.hits.Load(), ListEncoded: c.lists.misses.Load(),
		WatchKept: c.events.hits.Load(), WatchEncoded: c.events.misses.Load(),
	}
}

// itemKey names one version of one object as it is written: its UID and
// resourceVersion, and how it is written. A list item's own kind and
// apiVersion are in its JSON (empty for items read from storage); a watch
// event's encoding is the number the cache gave its encoder's identifier.
type itemKey struct {
	uid             types.UID
	resourceVersion string
	typeMeta        metav1.TypeMeta
	encoding        int32
}

// itemCache keeps objects' JSON in two generations: entries are added to the
// current one, which becomes the previous one when it would pass half the
// bound; an entry found in the previous generation moves to the current.
// Objects every response writes stay; versions none writes any more (updated
// or deleted objects) are dropped within two turns.
type itemCache struct {
	mu           sync.Mutex
	generation   int64 // bytes per generation
	current      map[itemKey][]byte
	currentBytes int64
	previous     map[itemKey][]byte

	hits, misses atomic.Uint64
}

func newItemCache(maxBytes int64) *itemCache {
	return &itemCache{generation: maxBytes / 2, current: map[itemKey][]byte{}}
}

// entryOverhead is a rough cost of a map entry beside its bytes and strings.
const entryOverhead = 96

func entrySize(k itemKey, b []byte) int64 {
	return int64(len(b)+len(k.uid)+len(k.resourceVersion)+len(k.typeMeta.Kind)+len(k.typeMeta.APIVersion)) + entryOverhead
}

// get returns k's bytes, counting a hit or a miss: a miss is followed by put.
func (c *itemCache) get(k itemKey) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.current[k]
	if !ok {
		if b, ok = c.previous[k]; ok {
			c.addLocked(k, b)
		}
	}
	if ok {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	return b, ok
}

// put keeps b, which the cache owns from now on, under k.
func (c *itemCache) put(k itemKey, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addLocked(k, b)
}

func (c *itemCache) addLocked(k itemKey, b []byte) {
	if _, ok := c.current[k]; ok {
		return
	}
	size := entrySize(k, b)
	if size > c.generation {
		return
	}
	if c.currentBytes+size > c.generation {
		c.previous = c.current
		c.current = make(map[itemKey][]byte, len(c.previous))
		c.currentBytes = 0
	}
	c.current[k] = b
	c.currentBytes += size
}
