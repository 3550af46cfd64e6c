package fanout

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/go-json-experiment/json/jsontext"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The bytes of a merged watch's events: a member's event read, its object
// annotated with its cluster and given the composite resourceVersion, Tables
// for kubectl get --watch.

// bookmarkObject is the object of a bookmark of the merged watch, with the
// initial-events-end annotation when initialEnd.
func bookmarkObject(kind, apiVersion string, initialEnd bool) jsontext.Value {
	obj := map[string]any{"kind": kind, "apiVersion": apiVersion, "metadata": map[string]any{}}
	if initialEnd {
		obj["metadata"] = map[string]any{"annotations": map[string]string{metav1.InitialEventsAnnotationKey: "true"}}
	}
	b, _ := json.Marshal(obj)
	return b
}

// writeEvent writes one event of the merged watch: the member's object with
// its cluster (none for the gateway's own bookmark) and the composite
// resourceVersion rv, a JSON string; with rv nil, the object keeps its own.
func (c *copier) writeEvent(ev *event, rv jsontext.Value, table *tableColumns) error {
	c.token(jsontext.BeginObject)
	c.token(jsontext.String("type"))
	c.token(jsontext.String(ev.typ))
	c.token(jsontext.String("object"))
	dec := newDecoder(ev.object)
	var err error
	switch {
	case ev.cluster == "":
		err = c.copyObject(dec, &metaEdit{resourceVersion: rv})
	case ev.kind == "Table":
		err = c.copyTable(dec, &metaEdit{cluster: ev.cluster}, rv, table)
	default:
		err = c.copyObject(dec, &metaEdit{cluster: ev.cluster, resourceVersion: rv})
	}
	c.token(jsontext.EndObject)
	if c.err != nil {
		return c.err
	}
	return err
}

// tableColumns keeps the state of the Table objects of a watch for kubectl
// get --watch: a member sends its columns with its first event only; the
// merged stream sends them once, with the Cluster column first.
type tableColumns struct{ sent bool }

// copyTable copies a Table of a watch event: its columns, the first time
// only, after the Cluster column; its rows with their cluster (e); its own
// resourceVersion replaced by rv.
func (c *copier) copyTable(dec *jsontext.Decoder, e *metaEdit, rv jsontext.Value, t *tableColumns) error {
	if dec.PeekKind() != '{' {
		return c.copyValue(dec)
	}
	meta := false
	return c.object(dec, func(name jsontext.Token, key string) (bool, error) {
		// name is valid until dec reads on: written late, it is written anew.
		switch key {
		case "columnDefinitions":
			cols, err := dec.ReadValue()
			if err != nil || cols.Kind() != '[' || isEmptyArray(cols) {
				if err == nil {
					c.token(jsontext.String(key))
					c.value(cols)
				}
				return true, err
			}
			if !t.sent {
				t.sent = true
				c.token(jsontext.String(key))
				c.token(jsontext.BeginArray)
				c.value(jsontext.Value(clusterColumn))
				c.elements(cols, c.copyValue)
				c.token(jsontext.EndArray)
			}
			return true, nil
		case "rows":
			c.token(name)
			if handled, err := c.otherThan(dec, '[', func() { c.token(jsontext.Null) }); handled {
				return true, err
			}
			return true, c.array(dec, nil, func(dec *jsontext.Decoder) error { return c.copyRow(dec, e) })
		case "metadata":
			meta = true
			c.token(name)
			return true, c.copyMetadata(dec, &metaEdit{resourceVersion: rv})
		}
		return false, nil
	}, func() {
		if !meta {
			c.token(jsontext.String("metadata"))
			c.writeMetadata(&metaEdit{resourceVersion: rv})
		}
	})
}

// isEmptyArray tells whether a, an array, has no elements.
func isEmptyArray(a jsontext.Value) bool {
	dec := newDecoder(a)
	_, _ = dec.ReadToken()
	return dec.PeekKind() == ']'
}

// parseEvent reads a watch event, {"type": ..., "object": {...}}, as far as
// the merge needs: its type, where its object is, and the object's kind,
// apiVersion, resourceVersion and initial-events marker.
func parseEvent(b []byte) (event, error) {
	var ev event
	dec := newDecoder(b)
	err := eachMember(dec, func(key string) error {
		switch key {
		case "type":
			return readString(dec, key, &ev.typ)
		case "object":
			if dec.PeekKind() != '{' {
				return errors.New("object is not a JSON object")
			}
			start := dec.InputOffset() // after the name: the colon and the value follow
			err := readObject(dec, &ev)
			ev.object = bytes.TrimLeft(b[start:dec.InputOffset()], " \t\r\n:")
			return err
		}
		return dec.SkipValue()
	})
	if err != nil {
		return ev, err
	}
	if ev.typ == "" || ev.object == nil {
		return ev, errors.New("no type or no object")
	}
	return ev, nil
}

// readObject reads an event's object into ev: its kind, apiVersion,
// resourceVersion and initial-events marker.
func readObject(dec *jsontext.Decoder, ev *event) error {
	return eachMember(dec, func(key string) error {
		switch key {
		case "kind":
			return readString(dec, key, &ev.kind)
		case "apiVersion":
			return readString(dec, key, &ev.apiVersion)
		case "metadata":
			return eachMemberIfObject(dec, func(key string) error { return readMetadata(dec, key, ev) })
		}
		return dec.SkipValue()
	})
}

// readMetadata reads the member key of an event object's metadata into ev.
func readMetadata(dec *jsontext.Decoder, key string, ev *event) error {
	switch key {
	case "resourceVersion":
		return readString(dec, key, &ev.resourceVersion)
	case "annotations":
		return eachMemberIfObject(dec, func(key string) error {
			if key != metav1.InitialEventsAnnotationKey {
				return dec.SkipValue()
			}
			var v string
			err := readString(dec, key, &v)
			ev.initialEnd = v == "true"
			return err
		})
	}
	return dec.SkipValue()
}
