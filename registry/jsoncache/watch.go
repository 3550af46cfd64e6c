package jsoncache

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// eventBuffer is how many events a watch passed through Watch holds for its
// reader. The API server's watch handler flushes whenever its channel is
// empty; a buffer lets it batch writes as it does on the watch cache's own
// channel (watch.Filter's channel is unbuffered, which is why this is not
// watch.Filter).
const eventBuffer = 100

// Watch returns the events initial, then those of w, with their objects
// wrapped so that the API server's watch encoder writes each event from the
// cache: the objects that carry a UID and resourceVersion and are not shared
// already. Events the watch cache dispatches are shared (one encoding for
// all watchers, a runtime.CacheableObject of its own) and pass as they are;
// the initial events of a watch are what the cache is for. A watch's objects
// and a LIST's are always stored versions, never a dry run's, so a UID and
// resourceVersion name their content. The encoder only reads the objects:
// initial may share what the watch cache holds, as a LIST's items do.
func (c *Cache) Watch(initial []watch.Event, w watch.Interface) watch.Interface {
	k := &keptWatch{initial: initial, in: w, out: make(chan watch.Event, eventBuffer), stop: make(chan struct{})}
	go k.run(c)
	return k
}

type keptWatch struct {
	initial  []watch.Event // sent first; each let go once sent
	in       watch.Interface
	out      chan watch.Event
	stop     chan struct{}
	stopOnce sync.Once
}

func (k *keptWatch) run(c *Cache) {
	defer close(k.out)
	for i, ev := range k.initial {
		k.initial[i] = watch.Event{}
		ev.Object = c.keep(ev.Object)
		select {
		case k.out <- ev:
		case <-k.stop:
			return
		}
	}
	in := k.in.ResultChan()
	for {
		var ev watch.Event
		var ok bool
		select {
		case ev, ok = <-in:
			if !ok {
				return
			}
		case <-k.stop:
			return
		}
		ev.Object = c.keep(ev.Object)
		select {
		case k.out <- ev:
		case <-k.stop:
			return
		}
	}
}

func (k *keptWatch) ResultChan() <-chan watch.Event { return k.out }

func (k *keptWatch) Stop() {
	k.stopOnce.Do(func() {
		close(k.stop)
		k.in.Stop()
	})
}

// keep wraps obj for the cache, or returns it as it is.
func (c *Cache) keep(obj runtime.Object) runtime.Object {
	if _, ok := obj.(runtime.CacheableObject); ok || obj == nil {
		return obj
	}
	m, err := meta.Accessor(obj)
	if err != nil || m.GetUID() == "" || m.GetResourceVersion() == "" {
		return obj // a Status, a bookmark
	}
	key := itemKey{uid: m.GetUID(), resourceVersion: m.GetResourceVersion()}
	if tm, ok := obj.GetObjectKind().(*metav1.TypeMeta); ok {
		key.typeMeta = *tm
	}
	return &keptObject{Object: obj, objectMeta: m, cache: c, key: key}
}

// objectMeta names the embedded metav1.Object of keptObject, beside its
// runtime.Object.
type objectMeta = metav1.Object

// keptObject is an object of one watch event that the watch encoder writes
// through the cache. It is the event's alone, as the watch cache's initial
// events are, so encoding it needs no copy.
type keptObject struct {
	runtime.Object
	objectMeta
	cache *Cache
	key   itemKey
}

var _ runtime.CacheableObject = &keptObject{}

// GetObject implements runtime.CacheableObject.
func (o *keptObject) GetObject() runtime.Object { return o.Object }

// CacheEncode implements runtime.CacheableObject. id names the whole event's
// encoding: its type, the outer encoder, and the encoder of its object.
func (o *keptObject) CacheEncode(id runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error {
	encoding, ok := o.cache.eventEncoding(id)
	if !ok {
		return encode(o.Object, w)
	}
	key := o.key
	key.encoding = encoding
	if b, ok := o.cache.events.get(key); ok {
		_, err := w.Write(b)
		return err
	}
	var buf bytes.Buffer
	if err := encode(o.Object, &buf); err != nil {
		return err
	}
	o.cache.events.put(key, buf.Bytes())
	_, err := w.Write(buf.Bytes())
	return err
}

// eventEncoding returns the number the cache knows the event encoding id by,
// and whether events so encoded are kept: only those of the API server's
// watch encoder whose object encoder converts nothing. A Table holds
// relative times, so the same version is not the same bytes later.
func (c *Cache) eventEncoding(id runtime.Identifier) (int32, bool) {
	v, ok := c.eventEncodings.Load(id)
	if !ok {
		// The identifier k8s.io/apiserver's watchEncoder gives an event.
		var event struct {
			Name            string             `json:"name"`
			EmbeddedEncoder runtime.Identifier `json:"embeddedEncoder"`
		}
		n := int32(-1)
		if json.Unmarshal([]byte(id), &event) == nil && event.Name == "watch" && event.EmbeddedEncoder == c.plainEncoder {
			n = c.lastEncoding.Add(1)
		}
		v, _ = c.eventEncodings.LoadOrStore(id, n)
	}
	n := v.(int32)
	return n, n > 0
}
