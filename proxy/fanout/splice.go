package fanout

import (
	"bytes"
	"io"

	"github.com/go-json-experiment/json/jsontext"
)

// A list's items are written into the merged list as the member sent them,
// with the cluster annotation spliced in at offsets found while the answer
// is read (in the member's goroutine): one pass over the bytes to read and
// check them, then a copy. Copying them token by token through an encoder,
// which checks every value again, took two thirds of a merge's time.
//
// Items of an unusual shape (metadata or annotations named twice, the
// cluster annotation already there) are copied by the token copier, which
// edits every occurrence; an item that is not an object, or whose metadata
// or annotations are neither an object nor null, is copied unchanged.

// splice is where a list's items change in the merged list: the bytes
// items[at:at+skip] are replaced by what kind writes.
type splice struct {
	at, skip int
	kind     spliceKind
	// comma: the object the insertion ends has members before it.
	comma bool
}

type spliceKind uint8

const (
	// addAnnotation adds the cluster annotation at the end of annotations.
	addAnnotation spliceKind = iota
	// addAnnotations adds annotations holding it at the end of metadata.
	addAnnotations
	// addMetadata adds metadata holding those at the end of an item.
	addMetadata
	// setAnnotations replaces annotations that are null.
	setAnnotations
	// setMetadata replaces metadata that is null.
	setMetadata
	// copyItem copies the item with the token copier.
	copyItem
)

// itemSplicer finds the splices of a member's list items as they are read.
type itemSplicer struct {
	dec     *jsontext.Decoder
	body    []byte // dec's input
	base    int    // the offset of the items array in body
	splices []splice
	// Names seen in the item being read: metadata, and annotations in the
	// metadata being read; unusual, when the item is copied token by token.
	metadata, annotations int
	unusual               bool
}

// item reads the next item.
func (s *itemSplicer) item() error {
	if s.dec.PeekKind() != '{' {
		return s.dec.SkipValue()
	}
	first := len(s.splices)
	// The item's first byte: only whitespace and the comma after the
	// previous item lie between.
	start := int(s.dec.InputOffset())
	for s.body[start] != '{' {
		start++
	}
	s.metadata, s.unusual = 0, false
	n, err := objectNames(s.dec, func(name jsontext.Value) error {
		if !nameIs(name, "metadata") {
			return s.dec.SkipValue()
		}
		return s.metadataValue()
	})
	if err != nil {
		return err
	}
	end := int(s.dec.InputOffset())
	if s.metadata == 0 {
		s.mark(addMetadata, end-1, 0, n > 0)
	}
	if s.unusual {
		s.splices = append(s.splices[:first], splice{at: start - s.base, skip: end - start, kind: copyItem})
	}
	return nil
}

// metadataValue reads the value of an item's metadata.
func (s *itemSplicer) metadataValue() error {
	if s.metadata++; s.metadata > 1 {
		s.unusual = true
	}
	switch s.dec.PeekKind() {
	case 'n':
		return s.null(setMetadata)
	case '{':
	default:
		return s.dec.SkipValue()
	}
	s.annotations = 0
	n, err := objectNames(s.dec, func(name jsontext.Value) error {
		if !nameIs(name, "annotations") {
			return s.dec.SkipValue()
		}
		return s.annotationsValue()
	})
	if err == nil && s.annotations == 0 {
		s.mark(addAnnotations, int(s.dec.InputOffset())-1, 0, n > 0)
	}
	return err
}

// annotationsValue reads the value of an item's annotations.
func (s *itemSplicer) annotationsValue() error {
	if s.annotations++; s.annotations > 1 {
		s.unusual = true
	}
	switch s.dec.PeekKind() {
	case 'n':
		return s.null(setAnnotations)
	case '{':
	default:
		return s.dec.SkipValue()
	}
	n, err := objectNames(s.dec, func(name jsontext.Value) error {
		if nameIs(name, ClusterAnnotation) {
			s.unusual = true // the member's own value goes
		}
		return s.dec.SkipValue()
	})
	if err == nil {
		s.mark(addAnnotation, int(s.dec.InputOffset())-1, 0, n > 0)
	}
	return err
}

// null reads the null value next and marks it to be replaced by kind.
func (s *itemSplicer) null(kind spliceKind) error {
	if _, err := s.dec.ReadToken(); err != nil {
		return err
	}
	end := int(s.dec.InputOffset())
	s.mark(kind, end-len("null"), len("null"), false)
	return nil
}

// mark adds a splice at offset at of body.
func (s *itemSplicer) mark(kind spliceKind, at, skip int, comma bool) {
	s.splices = append(s.splices, splice{at: at - s.base, skip: skip, kind: kind, comma: comma})
}

// objectNames reads the object next in dec, calling member with each
// member's raw name (a JSON string) to read its value, and returns how many
// members it had.
func objectNames(dec *jsontext.Decoder, member func(name jsontext.Value) error) (int, error) {
	if _, err := dec.ReadToken(); err != nil {
		return 0, err
	}
	n := 0
	for dec.PeekKind() != '}' {
		name, err := dec.ReadValue()
		if err != nil {
			return n, err
		}
		n++
		if err := member(name); err != nil {
			return n, err
		}
	}
	_, err := dec.ReadToken()
	return n, err
}

// nameIs tells whether the raw JSON string name is s, escapes read.
func nameIs(name jsontext.Value, s string) bool {
	raw := name[1 : len(name)-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == s
	}
	unquoted, err := jsontext.AppendUnquote(nil, name)
	return err == nil && string(unquoted) == s
}

// writeSpliced writes the inside of a list's raw items array (without its
// brackets) to w with the cluster annotation spliced in.
func writeSpliced(w io.Writer, items jsontext.Value, splices []splice, cluster string) error {
	quoted, _ := jsontext.AppendQuote(nil, cluster) // valid UTF-8: a name
	annotation := append([]byte(`"`+ClusterAnnotation+`":`), quoted...)
	sw := stickyWriter{w: w}
	pos := 1 // items[0] is '['
	for _, s := range splices {
		sw.write(items[pos:s.at])
		if s.comma {
			sw.write(comma)
		}
		switch s.kind {
		case addAnnotation:
			sw.write(annotation)
		case addAnnotations:
			sw.write(annotationsOpen, annotation, closeObject)
		case addMetadata:
			sw.write(metadataOpen, annotation, closeObject, closeObject)
		case setAnnotations:
			sw.write(openObject, annotation, closeObject)
		case setMetadata:
			sw.write(metadataValueOpen, annotation, closeObject, closeObject)
		case copyItem:
			if sw.err == nil {
				c := newCopier(w)
				if err := c.copyObject(newDecoder(items[s.at:s.at+s.skip]), &metaEdit{cluster: cluster}); err != nil {
					return err
				}
				sw.err = c.err
			}
		}
		pos = s.at + s.skip
	}
	sw.write(items[pos : len(items)-1])
	return sw.err
}

var (
	comma             = []byte{','}
	openObject        = []byte{'{'}
	closeObject       = []byte{'}'}
	annotationsOpen   = []byte(`"annotations":{`)
	metadataOpen      = []byte(`"metadata":{"annotations":{`)
	metadataValueOpen = []byte(`{"annotations":{`)
)

// stickyWriter writes until the first error, which it keeps.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) write(parts ...[]byte) {
	for _, p := range parts {
		if s.err == nil {
			_, s.err = s.w.Write(p)
		}
	}
}
