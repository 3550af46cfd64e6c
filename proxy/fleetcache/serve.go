package fleetcache

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/memberauthz"
	"github.com/kubewharf/kube-gateway/proxy/request"
)

// Reads answers a member's part of a fan-out list or watch from its cache
// when the cache can answer it as the member would (handler.MemberCache,
// after CONNECT admission):
//   - the resource is cached for the member, and the cache listed it once;
//   - the answer is JSON, or Tables of a watch from a resourceVersion
//     (kubectl get --watch after its list): the rows the member's printers
//     made when the objects changed (tables.go); other Tables, and
//     PartialObjectMetadata, go to the member;
//   - resourceVersion "0" (any state, what informers list with), a
//     resourceVersion the cache has reached (not older than), or none (a
//     consistent read): served once one small list of the member (limit=1,
//     the cache identity) says the cache holds its current
//     resourceVersion, else the member answers;
//   - a watch from a resourceVersion the member has reached, the cache not
//     yet (after a list the member answered): the cache tells the changes
//     after it as they come;
//   - selectors on labels, and on metadata.name and metadata.namespace;
//   - the member allows the user to list (or watch) the resource there: its
//     SubjectAccessReview for the identity the gateway would impersonate,
//     kept a short while (memberauthz); denied is the member's 403.
//
// A stale cache (its member's watch failing) still answers reads that take
// any state, with a warning saying since when.
type Reads struct {
	Manager *Manager
	// Lookup returns the compiled cluster of a member (its identity mapping
	// and authorizer).
	Lookup func(name string) (*cluster.Cluster, error)
	// Served, when set, is told how each member read was answered: from the
	// cache, or by the member (and why).
	Served func(cluster, verb, result string)
}

// Results told to Reads.Served.
const (
	ServedFromCache = "cache"
	ServedForbidden = "forbidden"
	// Answered by the member: ...
	ServedLiveNotCached  = "not_cached"  // no synced cache of the resource
	ServedLiveQuery      = "query"       // Table, a selector or parameter the cache does not apply
	ServedLiveBehind     = "behind"      // the cache has not reached the resourceVersion asked for
	ServedLiveAuthFailed = "authz_error" // the member could not answer the review
)

// readQuery is a member read the cache may answer.
type readQuery struct {
	attrs         request.Attributes
	gvr           schema.GroupVersionResource
	watch         bool
	rv            string
	limit         int64
	cont          *pageToken
	labels        labels.Selector
	fields        fields.Selector
	bookmarks     bool
	initialEvents bool
	// table: the client asked for Tables, with the object as includeObject
	// says.
	table         bool
	includeObject metav1.IncludeObjectPolicy
}

// cacheParams are the query parameters the cache applies; any other sends
// the read to the member.
var cacheParams = map[string]bool{
	"resourceVersion": true, "resourceVersionMatch": true, "limit": true, "continue": true,
	"labelSelector": true, "fieldSelector": true, "watch": true, "allowWatchBookmarks": true,
	"sendInitialEvents": true, "timeoutSeconds": true, "timeout": true, "includeObject": true,
}

// parseRead tells whether req, a member's part of a fan-out read, is one the
// cache can answer.
func parseRead(req *http.Request, path string) (*readQuery, bool) {
	if req.Method != http.MethodGet {
		return nil, false
	}
	// The Accept header is parsed only when it asks for a conversion: once
	// per member of a fan-out.
	accept := req.Header.Get("Accept")
	table := false
	if strings.Contains(accept, "as=") {
		if table = request.WantsTable(accept); !table { // PartialObjectMetadata: not what the cache holds
			return nil, false
		}
	}
	q, err := url.ParseQuery(req.URL.RawQuery)
	if err != nil {
		return nil, false
	}
	for k := range q {
		if !cacheParams[k] {
			return nil, false
		}
	}
	u, _ := genericapirequest.UserFrom(req.Context())
	a, err := request.Parse(req.Method, path, req.URL.RawQuery, u)
	if err != nil || !a.IsResourceRequest || a.Subresource != "" || (a.Verb != "list" && a.Verb != "watch") {
		return nil, false
	}
	r := &readQuery{attrs: a, gvr: schema.GroupVersionResource{Group: a.APIGroup, Version: a.APIVersion, Resource: a.Resource},
		watch: a.Verb == "watch", rv: q.Get("resourceVersion"), bookmarks: q.Get("allowWatchBookmarks") == "true",
		initialEvents: q.Get("sendInitialEvents") == "true", table: table, includeObject: metav1.IncludeObjectPolicy(q.Get("includeObject"))}
	switch r.includeObject {
	case "", metav1.IncludeNone, metav1.IncludeMetadata, metav1.IncludeObject:
	default: // the member's 400
		return nil, false
	}
	// Tables: the watch of changes after a resourceVersion (kubectl get
	// --watch after its list), whose rows the member's printers made when
	// the objects changed, as a member's watch would; without bookmarks,
	// which a server may leave out (a member's are rows of an empty
	// object). A list's rows, or a watch's initial ones, would be as of
	// each object's last change where the member's tell times relative to
	// now (AGE).
	if table && (!r.watch || r.rv == "" || r.rv == "0" || r.initialEvents) {
		return nil, false
	}
	switch q.Get("resourceVersionMatch") {
	case "", string(metav1.ResourceVersionMatchNotOlderThan):
	default: // Exact: a past state the cache does not keep
		return nil, false
	}
	if l := q.Get("limit"); l != "" && !r.watch {
		if r.limit, err = strconv.ParseInt(l, 10, 64); err != nil || r.limit < 0 {
			return nil, false
		}
	}
	if c := q.Get("continue"); c != "" {
		if r.watch {
			return nil, false
		}
		if r.cont, err = parsePageToken(c); err != nil {
			return nil, false // not the cache's: the member's own
		}
	}
	if r.labels, err = labels.Parse(q.Get("labelSelector")); err != nil {
		return nil, false
	}
	if r.fields, err = fields.ParseSelector(q.Get("fieldSelector")); err != nil {
		return nil, false
	}
	for _, f := range r.fields.Requirements() {
		if (f.Field != "metadata.name" && f.Field != "metadata.namespace") || f.Operator == selection.In || f.Operator == selection.NotIn {
			return nil, false
		}
	}
	return r, true
}

// matches tells whether o is in the read: its namespace and selectors.
func (r *readQuery) matches(o *Object) bool {
	if o == nil || (r.attrs.Namespace != "" && o.Namespace != r.attrs.Namespace) {
		return false
	}
	// The field set is a map made per object: only for a field selector.
	return r.labels.Matches(labels.Set(o.Labels)) &&
		(r.fields.Empty() || r.fields.Matches(fields.Set{"metadata.name": o.Name, "metadata.namespace": o.Namespace}))
}

// ServeMember answers req for member name from the cache and reports true,
// or reports false, having written nothing, when the member must answer.
func (r *Reads) ServeMember(w http.ResponseWriter, req *http.Request, name, path string) bool {
	q, ok := parseRead(req, path)
	served := func(result string) {
		if r.Served == nil {
			return
		}
		verb := "list"
		if q != nil && q.watch || q == nil && (req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1") {
			verb = "watch"
		}
		r.Served(name, verb, result)
	}
	if !ok {
		served(ServedLiveQuery)
		return false
	}
	// live leaves the read to the member; a page of a list the cache began
	// cannot go on there (its continue token is the cache's): 410, as an
	// expired token, and the client lists again.
	live := func(result string) bool {
		served(result)
		if q.cont == nil {
			return false
		}
		writeStatus(w, apierrors.NewResourceExpired("the gateway's cache that answered the first page of this list can no longer answer the next: list again from the start").Status())
		return true
	}
	rc, access := r.Manager.lookup(name, q.gvr)
	if rc == nil {
		return live(ServedLiveNotCached)
	}
	st := rc.current()
	if _, listKind := rc.store.Kinds(); st.lastSyncTime.IsZero() || listKind == "" {
		return live(ServedLiveNotCached)
	}
	if q.table && rc.store.Columns() == nil { // the member answered no Table
		return live(ServedLiveQuery)
	}
	c, err := r.Lookup(name)
	if err != nil {
		return live(ServedLiveAuthFailed)
	}
	u, _ := genericapirequest.UserFrom(req.Context())
	attrs := authorizer.AttributesRecord{User: memberauthz.Impersonated(c.Impersonation.Identity(u)), Verb: q.attrs.Verb,
		APIGroup: q.gvr.Group, APIVersion: q.gvr.Version, Resource: q.gvr.Resource, Namespace: q.attrs.Namespace,
		Name: q.attrs.Name, ResourceRequest: true}
	decision, reason, err := c.Authorizer.Authorize(req.Context(), attrs)
	switch {
	case err != nil:
		return live(ServedLiveAuthFailed)
	case decision != authorizer.DecisionAllow:
		served(ServedForbidden)
		writeStatus(w, responsewriters.ForbiddenStatusError(attrs, reason).Status())
		return true
	}
	// Freshness: what the read asks of the cache's resourceVersion.
	switch {
	case q.rv == "0", q.cont != nil:
		// Any state; a page goes on from where the cache's first page was.
	case q.rv == "":
		// Consistent: a list, a watch from now, initial events of a watch.
		if !r.caughtUp(req.Context(), rc, access, q.gvr) {
			return live(ServedLiveBehind)
		}
	case q.watch:
		// From q.rv: the cache tells the changes after it once it gets
		// them, if the member has reached it (a resourceVersion of the
		// member's own list; one it has not is the member's error).
		if !Reached(rc.store.ResourceVersion(), q.rv) && !r.memberReached(req.Context(), rc, access, q.gvr, q.rv) {
			return live(ServedLiveBehind)
		}
	default: // a list not older than q.rv
		if !Reached(rc.store.ResourceVersion(), q.rv) {
			return live(ServedLiveBehind)
		}
	}
	if !st.synced {
		warning.AddWarning(req.Context(), "", staleWarning(st))
	}
	if q.watch {
		// Counted once it starts: a watch lasts minutes.
		if !r.watch(w, req, rc, q, watchLifetime(c.Authorizer.AllowTTL()), func() { served(ServedFromCache) }) {
			return live(ServedLiveBehind)
		}
		return true
	}
	r.list(w, rc, q)
	served(ServedFromCache)
	return true
}

// staleWarning says the answer comes from a cache that stopped following
// its member, since when and why.
func staleWarning(st state) string {
	since := "for a moment"
	if !st.staleSince.IsZero() {
		since = "since " + st.staleSince.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("served from the gateway's cache, which has not followed the member %s (%s: %s)", since, st.reason, st.message)
}

// caughtUp tells whether the cache holds the member's current
// resourceVersion: asked of the member (memberVersion), unless the cache has
// not reached what the member said last time, which it then still has not (a
// member's resourceVersion only grows): a busy member's consistent reads
// cost it no extra request.
func (r *Reads) caughtUp(ctx context.Context, rc *resourceCache, access Access, gvr schema.GroupVersionResource) bool {
	if last := rc.memberRV.Load(); last != nil && !Reached(rc.store.ResourceVersion(), *last) {
		return false
	}
	current, ok := r.memberVersion(ctx, rc, access, gvr)
	return ok && Reached(rc.store.ResourceVersion(), current)
}

// memberReached tells whether the member has reached resourceVersion want:
// what it said last time, else asked again (memberVersion).
func (r *Reads) memberReached(ctx context.Context, rc *resourceCache, access Access, gvr schema.GroupVersionResource, want string) bool {
	if last := rc.memberRV.Load(); last != nil && Reached(*last, want) {
		return true
	}
	current, ok := r.memberVersion(ctx, rc, access, gvr)
	return ok && Reached(current, want)
}

// memberVersion asks the member its current resourceVersion of the resource
// (a consistent list of one object with the cache identity) and records it.
func (r *Reads) memberVersion(ctx context.Context, rc *resourceCache, access Access, gvr schema.GroupVersionResource) (string, bool) {
	if access == nil {
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, cluster.CallTimeout)
	defer cancel()
	obj, err := cache.ToListerWatcherWithContext(access.Source(gvr)).ListWithContext(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return "", false
	}
	l, err := meta.ListAccessor(obj)
	if err != nil {
		return "", false
	}
	current := l.GetResourceVersion()
	rc.memberRV.Store(&current)
	return current, true
}

// pageToken is where the next page of a cached list starts: after key, in
// the cache as it is then.
type pageToken struct {
	Key string `json:"k"`
	// Cache marks the token as the cache's, never a member's.
	Cache bool `json:"fleetCache"`
}

func (t *pageToken) encode() string {
	b, _ := json.Marshal(t)
	return base64.RawURLEncoding.EncodeToString(b)
}

func parsePageToken(s string) (*pageToken, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	var t pageToken
	if err := json.Unmarshal(b, &t); err != nil || !t.Cache {
		return nil, fmt.Errorf("not a fleet cache token")
	}
	return &t, nil
}

// list writes the member's list from the cache: the objects in key order
// (namespace/name, as kube-apiserver lists), a page of them with limit. The
// answer is built in one buffer of its final size.
func (r *Reads) list(w http.ResponseWriter, rc *resourceCache, q *readQuery) {
	n, _, _ := rc.store.Counts()
	items := make([]*Object, 0, n)
	rv := rc.store.List(func(o *Object) {
		if q.matches(o) {
			items = append(items, o)
		}
	})
	slices.SortFunc(items, func(a, b *Object) int { return strings.Compare(a.key, b.key) })
	if q.cont != nil {
		i, _ := slices.BinarySearchFunc(items, q.cont.Key, func(o *Object, k string) int { return strings.Compare(o.key, k) })
		for i < len(items) && items[i].key <= q.cont.Key {
			i++
		}
		items = items[i:]
	}
	meta := map[string]any{"resourceVersion": rv}
	if q.limit > 0 && int64(len(items)) > q.limit {
		rest := int64(len(items)) - q.limit
		items = items[:q.limit]
		meta["continue"] = (&pageToken{Key: items[len(items)-1].key, Cache: true}).encode()
		meta["remainingItemCount"] = rest
	}
	_, listKind := rc.store.Kinds()
	head, _ := json.Marshal(map[string]any{"kind": listKind, "apiVersion": q.gvr.GroupVersion().String(), "metadata": meta})
	head = head[:len(head)-1]
	const open, end = `,"items":[`, "]}"
	size := len(head) + len(open) + len(end)
	for _, o := range items {
		size += len(o.JSON) + 1
	}
	b := make([]byte, 0, size)
	b = append(append(b, head...), open...)
	for i, o := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, o.JSON...)
	}
	b = append(b, end...)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// watchLifetime bounds a watch served from the cache, as kube-apiserver
// bounds its own (--min-request-timeout, randomized): the fan-out opens it
// again, and the member's authorization is asked again once the answer that
// allowed it expired.
func watchLifetime(allowed time.Duration) time.Duration {
	return allowed + rand.N(allowed)
}

// watch serves the member's watch from the cache, calling started once it
// starts; false, having written nothing, when the cache cannot start from
// where it is asked.
func (r *Reads) watch(w http.ResponseWriter, req *http.Request, rc *resourceCache, q *readQuery, lifetime time.Duration, started func()) bool {
	from := q.rv
	if from == "0" || q.initialEvents {
		from = ""
	}
	objects, watcher, rv, ok := rc.store.Watch(from)
	if !ok {
		return false
	}
	defer watcher.Stop()
	started()
	itemKind, _ := rc.store.Kinds()
	apiVersion := q.gvr.GroupVersion().String()
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	var buf []byte
	// columns go with the first Table event only, as a member sends them.
	columns := rc.store.Columns()
	send := func(typ watch.EventType, o *Object) bool {
		buf = append(append(append(buf[:0], `{"type":"`...), typ...), `","object":`...)
		if q.table {
			buf = tableEvent(buf, o, columns, q.includeObject)
			columns = nil
		} else {
			buf = append(buf, o.JSON...)
		}
		buf = append(buf, "}\n"...)
		_, err := w.Write(buf)
		return err == nil
	}
	// Bookmarks are never Tables: a Table watch gets none (below).
	bookmark := func(rv string, initialEnd bool) *Object {
		md := map[string]any{"resourceVersion": rv}
		if initialEnd {
			md["annotations"] = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
		}
		b, _ := json.Marshal(map[string]any{"kind": itemKind, "apiVersion": apiVersion, "metadata": md})
		return &Object{JSON: b}
	}
	if from == "" {
		slices.SortFunc(objects, func(a, b *Object) int { return strings.Compare(a.key, b.key) })
		for _, o := range objects {
			if q.matches(o) && !send(watch.Added, o) {
				return true
			}
		}
		if q.initialEvents && !send(watch.Bookmark, bookmark(rv, true)) {
			return true
		}
	}
	if flusher != nil {
		flusher.Flush()
	}
	end := time.NewTimer(lifetime)
	defer end.Stop()
	for {
		select {
		case <-req.Context().Done():
			return true
		case <-end.C:
			return true
		case ev, open := <-watcher.Events():
			if !open {
				return true
			}
			var typ watch.EventType
			var obj *Object
			// As kube-apiserver's watch cache: a change that brings an
			// object into the selection is ADDED, one that takes it out
			// DELETED.
			now, before := q.matches(ev.Object), q.matches(ev.Prev)
			switch {
			case ev.Type == watch.Bookmark:
				if !q.bookmarks || q.table {
					continue
				}
				typ, obj = watch.Bookmark, bookmark(ev.ResourceVersion, false)
			case ev.Type == watch.Deleted:
				if !before {
					continue
				}
				typ, obj = watch.Deleted, ev.Object
			case now && before:
				typ, obj = watch.Modified, ev.Object
			case now:
				typ, obj = watch.Added, ev.Object
			case before:
				typ, obj = watch.Deleted, ev.Prev
			default:
				continue
			}
			if !send(typ, obj) {
				return true
			}
			if flusher != nil && len(watcher.Events()) == 0 {
				flusher.Flush()
			}
		}
	}
}

func writeStatus(w http.ResponseWriter, st metav1.Status) {
	st.Kind, st.APIVersion = "Status", "v1"
	b, _ := json.Marshal(st)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_, _ = w.Write(b)
}
