package jsoncache

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// wrapLists returns ns with its application/json serializer replaced by one
// that writes lists whose apiVersion is apiVersion from items. Every other
// object, media type and direction is ns's own.
func wrapLists(ns runtime.NegotiatedSerializer, apiVersion string, items *itemCache) runtime.NegotiatedSerializer {
	infos := append([]runtime.SerializerInfo(nil), ns.SupportedMediaTypes()...)
	for i := range infos {
		if infos[i].MediaType == runtime.ContentTypeJSON {
			infos[i].Serializer = &Serializer{Serializer: infos[i].Serializer, apiVersion: apiVersion, items: items}
		}
	}
	return negotiated{NegotiatedSerializer: ns, infos: infos}
}

type negotiated struct {
	runtime.NegotiatedSerializer
	infos []runtime.SerializerInfo
}

func (n negotiated) SupportedMediaTypes() []runtime.SerializerInfo { return n.infos }

// Serializer is a JSON serializer that writes lists of one apiVersion from
// its item cache and hands everything else to the serializer it wraps,
// apimachinery's (with or without streaming collections: both write lists
// alike). Its lists are byte for byte what apimachinery's streaming JSON list
// encoder writes, so it keeps the inner serializer's Identifier.
type Serializer struct {
	// The JSON serializer it wraps: decoding, Identifier, every other object.
	runtime.Serializer
	apiVersion string
	items      *itemCache
}

// Encode implements runtime.Encoder.
func (s *Serializer) Encode(obj runtime.Object, w io.Writer) error {
	l, ok := s.listParts(obj)
	if !ok {
		return s.Serializer.Encode(obj, w)
	}
	bw := bufio.NewWriterSize(w, 32<<10)
	if err := s.encodeList(l, bw); err != nil {
		return err
	}
	return bw.Flush()
}

// list is what a typed list is written from.
type list struct {
	typeMeta metav1.TypeMeta
	listMeta *metav1.ListMeta
	items    reflect.Value // a slice of structs whose pointers are runtime.Objects
}

var (
	typeMetaType = reflect.TypeFor[metav1.TypeMeta]()
	listMetaType = reflect.TypeFor[metav1.ListMeta]()
	objectType   = reflect.TypeFor[runtime.Object]()
	metaType     = reflect.TypeFor[metav1.Object]()
)

// listParts takes obj apart if it is a typed list of this serializer's
// apiVersion shaped as the streaming encoder expects (TypeMeta inline,
// ListMeta as "metadata,omitempty", items as "items") with items whose
// pointers carry object metadata.
func (s *Serializer) listParts(obj runtime.Object) (list, bool) {
	if _, ok := obj.(json.Marshaler); ok {
		return list{}, false // written as it marshals itself
	}
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return list{}, false
	}
	v = v.Elem()
	t := v.Type()
	if t.NumField() != 3 {
		return list{}, false
	}
	f0, f1, f2 := t.Field(0), t.Field(1), t.Field(2)
	if f0.Type != typeMetaType || !f0.Anonymous || (f0.Tag.Get("json") != "" && f0.Tag.Get("json") != ",inline") ||
		f1.Type != listMetaType || f1.Tag.Get("json") != "metadata,omitempty" ||
		f2.Type.Kind() != reflect.Slice || f2.Type.Elem().Kind() != reflect.Struct || f2.Tag.Get("json") != "items" {
		return list{}, false
	}
	if elem := reflect.PointerTo(f2.Type.Elem()); !elem.Implements(objectType) || !elem.Implements(metaType) {
		return list{}, false
	}
	tm := v.Field(0).Interface().(metav1.TypeMeta)
	if tm.APIVersion != s.apiVersion {
		return list{}, false
	}
	return list{typeMeta: tm, listMeta: v.Field(1).Addr().Interface().(*metav1.ListMeta), items: v.Field(2)}, true
}

// encodeList writes l as apimachinery's streaming list encoder does:
// {"kind":…,"apiVersion":…,"metadata":…,"items":[…]} and a newline.
func (s *Serializer) encodeList(l list, w *bufio.Writer) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	value := func(v any) error {
		buf.Reset()
		if err := enc.Encode(v); err != nil {
			return err
		}
		// Encode ends the value with a newline.
		_, err := w.Write(buf.Bytes()[:buf.Len()-1])
		return err
	}
	w.WriteByte('{')
	if l.typeMeta.Kind != "" {
		w.WriteString(`"kind":`)
		if err := value(l.typeMeta.Kind); err != nil {
			return err
		}
		w.WriteByte(',')
	}
	if l.typeMeta.APIVersion != "" {
		w.WriteString(`"apiVersion":`)
		if err := value(l.typeMeta.APIVersion); err != nil {
			return err
		}
		w.WriteByte(',')
	}
	w.WriteString(`"metadata":`)
	if err := value(l.listMeta); err != nil {
		return err
	}
	w.WriteString(`,"items":`)
	if l.items.IsNil() {
		w.WriteString("null")
	} else {
		w.WriteByte('[')
		for i := range l.items.Len() {
			if i > 0 {
				w.WriteByte(',')
			}
			item := l.items.Index(i).Addr().Interface()
			b, err := s.item(item.(runtime.Object), item.(metav1.Object), &buf, enc)
			if err != nil {
				return err
			}
			// Stop at a failed write (the client went away).
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		w.WriteByte(']')
	}
	_, err := w.WriteString("}\n")
	return err
}

// item returns obj's JSON, from the cache when it holds obj's UID and
// resourceVersion; buf and enc are the list's scratch encoder.
func (s *Serializer) item(obj runtime.Object, m metav1.Object, buf *bytes.Buffer, enc *json.Encoder) ([]byte, error) {
	key := itemKey{uid: m.GetUID(), resourceVersion: m.GetResourceVersion()}
	if tm, ok := obj.GetObjectKind().(*metav1.TypeMeta); ok {
		key.typeMeta = *tm
	} else {
		key.typeMeta.SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
	}
	cacheable := key.uid != "" && key.resourceVersion != ""
	if cacheable {
		if b, ok := s.items.get(key); ok {
			return b, nil
		}
	}
	buf.Reset()
	if err := enc.Encode(obj); err != nil {
		return nil, err
	}
	b := buf.Bytes()[:buf.Len()-1]
	if !cacheable {
		return b, nil
	}
	b = bytes.Clone(b)
	s.items.put(key, b)
	return b, nil
}
