package fleetcache

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/go-json-experiment/json/jsontext"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// The caches are filled with Tables that hold the objects
// (includeObject=Object): each object comes with the cells the member's
// printers gave it when it changed, so that kubectl get --watch, which asks
// for Tables, can be answered from the cache as the member would. A member
// that answers no Table (a server without them) fills the cache with plain
// objects; Table reads then go to it.

// The fields that carry a row's cells and a Table's columns inside the
// objects the reflector hands the store (toObject takes them out): no
// member's JSON object has a key that begins with NUL.
const (
	cellsField   = "\x00cells"
	columnsField = "\x00columns"
)

// listFromTable turns a member's list answer, a Table or (from a server
// without Tables) a list, into the list the reflector expects: the rows'
// objects, each with its cells, and the columns on the list.
func listFromTable(raw []byte) (runtime.Object, error) {
	obj, err := runtime.Decode(unstructured.UnstructuredJSONScheme, raw)
	if err != nil {
		return nil, err
	}
	if l, ok := obj.(*unstructured.UnstructuredList); ok {
		return l, nil
	}
	t, ok := obj.(*unstructured.Unstructured)
	if !ok || t.GetKind() != "Table" {
		return nil, fmt.Errorf("fleet cache: the member answered a list with %T %s", obj, t.GetKind())
	}
	rows, _, _ := unstructured.NestedSlice(t.Object, "rows")
	l := &unstructured.UnstructuredList{Object: map[string]any{}, Items: make([]unstructured.Unstructured, 0, len(rows))}
	for _, r := range rows {
		o, ok := rowObject(r)
		if !ok {
			return nil, fmt.Errorf("fleet cache: a Table row without its object")
		}
		l.Items = append(l.Items, unstructured.Unstructured{Object: o})
	}
	l.SetResourceVersion(t.GetResourceVersion())
	l.SetContinue(t.GetContinue())
	l.SetRemainingItemCount(t.GetRemainingItemCount())
	if cols, ok := t.Object["columnDefinitions"]; ok {
		l.Object[columnsField] = cols
	}
	return l, nil
}

// rowObject is the object of a Table row with the row's cells in it.
func rowObject(r any) (map[string]any, bool) {
	row, _ := r.(map[string]any)
	o, _ := row["object"].(map[string]any)
	if o == nil {
		return nil, false
	}
	o[cellsField] = row["cells"]
	return o, true
}

// eventFromTable turns a watch event whose object is a Table (one row) into
// the event of the row's object, with its cells, and the Table's columns
// when it has them (the first event of a watch). A bookmark's row holds the
// bookmark's metadata (PartialObjectMetadata), which is all a bookmark is.
func eventFromTable(ev watch.Event) (watch.Event, bool) {
	t, ok := ev.Object.(*unstructured.Unstructured)
	if !ok || t.GetKind() != "Table" || ev.Type == watch.Error {
		return ev, true
	}
	rows, _, _ := unstructured.NestedSlice(t.Object, "rows")
	if len(rows) != 1 {
		return ev, false // not a change of one object: no Table event is
	}
	o, ok := rowObject(rows[0])
	if !ok {
		return ev, false
	}
	if cols, ok := t.Object["columnDefinitions"].([]any); ok && len(cols) > 0 {
		o[columnsField] = cols
	}
	if ev.Type == watch.Bookmark {
		delete(o, cellsField)
	}
	return watch.Event{Type: ev.Type, Object: &unstructured.Unstructured{Object: o}}, true
}

// takeTableFields takes the cells and columns out of u, as JSON (nil when
// absent).
func takeTableFields(u map[string]any) (cells, columns []byte, err error) {
	if c, ok := u[cellsField]; ok {
		delete(u, cellsField)
		if cells, err = json.Marshal(c); err != nil {
			return nil, nil, err
		}
	}
	if c, ok := u[columnsField]; ok {
		delete(u, columnsField)
		if columns, err = json.Marshal(c); err != nil {
			return nil, nil, err
		}
	}
	return cells, columns, nil
}

// tableEvent appends the object of a Table watch event for o to b: one row
// with o's cells and o as includeObject asks, and the columns when given
// (the first event of a watch, as a member sends them).
func tableEvent(b []byte, o *Object, columns []byte, includeObject metav1.IncludeObjectPolicy) []byte {
	b = append(b, `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":`...)
	b, _ = jsontext.AppendQuote(b, o.ResourceVersion)
	b = append(b, `},"columnDefinitions":`...)
	if columns == nil {
		columns = []byte("null")
	}
	b = append(b, columns...)
	b = append(b, `,"rows":[{"cells":`...)
	b = append(b, o.cells...)
	b = append(b, `,"object":`...)
	switch includeObject {
	case metav1.IncludeObject:
		b = append(b, o.JSON...)
	case metav1.IncludeNone:
		b = append(b, "null"...)
	default: // Metadata, as when unset
		b = append(b, `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":`...)
		b = append(b, metadataOf(o.JSON)...)
		b = append(b, '}')
	}
	return append(b, "}]}"...)
}

// metadataOf is the raw metadata of the JSON object obj, {} when it has
// none.
func metadataOf(obj []byte) []byte {
	dec := jsontext.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return []byte("{}")
	}
	for dec.PeekKind() == '"' {
		name, err := dec.ReadToken()
		if err != nil {
			break
		}
		if name.String() == "metadata" {
			if v, err := dec.ReadValue(); err == nil {
				return v
			}
			break
		}
		if dec.SkipValue() != nil {
			break
		}
	}
	return []byte("{}")
}
