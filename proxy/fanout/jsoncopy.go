package fanout

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/go-json-experiment/json/jsontext"
)

// Not go-json-experiment's unmarshalling into structs with an embedded
// jsontext.Value: each level it edits is parsed and copied again, slower on
// every watch event and not shorter (docs/benchmark-history.md).

// copier copies JSON values from decoders to its encoder, changing only what
// a merge must change: the cluster annotation and the resourceVersion in an
// object's metadata, the cells of a Table's rows. Everything else is copied
// as it is, never decoded. The first error sticks and ends the copy.
type copier struct {
	enc *jsontext.Encoder
	err error
}

// newCopier writes to w. Member objects are written as they came, duplicate
// names included: checking names would cost a set per object.
func newCopier(w io.Writer) *copier {
	return &copier{enc: jsontext.NewEncoder(w, jsontext.AllowDuplicateNames(true))}
}

// newDecoder reads JSON from b without a copy.
func newDecoder(b []byte) *jsontext.Decoder { return newStreamDecoder(bytes.NewBuffer(b)) }

// newStreamDecoder reads JSON from r. Names are not checked for duplicates,
// as the copier writes them (see newCopier).
func newStreamDecoder(r io.Reader) *jsontext.Decoder {
	return jsontext.NewDecoder(r, jsontext.AllowDuplicateNames(true))
}

func (c *copier) token(t jsontext.Token) {
	if c.err == nil {
		c.err = c.enc.WriteToken(t)
	}
}

func (c *copier) value(v jsontext.Value) {
	if c.err == nil {
		c.err = c.enc.WriteValue(v)
	}
}

// elements calls each with a decoder at each element of the raw array a
// (nil: none).
func (c *copier) elements(a jsontext.Value, each func(*jsontext.Decoder) error) {
	if c.err != nil || a == nil {
		return
	}
	dec := newDecoder(a)
	if _, c.err = dec.ReadToken(); c.err != nil {
		return
	}
	for c.err == nil && dec.PeekKind() != ']' {
		if err := each(dec); c.err == nil {
			c.err = err
		}
	}
}

// copyValue copies the next value of dec unchanged.
func (c *copier) copyValue(dec *jsontext.Decoder) error {
	v, err := dec.ReadValue()
	if err != nil {
		return err
	}
	c.value(v)
	return nil
}

// otherThan handles the next value of dec when it is not of kind want: a
// null is replaced by what replace writes, anything else is copied
// unchanged. handled is false when the value is of kind want: the caller
// copies it.
func (c *copier) otherThan(dec *jsontext.Decoder, want jsontext.Kind, replace func()) (handled bool, err error) {
	switch dec.PeekKind() {
	case want:
		return false, nil
	case 'n':
		if _, err := dec.ReadToken(); err != nil {
			return true, err
		}
		replace()
		return true, nil
	}
	return true, c.copyValue(dec)
}

// object copies the next value of dec, an object, member by member. member
// is called with each member's name, before its value is read: it either
// copies or drops the member itself and returns true, or returns false to
// have it copied unchanged. tail writes members to add at the end.
func (c *copier) object(dec *jsontext.Decoder, member func(name jsontext.Token, key string) (bool, error), tail func()) error {
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	c.token(tok)
	for c.err == nil && dec.PeekKind() != '}' {
		name, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if done, err := member(name, name.String()); err != nil {
			return err
		} else if done {
			continue
		}
		c.token(name)
		if err := c.copyValue(dec); err != nil {
			return err
		}
	}
	if tail != nil {
		tail()
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	c.token(jsontext.EndObject)
	return nil
}

// eachMember reads the object at dec's next token, calling member with each
// member's name; member reads the value.
func eachMember(dec *jsontext.Decoder, member func(key string) error) error {
	if tok, err := dec.ReadToken(); err != nil {
		return err
	} else if tok.Kind() != '{' {
		return errors.New("not a JSON object")
	}
	for dec.PeekKind() != '}' {
		name, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if err := member(name.String()); err != nil {
			return err
		}
	}
	_, err := dec.ReadToken()
	return err
}

// eachMemberIfObject is eachMember for a value that may be of another
// kind: that one is skipped.
func eachMemberIfObject(dec *jsontext.Decoder, member func(key string) error) error {
	if dec.PeekKind() != '{' {
		return dec.SkipValue()
	}
	return eachMember(dec, member)
}

// readString reads the next value of dec, a string, into s; field names it
// in the error.
func readString(dec *jsontext.Decoder, field string, s *string) error {
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	if tok.Kind() != '"' {
		return fmt.Errorf("%s is not a string", field)
	}
	*s = tok.String()
	return nil
}

// metaEdit is what a merge sets in an object's metadata.
type metaEdit struct {
	// cluster is set as the cluster annotation; "": none is set.
	cluster string
	// resourceVersion, a JSON string, replaces metadata.resourceVersion;
	// nil: it is kept.
	resourceVersion jsontext.Value
}

// copyObject copies the next value of dec with e applied to its metadata,
// which it adds when it is missing or null. A value that is not an object is
// copied unchanged.
//
// A name that appears twice in an object is edited both times: a client
// decoding the result keeps one of them, usually the last, and must find the
// gateway's cluster annotation there, not one a member wrote.
func (c *copier) copyObject(dec *jsontext.Decoder, e *metaEdit) error {
	if dec.PeekKind() != '{' {
		return c.copyValue(dec)
	}
	found := false
	return c.object(dec, func(name jsontext.Token, key string) (bool, error) {
		if key != "metadata" {
			return false, nil
		}
		found = true
		c.token(name)
		return true, c.copyMetadata(dec, e)
	}, func() {
		if !found {
			c.token(jsontext.String("metadata"))
			c.writeMetadata(e)
		}
	})
}

// copyMetadata copies an object's metadata with e applied. Metadata that is
// neither an object nor null is copied unchanged.
func (c *copier) copyMetadata(dec *jsontext.Decoder, e *metaEdit) error {
	if handled, err := c.otherThan(dec, '{', func() { c.writeMetadata(e) }); handled {
		return err
	}
	annotations := false
	return c.object(dec, func(name jsontext.Token, key string) (bool, error) {
		switch {
		case key == "annotations" && e.cluster != "":
			annotations = true
			c.token(name)
			return true, c.copyAnnotations(dec, e.cluster)
		case key == "resourceVersion" && e.resourceVersion != nil:
			return true, dec.SkipValue() // written at the end
		}
		return false, nil
	}, func() { c.writeMetadataMembers(e, !annotations) })
}

// writeMetadata writes metadata holding only what e sets.
func (c *copier) writeMetadata(e *metaEdit) {
	c.token(jsontext.BeginObject)
	c.writeMetadataMembers(e, true)
	c.token(jsontext.EndObject)
}

func (c *copier) writeMetadataMembers(e *metaEdit, annotations bool) {
	if annotations && e.cluster != "" {
		c.token(jsontext.String("annotations"))
		c.writeAnnotations(e.cluster)
	}
	if e.resourceVersion != nil {
		c.token(jsontext.String("resourceVersion"))
		c.value(e.resourceVersion) // quoted once, not for each event
	}
}

// copyAnnotations copies an object's annotations with the cluster
// annotation set; one the member set is replaced. Annotations that are
// neither an object nor null are copied unchanged.
func (c *copier) copyAnnotations(dec *jsontext.Decoder, cluster string) error {
	if handled, err := c.otherThan(dec, '{', func() { c.writeAnnotations(cluster) }); handled {
		return err
	}
	return c.object(dec, func(_ jsontext.Token, key string) (bool, error) {
		if key != ClusterAnnotation {
			return false, nil
		}
		return true, dec.SkipValue() // the gateway's is written at the end
	}, func() { c.writeClusterAnnotation(cluster) })
}

// writeAnnotations writes annotations holding only the cluster annotation.
func (c *copier) writeAnnotations(cluster string) {
	c.token(jsontext.BeginObject)
	c.writeClusterAnnotation(cluster)
	c.token(jsontext.EndObject)
}

func (c *copier) writeClusterAnnotation(cluster string) {
	c.token(jsontext.String(ClusterAnnotation))
	c.token(jsontext.String(cluster))
}

// copyRow copies the next value of dec, a Table row, with the cluster of e
// as its first cell and e applied to its object. A row that is not an object
// is left out.
func (c *copier) copyRow(dec *jsontext.Decoder, e *metaEdit) error {
	if dec.PeekKind() != '{' {
		return dec.SkipValue()
	}
	cells := false
	return c.object(dec, func(name jsontext.Token, key string) (bool, error) {
		switch key {
		case "cells":
			cells = true
			c.token(name)
			return true, c.copyCells(dec, e.cluster)
		case "object":
			c.token(name)
			return true, c.copyObject(dec, e)
		}
		return false, nil
	}, func() {
		if !cells {
			c.token(jsontext.String("cells"))
			c.writeCells(e.cluster)
		}
	})
}

// writeCells writes cells holding only cluster.
func (c *copier) writeCells(cluster string) {
	c.token(jsontext.BeginArray)
	c.token(jsontext.String(cluster))
	c.token(jsontext.EndArray)
}

// copyCells copies a row's cells (an array; null is none) after a first cell
// holding cluster.
func (c *copier) copyCells(dec *jsontext.Decoder, cluster string) error {
	if handled, err := c.otherThan(dec, '[', func() { c.writeCells(cluster) }); handled {
		return err
	}
	return c.array(dec, func() { c.token(jsontext.String(cluster)) }, c.copyValue)
}

// array copies the next value of dec, an array, with each copying each
// element, after the elements head writes (head may be nil).
func (c *copier) array(dec *jsontext.Decoder, head func(), each func(*jsontext.Decoder) error) error {
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	c.token(jsontext.BeginArray)
	if head != nil {
		head()
	}
	for c.err == nil && dec.PeekKind() != ']' {
		if err := each(dec); err != nil {
			return err
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	c.token(jsontext.EndArray)
	return nil
}
