package fanout

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/klauspost/compress/gzip"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
)

// A fan-out list is merged at the level of JSON tokens: each member's answer
// is read once to find its kind, list metadata and items (and in its items
// or rows, where the cluster goes: splice.go), and the items are copied into
// the merged list as they are, with only the cluster spliced in. Decoding them into generic maps and encoding them again
// took several times as long and allocated many times the answers' size
// (BenchmarkMerge; docs/benchmark-history.md).

// memberList is one member's list (or Table) answer, read only as far as
// merging needs. The raw values are slices of the member's answer.
type memberList struct {
	apiVersion, kind string
	meta             listMeta
	// columns is a Table's raw array of column definitions; columnNames
	// their names.
	columns     jsontext.Value
	columnNames []string
	// items is the raw array of the list's items or of the Table's rows, nil
	// when the answer had none; count is its length.
	items jsontext.Value
	count int
	// splices are where the items get the cluster; byTokens: the items are
	// copied token by token instead (see itemSplicer, and answers past the
	// splices' offsets). The splices hold held bytes of the list's memory.
	splices  []splice
	byTokens bool
	held     int
}

// listMeta is the list metadata a merge reads and writes.
type listMeta struct {
	ResourceVersion    string `json:"resourceVersion,omitempty"`
	Continue           string `json:"continue,omitempty"`
	RemainingItemCount *int64 `json:"remainingItemCount,omitempty"`
}

func (l *memberList) isTable() bool { return l.kind == "Table" }

// parseList reads a member's answer to a list: a JSON object whose kind ends
// in List, or a Table. Its items are checked to be valid JSON, not decoded;
// where the cluster goes in them is charged to memory (nil: not bounded).
func parseList(body []byte, memory *hold) (*memberList, error) {
	dec := newDecoder(body)
	l := &memberList{}
	var items, rows jsontext.Value
	var nItems, nRows int
	var splices, rowSplices []splice
	var rowsByTokens bool
	held := 0 // by the splices of items and rows
	err := eachMember(dec, func(key string) (err error) {
		switch key {
		case "kind":
			return readString(dec, key, &l.kind)
		case "apiVersion":
			return readString(dec, key, &l.apiVersion)
		case "metadata":
			v, err := dec.ReadValue()
			if err != nil || v.Kind() != '{' {
				return err
			}
			return json.Unmarshal(v, &l.meta)
		case "columnDefinitions":
			l.columns, _, err = readArray(dec, body, key, nil)
		case "items":
			s := &itemSplicer{dec: dec, body: body, memory: memory}
			items, nItems, err = readArray(dec, body, key, func(base int) error {
				s.base = base
				return s.item()
			})
			splices, held = s.splices, held+s.charged
		case "rows":
			s := &itemSplicer{dec: dec, body: body, memory: memory}
			rows, nRows, err = readArray(dec, body, key, func(base int) error {
				s.base = base
				return s.row()
			})
			rowSplices, rowsByTokens, held = s.splices, s.byTokens, held+s.charged
		default:
			err = dec.SkipValue()
		}
		return err
	})
	l.held = held
	fail := func(err error) (*memberList, error) {
		memory.give(held)
		return nil, err
	}
	if err != nil {
		return fail(err)
	}
	switch {
	case l.isTable():
		if l.columns == nil {
			return fail(errors.New("a Table without columnDefinitions"))
		}
		if l.columnNames, err = columnNames(l.columns); err != nil {
			return fail(err)
		}
		l.items, l.count, l.splices, l.byTokens = rows, nRows, rowSplices, rowsByTokens
	case strings.HasSuffix(l.kind, "List"):
		l.items, l.count, l.splices = items, nItems, splices
	default:
		return fail(fmt.Errorf("kind %q", l.kind))
	}
	if len(body) > math.MaxInt32 { // past what a splice's offsets hold
		l.byTokens = true
	}
	return l, nil
}

// columnNames are the names of a Table's raw columnDefinitions.
func columnNames(columns jsontext.Value) ([]string, error) {
	var cols []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(columns, &cols); err != nil {
		return nil, fmt.Errorf("columnDefinitions: %w", err)
	}
	names := make([]string, 0, len(cols))
	for _, c := range cols {
		names = append(names, c.Name)
	}
	return names, nil
}

// readArray reads the next value of dec, which reads body: an array, whose
// elements it counts and checks (with element, which reads one, given the
// array's offset in body; nil: each is skipped), or null. The array is
// returned as a slice of body.
func readArray(dec *jsontext.Decoder, body []byte, field string, element func(base int) error) (jsontext.Value, int, error) {
	switch dec.PeekKind() {
	case 'n':
		_, err := dec.ReadToken()
		return nil, 0, err
	case '[':
	default:
		if err := dec.SkipValue(); err != nil {
			return nil, 0, err
		}
		return nil, 0, fmt.Errorf("%s is not an array", field)
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, 0, err
	}
	start := dec.InputOffset() - 1 // the '[' just read
	if element == nil {
		element = func(int) error { return dec.SkipValue() }
	}
	n := 0
	for dec.PeekKind() != ']' {
		if err := element(int(start)); err != nil {
			return nil, 0, err
		}
		n++
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, 0, err
	}
	return jsontext.Value(body[start:dec.InputOffset()]), n, nil
}

// part is a member's list in a merge: whole, or its head with the stream
// of its items.
type part struct {
	cluster string
	list    *memberList
	stream  *memberStream
}

// mergedList is the merge of members' lists of one kind: their items (a
// Table's rows, with a first Cluster column) one member after the other,
// each annotated with its cluster, under a composite resourceVersion.
// writeTo writes it.
type mergedList struct {
	apiVersion, kind string
	parts            []part // at least one
	// versions are the members' list resourceVersions, for the composite one.
	versions map[string]string
	// cont and remaining are the page's metadata.continue and
	// remainingItemCount, if any.
	cont      string
	remaining *int64
}

// clusterColumn is the first column of a merged Table.
const clusterColumn = `{"name":"Cluster","type":"string","format":"","description":"The upstream cluster the object is in.","priority":0}`

// writeTo writes the merged list as JSON to w: each member's items (a
// Table's rows) as it sent them, the cluster spliced in; those of a member
// still answering as they arrive.
func (m *mergedList) writeTo(w io.Writer) error {
	meta, err := json.Marshal(listMeta{ResourceVersion: CompositeResourceVersion(m.versions), Continue: m.cont, RemainingItemCount: m.remaining})
	if err != nil {
		return err
	}
	head := []byte(`{"apiVersion":`)
	head, _ = jsontext.AppendQuote(head, m.apiVersion)
	head = append(head, `,"kind":`...)
	head, _ = jsontext.AppendQuote(head, m.kind)
	head = append(head, `,"metadata":`...)
	head = append(head, meta...)
	table := m.parts[0].list.isTable()
	if table {
		head = append(head, `,"columnDefinitions":[`+clusterColumn...)
		if columns := bytes.TrimSpace(m.parts[0].list.columns[1 : len(m.parts[0].list.columns)-1]); len(columns) > 0 {
			head = append(append(head, ','), columns...)
		}
		head = append(head, `],"rows":[`...)
	} else {
		head = append(head, `,"items":[`...)
	}
	sw := stickyWriter{w: w}
	sw.write(head)
	wrote := false // items
	for _, p := range m.parts {
		if sw.err != nil {
			return sw.err
		}
		text := newClusterText(p.cluster)
		if p.stream != nil {
			if err := p.stream.writeItems(w, table, text, &wrote); err != nil {
				return err
			}
			continue
		}
		items, splices := p.list.items, p.list.splices
		if p.list.byTokens {
			if items, err = tokenItems(p); err != nil {
				return err
			}
			splices = nil
		}
		if p.list.count == 0 || len(bytes.TrimSpace(items[1:len(items)-1])) == 0 {
			continue
		}
		if wrote {
			sw.write(comma)
		}
		wrote = true
		if sw.err == nil {
			sw.err = writeSpliced(w, items, splices, text)
		}
	}
	sw.write(listEnd)
	return sw.err
}

// tokenItems is the array of p's items copied token by token (a Table's
// rows that are not objects left out).
func tokenItems(p part) (jsontext.Value, error) {
	var b bytes.Buffer
	c := newCopier(&b)
	edit := &metaEdit{cluster: p.cluster}
	copyItem := c.copyObject
	if p.list.isTable() {
		copyItem = c.copyRow
	}
	c.token(jsontext.BeginArray)
	c.elements(p.list.items, func(dec *jsontext.Decoder) error { return copyItem(dec, edit) })
	c.token(jsontext.EndArray)
	return bytes.TrimSpace(b.Bytes()), c.err
}

var listEnd = []byte("]}\n")

// mergedObject carries a merged list through
// responsewriters.SerializeObject, which writes it with listEncoder, and
// writes a Status instead when the list fails before any of it was sent.
type mergedObject struct{ *mergedList }

func (mergedObject) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject returns the object itself: a merged list is never changed
// once made.
func (o mergedObject) DeepCopyObject() runtime.Object { return o }

// listEncoder encodes a mergedObject, and the Status SerializeObject writes
// in its place when the list fails before any of it was sent.
type listEncoder struct {
	// header is the response's: Retry-After goes there with such a Status,
	// Content-Encoding when the list is compressed.
	header http.Header
	// client is the client's request's context.
	client context.Context
	// gzip: the client accepts gzip, and the apiserver would compress.
	gzip bool
}

func (listEncoder) Identifier() runtime.Identifier { return "fanout-list-json" }

// encodeChunk is the size of the writes to the compressing writer, which
// decides on compression by the size of the first. Nothing of the list is
// sent before it is written: a list that fails until then fails with a
// Status.
const encodeChunk = 256 << 10

func (e listEncoder) Encode(obj runtime.Object, w io.Writer) error {
	m, ok := obj.(mergedObject)
	if !ok {
		return json.NewEncoder(w).Encode(obj)
	}
	out := &listWriter{w: w, header: e.header, gzip: e.gzip}
	bw := bufio.NewWriterSize(out, encodeChunk)
	err := m.writeTo(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = out.close()
	}
	switch {
	case err == nil:
		return nil
	case out.sent:
		// Part of the list is on its way, under 200: only a response that
		// breaks off tells the client that it is not whole.
		if e.client.Err() == nil {
			klog.InfoS("Fan-out list broken off after it began", "err", err)
		}
		panic(http.ErrAbortHandler)
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if d := status.Status().Details; d != nil && d.RetryAfterSeconds > 0 {
			e.header.Set("Retry-After", strconv.Itoa(int(d.RetryAfterSeconds)))
		}
	}
	return err
}

// gzipThreshold is the apiserver's: a response whose first write is larger
// is compressed.
const gzipThreshold = 128 << 10

// listWriter writes the merged list to w, compressed as the apiserver
// compresses its own responses (gzip at level 1, when the client accepts it
// and the first write is past gzipThreshold), but with klauspost/compress,
// which takes less CPU than compress/gzip at the same level: compression is
// a large part of what the gateway adds to a large list (docs/benchmark.md).
// sent tells whether anything was written.
type listWriter struct {
	w      io.Writer
	header http.Header
	gzip   bool
	gz     *gzip.Writer
	sent   bool
}

func (l *listWriter) Write(b []byte) (int, error) {
	if !l.sent {
		l.sent = true
		if l.gzip && len(b) > gzipThreshold {
			l.header.Set("Content-Encoding", "gzip")
			l.header.Add("Vary", "Accept-Encoding")
			l.gz, _ = gzip.NewWriterLevel(l.w, gzip.BestSpeed) // a valid level
		}
	}
	if l.gz != nil {
		return l.gz.Write(b)
	}
	return l.w.Write(b)
}

// close ends the compressed stream.
func (l *listWriter) close() error {
	if l.gz == nil {
		return nil
	}
	return l.gz.Close()
}
