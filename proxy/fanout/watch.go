package fanout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/warning"
)

// reopenBackoff paces the re-opening of a member watch that ended; it is
// reset once a watch opened.
var reopenBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: 10 * time.Second}

// watchQuery is a fan-out watch's query, read once: what each member is asked
// and what the merged stream does.
type watchQuery struct {
	values url.Values
	// resume holds each member's resourceVersion from a composite; nil when
	// the client asked "" or "0", which every member is asked as it is.
	resume map[string]string
	// bookmarks: the client asked for BOOKMARK events.
	bookmarks bool
	// initialEvents: the client asked for sendInitialEvents=true, so the
	// stream has one BOOKMARK marking the end of every member's initial events.
	initialEvents bool
	// timeout is the client's timeoutSeconds, bounding the whole watch.
	timeout time.Duration
}

func parseWatchQuery(query string) (*watchQuery, error) {
	q, _ := url.ParseQuery(query) // memberQuery parsed it already
	wq := &watchQuery{values: q, bookmarks: q.Get("allowWatchBookmarks") == "true", initialEvents: q.Get("sendInitialEvents") == "true"}
	if rv := q.Get("resourceVersion"); rv != "" && rv != "0" {
		versions, err := ParseCompositeResourceVersion(rv)
		if err != nil {
			// 410, so that a reflector lists again: the last resourceVersion
			// it saw may be an object's own, when the bookmark that followed
			// the object's event did not reach it.
			return nil, apierrors.NewResourceExpired(fmt.Sprintf("resourceVersion %q is not a fan-out resourceVersion (%v), maybe an object's own: list again, and watch from the resourceVersion of the fan-out list or of a bookmark, or from \"\" or \"0\"", rv, err))
		}
		wq.resume = versions
	}
	if t := q.Get("timeoutSeconds"); t != "" {
		s, err := strconv.ParseInt(t, 10, 64)
		if err != nil || s < 0 {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("timeoutSeconds %q is not a non-negative integer", t))
		}
		wq.timeout = time.Duration(s) * time.Second
	}
	// The gateway bounds the whole watch; members end on their own schedule
	// and are re-opened. Members always send bookmarks: they keep each
	// member's resourceVersion current in the composite.
	q.Del("timeoutSeconds")
	q.Set("allowWatchBookmarks", "true")
	return wq, nil
}

// memberValues is the query of a member's watch: at its own resourceVersion
// from the composite, or from last when it is re-opened after its initial
// events (a plain watch from there on).
func (wq *watchQuery) memberValues(cluster, last string, initialDone bool) string {
	q := make(url.Values, len(wq.values))
	for k, v := range wq.values {
		q[k] = v
	}
	switch {
	case last != "" && (initialDone || !wq.initialEvents):
		q.Set("resourceVersion", last)
		q.Del("sendInitialEvents")
		q.Del("resourceVersionMatch")
	case wq.resume != nil:
		// A member the composite does not name (e.g. it failed the list)
		// starts from its current state, which its ADDED events bring.
		q.Set("resourceVersion", wq.resume[cluster])
	}
	return q.Encode()
}

// checkResume refuses a composite naming a cluster that is not selected now:
// the client holds its objects, and only a new list drops them.
func (wq *watchQuery) checkResume(members []member) error {
	selected := make(map[string]bool, len(members))
	for _, m := range members {
		selected[m.name] = true
	}
	for c := range wq.resume {
		if !selected[c] {
			return apierrors.NewResourceExpired(fmt.Sprintf("the fan-out resourceVersion names upstream cluster %q, which is no longer selected for this user: list again", c))
		}
	}
	return nil
}

func (h *Handler) memberTimeout() time.Duration {
	if h.MemberTimeout > 0 {
		return h.MemberTimeout
	}
	return DefaultMemberTimeout
}

// event is one member's watch event, or the end of the merged watch.
type event struct {
	cluster string
	typ     string
	// object is the event's object as the member sent it; what the merge
	// needs of it is read into the fields below.
	object          jsontext.Value
	kind            string
	apiVersion      string
	resourceVersion string
	// initialEnd: a bookmark marking the end of the member's initial events.
	initialEnd bool
	// fatal ends the merged watch with this Status as an ERROR event.
	fatal *metav1.Status
}

// serveWatch serves a fan-out watch: one watch per member, merged into one
// JSON watch stream.
func (h *Handler) serveWatch(w http.ResponseWriter, req *http.Request, members []member, path string, strict bool) error {
	wq, err := parseWatchQuery(req.URL.RawQuery)
	if err != nil {
		return err
	}
	if err := wq.checkResume(members); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()
	if wq.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, wq.timeout)
		defer cancel()
	}

	// Every member's watch is opened at once, each in a goroutine that
	// follows it from then on; a watch holds its member for as long as it
	// lasts, so Parallel does not apply. Their events wait in the buffer
	// until the merged stream begins: a burst of them (one change seen by
	// many members) is written before the stream is flushed once.
	events := make(chan event, eventBuffer)
	type memberOpening struct {
		i int
		o opening
	}
	answers := make(chan memberOpening, len(members))
	decided := make(chan struct{})
	retryFailed := false // set before decided is closed
	var followers sync.WaitGroup
	// Every member goroutine has returned before the handler does.
	defer followers.Wait()
	defer cancel()
	accept := "application/json"
	if wantsTable(req.Header.Get("Accept")) {
		accept = tableAccept
	}
	for i, m := range members {
		mw := &memberWatch{h: h, req: req, path: path, accept: accept, wq: wq, cluster: m.name, events: events, initialDone: !wq.initialEvents}
		followers.Add(1)
		go func() {
			defer followers.Done()
			mw.follow(ctx, func(o opening) { answers <- memberOpening{i, o} }, decided,
				func(code int) bool { return retryFailed && transient(code) })
		}()
	}
	openings := make([]opening, len(members))
	for range members {
		a := <-answers
		openings[a.i] = a.o
	}
	if err := reportOpenings(req, members, openings, strict); err != nil {
		return err
	}
	retryFailed = !strict
	close(decided)

	writeMerged(ctx, w, req, wq, members, openings, events)
	return nil
}

// writeMerged writes the merged watch stream of the members that opened:
// their events as they come, until ctx ends or a member's 410 ends it.
func writeMerged(ctx context.Context, w http.ResponseWriter, req *http.Request, wq *watchQuery, members []member, openings []opening, events <-chan event) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flush := func() { _ = http.NewResponseController(w).Flush() }
	flush()

	versions := &versionSet{}
	for c, rv := range wq.resume {
		versions.set(c, rv)
	}
	// The members' initial events are pending until each sent its bookmark;
	// wq is shared with the members' goroutines, so this is a copy.
	initialEvents := wq.initialEvents
	pendingInitial := map[string]bool{}
	if initialEvents {
		for i, o := range openings {
			if o.failure == "" {
				pendingInitial[members[i].name] = true
			}
		}
	}
	c := newCopier(w)
	table := tableColumns{}
	// A client that takes bookmarks (client-go's reflectors do) gets the
	// events' objects with their own resourceVersions, as a list's items,
	// and one bookmark with the composite resourceVersion before every
	// flush: its store does not keep a composite, which grows with the
	// members, in every object, and a burst of events carries one. Tables
	// (kubectl get --watch) keep the composite in every event.
	coalesce := wq.bookmarks && !wantsTable(req.Header.Get("Accept"))
	var composite struct {
		pending          bool // events were written since the last one
		kind, apiVersion string
	}
	flushAll := func() {
		if composite.pending {
			composite.pending = false
			mark := &event{typ: "BOOKMARK", object: bookmarkObject(composite.kind, composite.apiVersion, false)}
			if err := c.writeEvent(mark, versions.composite(), &table); err != nil {
				return // the client is gone
			}
		}
		flush()
	}
	relay(ctx, events, func(ev *event) (wrote, done bool) {
		if ev.fatal != nil {
			// The client lists again: no bookmark after the ERROR.
			composite.pending = false
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "ERROR", "object": ev.fatal})
			return true, true
		}
		if ev.resourceVersion != "" {
			versions.set(ev.cluster, ev.resourceVersion)
		}
		ownRV := coalesce // the object keeps its own resourceVersion
		if coalesce {
			composite.pending = true
			if ev.kind != "" {
				composite.kind, composite.apiVersion = ev.kind, ev.apiVersion
			}
		}
		if ev.typ == "BOOKMARK" {
			switch {
			case ev.initialEnd:
				delete(pendingInitial, ev.cluster)
				if !initialEvents || len(pendingInitial) > 0 {
					return coalesce, false
				}
				// The end of every member's initial events: one bookmark.
				// It names no cluster: it marks every member's.
				ev.object = bookmarkObject(ev.kind, ev.apiVersion, true)
				ev.cluster = ""
				initialEvents = false
				composite.pending, ownRV = false, false
			case coalesce: // passed on in the bookmark of the flush
				return true, false
			case !wq.bookmarks:
				return false, false
			}
		}
		var rv jsontext.Value
		if !ownRV {
			rv = versions.composite()
		}
		if err := c.writeEvent(ev, rv, &table); err != nil {
			return false, true // the client is gone
		}
		return true, false
	}, flushAll)
}

// reportOpenings names every member that failed to open its watch in a
// warning, with its own warnings, and fails the merged watch when a member
// answered 410, when none opened, or with strict when any failed.
func reportOpenings(req *http.Request, members []member, openings []opening, strict bool) error {
	var failures []string
	codes := map[int]bool{}
	opened := slices.ContainsFunc(openings, func(o opening) bool { return o.failure == "" })
	for i, o := range openings {
		cluster := members[i].name
		for _, w := range o.warnings {
			warning.AddWarning(req.Context(), "", fmt.Sprintf("upstream cluster %q: %s", cluster, w))
		}
		if o.failure == "" {
			continue
		}
		if o.code == http.StatusGone {
			return failed(http.StatusGone, fmt.Sprintf("upstream cluster %q: %s", cluster, o.failure))
		}
		failures = append(failures, fmt.Sprintf("%q: %s", cluster, o.failure))
		codes[o.code] = true
		note := ""
		if transient(o.code) && opened && !strict {
			// Unreachable, overloaded, slow: it joins the watch once it opens.
			note = " (retried in the background: its events follow once it opens)"
		}
		warning.AddWarning(req.Context(), "", fmt.Sprintf("upstream cluster %q: %s%s", cluster, o.failure, note))
	}
	switch {
	case !opened:
		code := http.StatusServiceUnavailable
		if len(codes) == 1 {
			for c := range codes {
				code = c
			}
		}
		return failed(code, "no upstream cluster opened the watch: "+strings.Join(failures, "; "))
	case strict && len(failures) > 0:
		return failed(http.StatusServiceUnavailable, fmt.Sprintf("%d of %d upstream clusters failed the watch (%s=true): %s",
			len(failures), len(members), StrictParam, strings.Join(failures, "; ")))
	}
	return nil
}

// relay hands each event to handle until ctx ends or handle is done, and
// flushes what handle wrote once no event waits: a burst of events (one
// change seen by many members) is flushed once, and an event that is not
// passed on (a bookmark) never holds back those written before it.
func relay(ctx context.Context, events <-chan event, handle func(*event) (wrote, done bool), flush func()) {
	unflushed := false
	// What was written goes out whole when the watch ends, with what flush
	// adds to keep it resumable (a bookmark): it may end on its
	// timeoutSeconds while events keep coming.
	defer func() {
		if unflushed {
			flush()
		}
	}()
	for {
		if unflushed && len(events) == 0 {
			flush()
			unflushed = false
		}
		var ev event
		select {
		case <-ctx.Done():
			return
		case ev = <-events:
		}
		wrote, done := handle(&ev)
		unflushed = unflushed || wrote
		if done {
			return
		}
	}
}

// eventBuffer is how many member events may wait for the merged stream.
const eventBuffer = 64

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

// transient tells whether a member that failed to open a watch may open it
// later: not a refusal (403) or a resource it does not serve (404).
func transient(code int) bool {
	return code >= http.StatusInternalServerError || code == http.StatusTooManyRequests
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

func memberStatus(cluster string, code int, reason metav1.StatusReason, msg string) *metav1.Status {
	return &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: reason,
		Message: fmt.Sprintf("upstream cluster %q: %s", cluster, strings.TrimPrefix(msg, fmt.Sprintf("upstream cluster %q: ", cluster))),
	}
}
