package fanout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/client-go/util/workqueue"
)

// A fan-out list without limit streams. Each member's answer is taken as the
// reverse proxy writes it (memberStream); the merged list begins once every
// member's status and list head (kind, metadata, a Table's columns) are
// known, which is all the merged head, the warnings and strict need; then
// the members' items follow, member after member in cluster order, as they
// arrive. What members sent and the list has not written yet (the answers of
// members whose turn has not come) is held within ListMemory; the member
// whose items the list is writing is held back once it is streamAhead ahead
// of them, so that its answer is never held whole.
//
// A member whose answer ended by the time the list begins is merged whole,
// as a page's members are (parseList): a broken one is left out with a
// warning. A member still answering is streamed: if its answer breaks off,
// times out or turns out not to be JSON after the list began, the list
// fails, with a Status while none of it was sent, else by breaking the
// response off (listEncoder): never a short list that looks whole.

// list serves a fan-out list without limit: it asks every member, Parallel at
// a time, and returns once every member's head is known, with the members
// still answering left to stream.
func (h *Handler) list(c *listCall, members []member, strict bool) (*mergedList, []string, error) {
	streams := make([]*memberStream, len(members))
	for i := range members {
		streams[i] = newMemberStream(members[i].name, c.memory)
	}
	c.running.Add(1)
	go func() {
		defer c.running.Done()
		// Every member gets its answer: those of a cancelled list at once.
		workqueue.ParallelizeUntil(context.Background(), h.parallel(), len(members), func(i int) {
			h.serveStream(c, c.req, streams[i])
		})
	}()
	results := make([]result, len(streams))
	for i, s := range streams {
		results[i] = s.head()
	}
	for i := range results {
		results[i].settle()
	}
	return merge(results, strict)
}

// serveStream serves req, the list of call c, to the member of s, bounded by
// the member timeout, and ends s with how the answer ended.
func (h *Handler) serveStream(c *listCall, req *http.Request, s *memberStream) {
	ctx, cancel := context.WithTimeout(req.Context(), c.timeout)
	defer cancel()
	if !s.start(ctx, cancel) {
		return
	}
	// Warnings of this member's request (e.g. from admission) are collected
	// here, not written concurrently into the client's headers.
	inner := req.Clone(warning.WithWarningRecorder(ctx, s.rec))
	inner.Header.Set("Accept", c.accept)
	// The gateway decodes the answer: let the transport handle compression.
	inner.Header.Del("Accept-Encoding")
	aborted := h.serveMember(s, inner, s.cluster, c.path)
	var end error
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		end = answerTimeout{c.timeout}
	case aborted:
		end = errBrokeOff
	}
	s.finish(end)
}

// errBrokeOff ends a member's answer that its reverse proxy aborted.
var errBrokeOff = errors.New("its answer broke off")

// errLeftOut refuses what a member sends once the list left it out.
var errLeftOut = errors.New("the member was left out of the fan-out list")

// answerTimeout ends a member's answer that took longer than the member timeout.
type answerTimeout struct{ after time.Duration }

func (t answerTimeout) Error() string { return fmt.Sprintf("no complete answer within %s", t.after) }

// memberStream is one member's answer to a fan-out list: the ResponseWriter
// of the member's request, which never blocks, and the reader of what it
// wrote for the goroutine that writes the merged list.
type memberStream struct {
	cluster string
	memory  *hold
	rec     *recorder
	header  http.Header // the member's goroutine's

	mu   sync.Mutex
	cond sync.Cond
	code int
	// warnings are the member's Warning headers, read when it answered.
	warnings []string
	// buf holds the answer from offset base on: what was read and not yet
	// written out, then what was not read yet. read and written are offsets
	// in the answer; held is what the answer holds of the list's memory.
	buf                 []byte
	base, read, written int64
	held                int64
	done                bool
	end                 error // why the answer ended early: errBrokeOff, answerTimeout
	// closed: the list left the member out, or read all of its list; what
	// comes is refused or dropped (drop).
	closed, drop bool
	// streaming: the list is writing the member's items (writeItems), and
	// Write waits while the answer is streamAhead ahead of what it read.
	streaming bool
	ctx       context.Context    // the member's request's
	cancel    context.CancelFunc // ends it

	// dec reads the answer, for the writer of the merged list only.
	dec *jsontext.Decoder
}

func newMemberStream(cluster string, memory *hold) *memberStream {
	s := &memberStream{cluster: cluster, memory: memory, rec: &recorder{}, header: http.Header{}}
	s.cond.L = &s.mu
	return s
}

// start records the member's request's context and how to end it; false:
// the member was left out before it was asked.
func (s *memberStream) start(ctx context.Context, cancel context.CancelFunc) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.done = true
		return false
	}
	s.ctx, s.cancel = ctx, cancel
	// A Write waiting for the list wakes when the request ends.
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.cond.Broadcast()
	})
	return true
}

// streamAhead is how much of a streamed member's answer the list holds
// unread before the member's writes wait: enough to keep both sides busy,
// little enough that the buffer stays small and is reused, not grown with
// the answer (growing it was a large share of the gateway's CPU in a large
// list; docs/benchmark.md).
const streamAhead = 512 << 10

func (s *memberStream) Header() http.Header { return s.header }

func (s *memberStream) WriteHeader(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.code == 0 && code >= http.StatusOK {
		s.answered(code)
	}
}

// answered records the member's status; s.mu is held.
func (s *memberStream) answered(code int) {
	s.code = code
	s.warnings = memberWarnings(s.header)
	s.cond.Broadcast()
}

func (s *memberStream) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.code == 0 {
		s.answered(http.StatusOK)
	}
	for s.streaming && !s.closed && s.ctx.Err() == nil && s.base+int64(len(s.buf))-s.read >= streamAhead {
		s.cond.Wait()
	}
	switch {
	case s.drop:
		return len(b), nil
	case s.closed:
		return 0, errLeftOut
	case s.ctx.Err() != nil:
		return 0, s.ctx.Err()
	}
	if err := s.memory.take(len(b)); err != nil {
		return 0, err
	}
	s.held += int64(len(b))
	s.buf = append(s.buf, b...)
	s.cond.Broadcast()
	return len(b), nil
}

// finish records that the member's request ended, early with end.
func (s *memberStream) finish(end error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done, s.end = true, end
	s.cond.Broadcast()
}

// Read reads the answer as it arrives, for dec.
func (s *memberStream) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.read == s.base+int64(len(s.buf)) && !s.done {
		s.cond.Wait()
	}
	i := s.read - s.base
	if i == int64(len(s.buf)) {
		if s.end != nil {
			return 0, s.end
		}
		return 0, io.EOF
	}
	n := copy(p, s.buf[i:])
	s.read += int64(n)
	if s.streaming {
		s.cond.Broadcast() // a Write may wait for this
	}
	return n, nil
}

// ended tells whether the member's request ended.
func (s *memberStream) ended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// answer is the member's whole answer, once its request ended.
func (s *memberStream) answer() result {
	s.mu.Lock()
	for !s.done {
		s.cond.Wait()
	}
	defer s.mu.Unlock()
	r := result{cluster: s.cluster, code: s.code, body: s.buf, warnings: append(s.rec.get(), s.warnings...), memory: s.memory}
	if r.code == 0 {
		r.code = http.StatusOK
	}
	var t answerTimeout
	switch {
	case errors.As(s.end, &t):
		r.err = t
	case s.end == errBrokeOff:
		r.code = http.StatusBadGateway
		r.body = []byte(errBrokeOff.Error())
	}
	return r
}

// head waits for the member's status and, while it is still answering a
// list, reads its answer up to the first item: the result holds the list's
// head and the stream, which writeItems goes on reading. Any other answer
// (an error, one that ended, one whose head is not as an apiserver writes
// it: kind, apiVersion, metadata and a Table's columns before the items) is
// waited for whole.
func (s *memberStream) head() result {
	s.mu.Lock()
	for s.code == 0 && !s.done {
		s.cond.Wait()
	}
	streaming := s.code == http.StatusOK && !s.done
	s.mu.Unlock()
	if streaming {
		if l := s.readHead(); l != nil {
			s.mu.Lock()
			defer s.mu.Unlock()
			return result{cluster: s.cluster, code: http.StatusOK, warnings: append(s.rec.get(), s.warnings...), memory: s.memory, list: l, stream: s}
		}
		_, _ = io.Copy(io.Discard, s) // to its end: answer has it all
	}
	return s.answer()
}

// readHead reads the answer up to its first item (a Table's first row); nil
// when it is not a list whose head comes first.
func (s *memberStream) readHead() *memberList {
	dec := newStreamDecoder(s)
	s.dec = dec
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil
	}
	l := &memberList{}
	var kind, apiVersion, metadata bool
	for dec.PeekKind() == '"' {
		name, err := dec.ReadToken()
		if err != nil {
			return nil
		}
		switch key := name.String(); key {
		case "kind":
			kind = readString(dec, key, &l.kind) == nil
		case "apiVersion":
			apiVersion = readString(dec, key, &l.apiVersion) == nil
		case "metadata":
			v, err := dec.ReadValue()
			if err != nil || (v.Kind() == '{' && json.Unmarshal(v, &l.meta) != nil) {
				return nil
			}
			metadata = true
		case "columnDefinitions":
			v, err := dec.ReadValue()
			if err != nil || v.Kind() != '[' {
				return nil
			}
			l.columns = bytes.Clone(v)
		case "items", "rows":
			if !kind || !apiVersion || !metadata || dec.PeekKind() != '[' {
				return nil
			}
			switch {
			case l.isTable() && key == "rows":
				if l.columnNames, err = columnNames(l.columns); err != nil {
					return nil
				}
			case !l.isTable() && key == "items" && strings.HasSuffix(l.kind, "List"):
			case l.isTable() || strings.HasSuffix(l.kind, "List"): // not the array merged
				if dec.SkipValue() != nil {
					return nil
				}
				continue
			default:
				return nil
			}
			if _, err := dec.ReadToken(); err != nil {
				return nil
			}
			return l
		default:
			if dec.SkipValue() != nil {
				return nil
			}
		}
	}
	return nil
}

// settle makes the result of a member whose answer ended since its head a
// whole answer, merged as such.
func (r *result) settle() {
	if r.stream != nil && r.stream.ended() {
		*r = r.stream.answer()
	}
}

// leaveOut ends the member's request when the list leaves it out, and gives
// back what it held.
func (r *result) leaveOut() {
	if r.stream == nil {
		return
	}
	s := r.stream
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.cond.Broadcast()
	s.memory.give(int(s.held))
	s.held, s.buf = 0, nil
	if s.cancel != nil {
		s.cancel()
	}
}

// window is the part of the answer held, from offset base on.
func (s *memberStream) window() (base int64, b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.base, s.buf
}

// compactAt is how much written out the buffer holds before it is moved
// down: at least this much, and half of it (or so much that a splice's
// offsets would not hold it).
const compactAt = 64 << 10

// release gives back what the list wrote out up to offset to.
func (s *memberStream) release(to int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := min(to, s.read) - s.written; n > 0 {
		s.memory.give(int(n))
		s.held -= n
		s.written += n
	}
	if k := s.written - s.base; k >= compactAt && (2*k >= int64(len(s.buf)) || k > math.MaxInt32/2) {
		s.buf = s.buf[:copy(s.buf, s.buf[k:])]
		s.base = s.written
	}
}

// writeItems writes the member's items (a Table's rows that are objects) as
// they arrive, each with its cluster spliced in, after a comma when wrote
// says that items came before. An error of the answer fails the list.
func (s *memberStream) writeItems(w io.Writer, table bool, text *clusterText, wrote *bool) error {
	dec := s.dec
	s.mu.Lock()
	s.streaming = true
	s.mu.Unlock()
	s.release(dec.InputOffset()) // the head
	sp := &itemSplicer{dec: dec, src: s, memory: s.memory}
	defer func() { s.memory.give(sp.charged) }()
	for dec.PeekKind() != ']' {
		start := dec.InputOffset()
		base, _ := s.window()
		sp.base, sp.splices = int(base), sp.splices[:0]
		object := dec.PeekKind() == '{'
		var err error
		switch {
		case table && !object: // left out, as the token copier does
			err = dec.SkipValue()
		case table:
			err = sp.row()
		default:
			err = sp.item()
		}
		if err != nil {
			return s.failure(err)
		}
		end := dec.InputOffset()
		if end-base > math.MaxInt32 {
			return s.failure(errors.New("an item larger than 2 GiB"))
		}
		if object || !table {
			_, b := s.window()
			from, to := int(start-base), int(end-base)
			for b[from] == ',' || b[from] == ' ' || b[from] == '\n' || b[from] == '\r' || b[from] == '\t' {
				from++
			}
			if *wrote {
				if _, err := w.Write(comma); err != nil {
					return err
				}
			}
			*wrote = true
			if err := writeRange(w, b, from, to, sp.splices, text); err != nil {
				return err
			}
		}
		s.release(end)
	}
	// The array's end, and what follows it in the answer: read to check it,
	// not merged (the head is written).
	if _, err := dec.ReadToken(); err != nil {
		return s.failure(err)
	}
	for dec.PeekKind() == '"' {
		if _, err := dec.ReadToken(); err != nil {
			return s.failure(err)
		}
		if err := dec.SkipValue(); err != nil {
			return s.failure(err)
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return s.failure(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed, s.drop = true, true // a newline may follow
	s.memory.give(int(s.held))
	s.held, s.buf = 0, nil
	return nil
}

// failure is the error that fails the list when the member's answer failed
// after the list began.
func (s *memberStream) failure(err error) error {
	if err := s.memory.failed(); err != nil {
		return err // the members' failures are the bound's doing
	}
	s.mu.Lock()
	end := s.end
	s.mu.Unlock()
	const again = "; the fan-out list cannot be completed: list again, or select the clusters without it"
	var t answerTimeout
	switch {
	case errors.As(end, &t):
		return failed(http.StatusGatewayTimeout, fmt.Sprintf("upstream cluster %q: %s%s", s.cluster, t, again))
	case end != nil:
		return failed(http.StatusBadGateway, fmt.Sprintf("upstream cluster %q: %s%s", s.cluster, end, again))
	}
	return failed(http.StatusBadGateway, fmt.Sprintf("upstream cluster %q: its answer is not a JSON list: %v%s", s.cluster, err, again))
}
