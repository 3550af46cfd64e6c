package fanout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/klog/v2"
)

// memberWatch is one member's part of a merged watch. Its goroutine serves
// the member's watch request itself, through Member as a request naming the
// member is served, and takes the events out of the response as the reverse
// proxy writes it (eventWriter): an open member watch holds its request's
// goroutine and the HTTP/2 client's stream, and no reader of its own. When
// the member's watch ends, the same goroutine opens it again.
type memberWatch struct {
	h       *Handler
	req     *http.Request // the client's request
	path    string
	accept  string
	wq      *watchQuery
	cluster string
	events  chan<- event

	// last is the member's last resourceVersion; initialDone: its initial
	// events are over, or were not asked for.
	last        string
	initialDone bool
}

// opening is how a member answered a request for its watch.
type opening struct {
	code int
	// failure describes an answer that is not an open watch; "": open.
	failure string
	// status is the member's Status when it answered one.
	status *metav1.Status
	// warnings are the member's warnings when it answered.
	warnings []string
}

// follow opens the member's watch and passes its events on until ctx ends.
// The first answer, an opening or a failure to open, goes to report; a member that
// failed it waits for decided and tries again only if retry says so. Later, a
// watch that ends, ends with an ERROR event other than 410, or cannot be
// opened is opened again from the member's last resourceVersion, with
// backoff; a 410, in an ERROR event or when opening, ends the merged watch.
func (m *memberWatch) follow(ctx context.Context, report func(opening), decided <-chan struct{}, retry func(code int) bool) {
	reported := false
	backoff := reopenBackoff
	for {
		o, ended, delivered := m.watchOnce(ctx, func(o opening) {
			if !reported {
				reported = true
				report(o)
			}
		})
		if !reported {
			reported = true
			report(o)
			select {
			case <-decided:
			case <-ctx.Done():
				return
			}
			if !retry(o.code) {
				return
			}
		}
		switch {
		case ended || ctx.Err() != nil:
			return
		case o.failure == "":
			if delivered > 0 {
				// It worked for a while: the next opening comes soon.
				backoff = reopenBackoff
			}
		case o.code == http.StatusGone || (o.status != nil && o.status.Reason == metav1.StatusReasonExpired):
			m.send(ctx, event{fatal: memberStatus(m.cluster, http.StatusGone, metav1.StatusReasonExpired, o.failure)})
			return
		}
		t := time.NewTimer(backoff.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (m *memberWatch) send(ctx context.Context, ev event) bool {
	select {
	case m.events <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// watchOnce serves one request for the member's watch, from where the member
// is, and passes its events on while it lasts; opened is called with the
// opening once the member answered 200. It returns how the member answered,
// whether the merged watch ends (a 410 ERROR event was passed on, or the
// client is gone), and how many events it passed on. A member
// that sends no response headers within MemberTimeout fails with 504.
func (m *memberWatch) watchOnce(ctx context.Context, opened func(opening)) (o opening, ended bool, delivered int) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	rec := &recorder{}
	inner := m.req.Clone(warning.WithWarningRecorder(actx, rec))
	inner.URL.RawQuery = m.wq.memberValues(m.cluster, m.last, m.initialDone)
	inner.Header.Set("Accept", m.accept)
	// Uncompressed: a member's watch stream lasts for hours, and the
	// decompressor of a compressed one holds its window for as long; its
	// events, flushed one by one, compress poorly anyway.
	inner.Header.Set("Accept-Encoding", "identity")
	w := &eventWriter{header: http.Header{}, m: m, ctx: actx, stop: cancel}
	w.onAnswer = func() {
		o.code = w.code
		o.warnings = append(rec.get(), memberWarnings(w.header)...)
		if o.code == http.StatusOK {
			opened(o)
		}
	}
	timeout := m.h.memberTimeout()
	timer := time.AfterFunc(timeout, func() {
		if w.state.CompareAndSwap(waiting, timedOut) {
			cancel()
		}
	})
	aborted := m.h.serveMember(w, inner, m.cluster, m.path)
	timer.Stop()
	switch {
	case w.state.Load() == timedOut:
		o.code, o.failure = http.StatusGatewayTimeout, fmt.Sprintf("no watch opened within %s", timeout)
	case ctx.Err() != nil && w.answer(http.StatusServiceUnavailable):
		o.failure = "the client went away"
	case aborted && w.answer(http.StatusBadGateway):
		// Before any byte: a failure; after: the stream ends, and is opened again.
		o.failure = statusCause(m.cluster, o.code, []byte("the member's answer broke off"))
	case w.answer(http.StatusOK): // the member wrote nothing: an empty watch, which ended
	case o.code != http.StatusOK:
		o.failure = statusCause(m.cluster, o.code, w.body.Bytes())
		var st metav1.Status
		if json.Unmarshal(w.body.Bytes(), &st) == nil && st.Kind == "Status" {
			o.status = &st
		}
	}
	return o, w.ended, w.delivered
}

// States of an eventWriter: waiting for the member's status line, answered,
// or given up waiting.
const (
	waiting int32 = iota
	answered
	timedOut
)

// maxEventBytes bounds one watch event of a member: an object of etcd is at
// most 1.5 MiB, its Table row about as large. A member that sends more
// without ending an event is broken; its watch is opened again.
const maxEventBytes = 16 << 20

// eventWriter is the ResponseWriter of a member's watch request. With 200, it
// takes each event out of what the reverse proxy writes and passes it on, in
// the request's own goroutine; other answers are kept (64 KiB at most) for
// their Status.
type eventWriter struct {
	header http.Header
	m      *memberWatch
	ctx    context.Context
	// stop ends the member's request: the reverse proxy then ends the
	// response as if the member had.
	stop     context.CancelFunc
	onAnswer func() // called once with code set, in the request's goroutine

	state atomic.Int32
	code  int
	body  bytes.Buffer // of an answer that is not 200

	// buf holds what came of an event whose end has not; next is the length
	// at which to look for an event's end even without a newline.
	buf  []byte
	next int
	// done: events are no longer taken (the member's watch ended for the
	// merge, or the client is gone); ended: the merged watch ends.
	done, ended bool
	delivered   int
}

func (w *eventWriter) Header() http.Header { return w.header }

// answer records code as the member's answer, unless one was recorded or
// the writer gave up waiting; it tells whether code was recorded.
func (w *eventWriter) answer(code int) bool {
	if !w.state.CompareAndSwap(waiting, answered) {
		return false
	}
	w.code = code
	w.onAnswer()
	return true
}

func (w *eventWriter) WriteHeader(code int) {
	if code >= http.StatusOK {
		w.answer(code)
	}
}

// Write takes the events out of b. It never fails: to end the member's
// watch it stops the request, which the reverse proxy then ends cleanly.
func (w *eventWriter) Write(b []byte) (int, error) {
	w.answer(http.StatusOK)
	switch {
	case w.state.Load() != answered || w.done:
	case w.code != http.StatusOK:
		_, _ = w.body.Write(b[:min(len(b), max(0, 64<<10-w.body.Len()))])
	default:
		w.takeFrom(b)
	}
	return len(b), nil
}

// takeFrom takes the events out of b, after what buf holds of an event;
// what comes of the next event is kept in buf. An idle watch holds no
// buffer: the events that come whole in one write (most) are read from b.
func (w *eventWriter) takeFrom(b []byte) {
	data := b
	if len(w.buf) > 0 {
		w.buf = append(w.buf, b...)
		data = w.buf
	}
	taken := 0
	// Kubernetes ends every event with a newline; a member that does not
	// is read when what it sent doubled.
	if bytes.IndexByte(b, '\n') >= 0 || len(data) >= w.next {
		taken = w.takeEvents(data)
		w.next = 2 * (len(data) - taken)
	}
	switch {
	case w.done:
		return
	case taken == len(data):
		w.buf = nil
	case len(w.buf) > 0: // data is buf
		w.buf = w.buf[:copy(w.buf, data[taken:])]
	default: // data is b, the reverse proxy's
		w.buf = bytes.Clone(data[taken:])
	}
	if len(w.buf) > maxEventBytes {
		klog.FromContext(w.ctx).V(2).Info("Fan-out member watch sent an event larger than the gateway takes; opening it again", "upstreamcluster", w.m.cluster, "bytes", len(w.buf))
		w.end(false)
	}
}

// Flush: every write is read as it is made.
func (w *eventWriter) Flush() {}

// takeEvents passes on every complete event in data and returns how many
// bytes of it they took.
func (w *eventWriter) takeEvents(data []byte) (taken int) {
	d := newDecoder(data)
	for !w.done {
		v, err := d.ReadValue()
		if err == io.EOF {
			return len(data) // white space only
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			break // the rest of an event is to come
		}
		taken = int(d.InputOffset())
		if err == nil {
			err = w.take(bytes.Clone(v)) // v is in data, which is reused
		}
		if err != nil {
			klog.FromContext(w.ctx).V(2).Info("Fan-out member watch sent an event that is not one; opening it again", "upstreamcluster", w.m.cluster, "err", err)
			w.end(false)
		}
	}
	return taken
}

// take passes one event on; an error means it is not a watch event.
func (w *eventWriter) take(b []byte) error {
	ev, err := parseEvent(b)
	if err != nil {
		return err
	}
	m := w.m
	if ev.typ == "ERROR" {
		var st metav1.Status
		_ = json.Unmarshal(ev.object, &st)
		msg := st.Message
		if msg == "" {
			msg = string(ev.object)
		}
		if st.Code != http.StatusGone && st.Reason != metav1.StatusReasonExpired && st.Reason != metav1.StatusReasonGone {
			// Any other error ends this member's watch only (e.g. a
			// restarted server whose cache is not ready): open it again.
			klog.FromContext(w.ctx).V(2).Info("Fan-out member watch ended with an error; opening it again", "upstreamcluster", m.cluster, "message", msg)
			w.end(false)
			return nil
		}
		m.send(w.ctx, event{fatal: memberStatus(m.cluster, http.StatusGone, metav1.StatusReasonExpired, msg)})
		w.end(true)
		return nil
	}
	if ev.resourceVersion != "" {
		m.last = ev.resourceVersion
	}
	if ev.initialEnd {
		m.initialDone = true
	}
	ev.cluster = m.cluster
	if !m.send(w.ctx, ev) {
		w.end(true) // the client is gone
		return nil
	}
	w.delivered++
	return nil
}

// end stops taking events and ends the member's request; ended: the merged
// watch ends too.
func (w *eventWriter) end(ended bool) {
	w.done, w.ended = true, ended
	w.buf = nil
	w.stop()
}
