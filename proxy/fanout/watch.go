package fanout

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/kubewharf/kube-gateway/proxy/request"
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
	if request.WantsTable(req.Header.Get("Accept")) {
		accept = request.TableAccept
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
	coalesce := wq.bookmarks && !request.WantsTable(req.Header.Get("Accept"))
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

// transient tells whether a member that failed to open a watch may open it
// later: not a refusal (403) or a resource it does not serve (404).
func transient(code int) bool {
	return code >= http.StatusInternalServerError || code == http.StatusTooManyRequests
}

func memberStatus(cluster string, code int, reason metav1.StatusReason, msg string) *metav1.Status {
	return &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: reason,
		Message: fmt.Sprintf("upstream cluster %q: %s", cluster, strings.TrimPrefix(msg, fmt.Sprintf("upstream cluster %q: ", cluster))),
	}
}
