package fanout

import (
	"bytes"
	"io"
	"unsafe"

	"github.com/go-json-experiment/json/jsontext"
)

// A list's items (a Table's rows) are written into the merged list as the
// member sent them, with the cluster annotation (and the cluster cell)
// spliced in at offsets found while the answer is read (in the member's
// goroutine): one pass over the bytes to read and check them, then a copy.
// Copying them token by token through an encoder, which checks every value
// again, took two thirds of a merge's time.
//
// Items and rows of an unusual shape (metadata, annotations, cells or object
// named twice, the cluster annotation already there) are copied by the
// token copier, which edits every occurrence; an item that is not an object,
// or whose metadata or annotations are neither an object nor null, is copied
// unchanged, and so are cells that are neither an array nor null.

// splice is where a list's items (or a Table's rows) change in the merged
// list: the bytes items[at:at+skip] are replaced by what kind writes.
type splice struct {
	// int32: a list held for a merge is far smaller than 2 GiB (see
	// ListMemory), and a splice per item or two is held with it.
	at, skip int32
	kind     spliceKind
	// comma: the object or array the insertion goes into has other members.
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
	// addCell adds the cluster as the first cell of a Table row.
	addCell
	// addCells adds cells holding it at the end of a row.
	addCells
	// setCells replaces cells that are null.
	setCells
	// copyRow copies the row with the token copier.
	copyRow
)

// itemSplicer finds the splices of a member's list items (or Table rows) as
// they are read.
type itemSplicer struct {
	dec  *jsontext.Decoder
	body []byte // dec's input
	// src, when set, is dec's input instead, whose window body is.
	src     *memberStream
	base    int // the offset in the input of what the splices' offsets count from
	splices []splice
	// memory is the list's share of the memory bound, charged the splices'
	// bytes as they grow: a member's answer of many tiny items would
	// otherwise make them several times its size.
	memory  *hold
	charged int
	// Names seen in the item being read: metadata, and annotations in the
	// metadata being read; unusual, when the item is copied token by token.
	metadata, annotations int
	unusual               bool
	// byTokens: a row is not an object. The token copier leaves such rows
	// out, which splices cannot do without the commas around them: the
	// member's rows are copied token by token.
	byTokens bool
}

// row reads the next row of a Table: its cells get the cluster first, its
// object the cluster annotation.
func (s *itemSplicer) row() error {
	if s.dec.PeekKind() != '{' {
		s.byTokens = true
		return s.dec.SkipValue()
	}
	first := len(s.splices)
	start := s.valueStart()
	cells, objects := 0, 0
	n, err := objectNames(s.dec, func(name jsontext.Value) error {
		switch {
		case nameIs(name, "cells"):
			cells++
			return s.cellsValue()
		case nameIs(name, "object"):
			objects++
			return s.item()
		}
		return s.dec.SkipValue()
	})
	if err != nil {
		return err
	}
	end := int(s.dec.InputOffset())
	if cells == 0 {
		s.mark(addCells, end-1, 0, n > 0)
	}
	if cells > 1 || objects > 1 {
		s.splices = append(s.splices[:first], splice{at: int32(start - s.base), skip: int32(end - start), kind: copyRow})
	}
	return s.charge()
}

// cellsValue reads the value of a row's cells.
func (s *itemSplicer) cellsValue() error {
	switch s.dec.PeekKind() {
	case 'n':
		return s.null(setCells)
	case '[':
	default:
		return s.dec.SkipValue()
	}
	if _, err := s.dec.ReadToken(); err != nil {
		return err
	}
	s.mark(addCell, int(s.dec.InputOffset()), 0, s.dec.PeekKind() != ']')
	for s.dec.PeekKind() != ']' {
		if err := s.dec.SkipValue(); err != nil {
			return err
		}
	}
	_, err := s.dec.ReadToken()
	return err
}

// valueStart is the offset in body of the object next in the decoder: only
// whitespace, and a comma or colon before it, lie between.
func (s *itemSplicer) valueStart() int {
	start := int(s.dec.InputOffset())
	body, origin := s.body, 0
	if s.src != nil {
		b, w := s.src.window()
		body, origin = w, int(b)
	}
	for body[start-origin] != '{' {
		start++
	}
	return start
}

// item reads the next item.
func (s *itemSplicer) item() error {
	if s.dec.PeekKind() != '{' {
		return s.dec.SkipValue()
	}
	first := len(s.splices)
	start := s.valueStart()
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
		s.splices = append(s.splices[:first], splice{at: int32(start - s.base), skip: int32(end - start), kind: copyItem})
	}
	return s.charge()
}

// spliceSize is the bytes a splice holds.
const spliceSize = int(unsafe.Sizeof(splice{}))

// charge takes from the list's memory what the splices grew to since the
// last charge; past the bound, the list fails (Serve reports it).
func (s *itemSplicer) charge() error {
	held := cap(s.splices) * spliceSize
	if held <= s.charged {
		return nil
	}
	if err := s.memory.take(held - s.charged); err != nil {
		return err
	}
	s.charged = held
	return nil
}

// metadataValue reads the value of an item's metadata.
func (s *itemSplicer) metadataValue() error {
	if s.metadata++; s.metadata > 1 {
		s.unusual = true
	}
	if object, err := s.objectNext(setMetadata); !object {
		return err
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
	if object, err := s.objectNext(setAnnotations); !object {
		return err
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

// objectNext tells whether the value next is an object, for the caller to
// read; a null is read and marked to be replaced by ifNull, and any other
// value skipped.
func (s *itemSplicer) objectNext(ifNull spliceKind) (bool, error) {
	switch s.dec.PeekKind() {
	case '{':
		return true, nil
	case 'n':
		return false, s.null(ifNull)
	}
	return false, s.dec.SkipValue()
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
	s.splices = append(s.splices, splice{at: int32(at - s.base), skip: int32(skip), kind: kind, comma: comma})
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

// writeSpliced writes the inside of a list's raw items array (or a Table's
// rows), without its brackets, to w with the cluster spliced in.
func writeSpliced(w io.Writer, items jsontext.Value, splices []splice, text *clusterText) error {
	return writeRange(w, items, 1, len(items)-1, splices, text)
}

// clusterText is what a member's items get spliced in.
type clusterText struct {
	quoted, annotation []byte
	edit               metaEdit
}

func newClusterText(cluster string) *clusterText {
	quoted, _ := jsontext.AppendQuote(nil, cluster) // valid UTF-8: a name
	return &clusterText{quoted: quoted, annotation: append([]byte(`"`+ClusterAnnotation+`":`), quoted...), edit: metaEdit{cluster: cluster}}
}

// writeRange writes b[from:to] to w with the splices, whose offsets are in
// b, applied.
func writeRange(w io.Writer, b []byte, from, to int, splices []splice, text *clusterText) error {
	quoted, annotation := text.quoted, text.annotation
	sw := stickyWriter{w: w}
	pos := int32(from)
	for _, s := range splices {
		sw.write(b[pos:s.at])
		if s.comma && s.kind != addCell {
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
		case addCell:
			sw.write(quoted)
			if s.comma {
				sw.write(comma)
			}
		case addCells:
			sw.write(cellsOpen, quoted, closeArray)
		case setCells:
			sw.write(openArray, quoted, closeArray)
		case copyItem, copyRow:
			if sw.err == nil {
				c := newCopier(w)
				dec := newDecoder(b[s.at : s.at+s.skip])
				copyValue := c.copyObject
				if s.kind == copyRow {
					copyValue = c.copyRow
				}
				if err := copyValue(dec, &text.edit); err != nil {
					return err
				}
				sw.err = c.err
			}
		}
		pos = s.at + s.skip
	}
	sw.write(b[pos:to])
	return sw.err
}

var (
	comma             = []byte{','}
	openObject        = []byte{'{'}
	closeObject       = []byte{'}'}
	annotationsOpen   = []byte(`"annotations":{`)
	metadataOpen      = []byte(`"metadata":{"annotations":{`)
	metadataValueOpen = []byte(`{"annotations":{`)
	openArray         = []byte{'['}
	closeArray        = []byte{']'}
	cellsOpen         = []byte(`"cells":[`)
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
