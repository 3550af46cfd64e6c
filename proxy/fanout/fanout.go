// Package fanout serves one request over many member clusters: the name
// segment of .../upstreamclusters/{name}/proxy/{path} is "*" (every
// UpstreamCluster) or a label selector of UpstreamClusters (e.g. "env=prod"),
// which no UpstreamCluster name can be. It serves lists (merged into one List
// or Table, every item annotated with its cluster; streamed as the members
// answer, see stream.go; paged across members with limit and continue, see
// page), watches (one per member, merged into one stream under composite
// resourceVersions, see serveWatch) and discovery (from one member); other
// verbs get a Status saying so.
//
// Each member is asked through the same entry as a request naming it
// (proxy/handler: CONNECT admission, lookup, forward.Forwarder), so dispatch policies, flow
// control, impersonation, retries and metrics apply per member as for any
// request.
package fanout

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericfeatures "k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/request"
)

// ClusterAnnotation names the member cluster of every item of a fan-out list.
const ClusterAnnotation = "gateway.kubewharf.io/cluster"

// StrictParam is the query parameter that makes a fan-out list fail when any
// member fails ("true"); the gateway removes it before asking members.
const StrictParam = "gateway.kubewharf.io/strict"

// Defaults of Handler.
const (
	// DefaultParallel: each member is asked once whatever the parallelism,
	// so it only bounds the gateway's own concurrent work; a list over
	// members far away takes about members / parallelism round trips. 64
	// members at once were also faster than 8 on loopback, with no more CPU
	// (make bench-scale).
	DefaultParallel      = 64
	DefaultMemberTimeout = 30 * time.Second
	// DefaultListMemory is the gateway's default bound of ListMemory, a
	// quantity: a quarter of the chart's memory limit, with the buffers'
	// slack half of it.
	DefaultListMemory = "256Mi"
)

// MemberFunc serves one request for one member cluster, as a request naming
// that cluster is served (the data plane's entry, proxy/handler).
type MemberFunc func(w http.ResponseWriter, req *http.Request, name, path string)

// Lister lists UpstreamClusters; the registry's store is one.
type Lister interface {
	List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error)
}

// Handler serves fan-out requests.
type Handler struct {
	// Member serves the request for one member; required.
	Member MemberFunc
	// Clusters lists the UpstreamClusters to select from; required.
	Clusters Lister
	// Authorizer must allow upstreamclusters/proxy on each selected member for
	// the user (the hub only checked the name segment); a member it does not
	// allow is left out with a warning. Required.
	Authorizer authorizer.Authorizer
	// Serializer encodes errors as Status objects; required.
	Serializer runtime.NegotiatedSerializer
	// Parallel bounds the members asked at once; 0: DefaultParallel.
	Parallel int
	// MemberTimeout bounds each member's answer; 0: DefaultMemberTimeout.
	MemberTimeout time.Duration
	// ListMemory bounds the member answers that fan-out lists hold; nil: no
	// bound.
	ListMemory *ListMemory
}

// IsFanOut tells whether a name segment selects many clusters: "*", or a
// label selector, which holds characters an UpstreamCluster name (a DNS
// subdomain) cannot. It does not allocate: every proxied request asks.
func IsFanOut(name string) bool {
	return name == "*" || strings.ContainsAny(name, "=!,() ")
}

// Serve serves a request whose name segment selects many clusters.
func (h *Handler) Serve(w http.ResponseWriter, req *http.Request, name, path string) {
	fail := func(err error) {
		responsewriters.ErrorNegotiated(err, h.Serializer, gatewayv1alpha1.SchemeGroupVersion, w, req)
	}
	selector, err := parseSelector(name)
	if err != nil {
		fail(err)
		return
	}
	mq, err := memberQuery(req.URL.RawQuery)
	if err != nil {
		fail(err)
		return
	}
	u, _ := genericapirequest.UserFrom(req.Context())
	attrs, err := request.Parse(req.Method, path, mq.query, u)
	if err != nil {
		fail(apierrors.NewBadRequest(err.Error()))
		return
	}
	kind := classify(req, &attrs)
	if kind == unsupported {
		fail(unsupportedError(req, &attrs))
		return
	}
	var page *continueToken
	if kind == list && mq.cont != "" {
		if page, err = parseContinue(mq.cont); err != nil {
			fail(err)
			return
		}
	}
	members, err := h.selectMembers(req, name, selector)
	if err != nil {
		fail(err)
		return
	}
	inner := req.Clone(req.Context())
	inner.URL.RawQuery = mq.query
	switch {
	case kind == discovery:
		h.Member(w, inner, firstReady(members), path)
		return
	case kind == watch:
		if err := h.serveWatch(w, inner, members, path, mq.strict); err != nil {
			fail(err)
		}
		return
	}
	// The members' answers are held until the list writes them; a list that
	// goes over the memory bound cancels its member requests.
	paged := mq.limit > 0 || page != nil
	ctx, cancel := context.WithCancel(req.Context())
	c := &listCall{req: inner.WithContext(ctx), path: path, accept: "application/json", timeout: h.memberTimeout(), memory: h.ListMemory.newHold(cancel, paged)}
	defer func() {
		cancel()
		c.running.Wait() // the member requests write into the list's memory
		c.memory.release()
	}()
	if request.WantsTable(req.Header.Get("Accept")) {
		c.accept = request.TableAccept
	}
	var merged *mergedList
	var warnings []string
	if paged {
		merged, warnings, err = h.page(c, members, mq, page)
	} else {
		merged, warnings, err = h.list(c, members, mq.strict)
	}
	if err := c.memory.failed(); err != nil {
		fail(err) // the members' failures are the bound's doing
		return
	}
	for _, msg := range warnings {
		warning.AddWarning(req.Context(), "", msg)
	}
	if err != nil {
		fail(err)
		return
	}
	// The list compresses itself (listEncoder): SerializeObject, given the
	// request without Accept-Encoding, writes what the encoder writes.
	enc := listEncoder{header: w.Header(), client: req.Context(),
		gzip: responsewriters.ContentEncodingSupported(req, genericfeatures.APIResponseCompression) == "gzip"}
	plain := req.WithContext(req.Context())
	plain.Header = req.Header.Clone()
	plain.Header.Del("Accept-Encoding")
	responsewriters.SerializeObject("application/json", enc, w, plain, http.StatusOK, mergedObject{merged})
}

// listCall is one fan-out list being served: what each member is asked.
type listCall struct {
	// req is the client's request with the members' query; its context
	// ends when the list fails.
	req     *http.Request
	path    string
	accept  string
	timeout time.Duration
	memory  *hold
	// running counts the goroutines serving member requests, which write
	// into memory.
	running sync.WaitGroup
}

// parseSelector reads the name segment: "*" or a label selector.
func parseSelector(name string) (labels.Selector, error) {
	if name == "*" {
		return labels.Everything(), nil
	}
	s, err := labels.Parse(name)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the upstream cluster name segment %q is neither a name nor a valid label selector: %v", name, err))
	}
	return s, nil
}

// clientQuery is the client's query, read once.
type clientQuery struct {
	// query is what members are asked: without the strict parameter, limit
	// and continue, which are for the gateway.
	query  string
	strict bool
	// limit and cont page a list across members (see page).
	limit int64
	cont  string
}

// memberQuery reads the client's query and removes what is for the gateway.
func memberQuery(raw string) (clientQuery, error) {
	var cq clientQuery
	q, err := url.ParseQuery(raw)
	if err != nil {
		return cq, apierrors.NewBadRequest("invalid query string: " + err.Error())
	}
	if v, ok := q[StrictParam]; ok {
		cq.strict = len(v) > 0 && v[0] == "true"
		if len(v) != 1 || (v[0] != "true" && v[0] != "false") {
			return cq, apierrors.NewBadRequest(fmt.Sprintf("query parameter %s must be true or false", StrictParam))
		}
	}
	if l := q.Get("limit"); l != "" {
		if cq.limit, err = strconv.ParseInt(l, 10, 64); err != nil || cq.limit < 0 {
			return cq, apierrors.NewBadRequest(fmt.Sprintf("limit %q is not a non-negative integer", l))
		}
	}
	cq.cont = q.Get("continue")
	delete(q, StrictParam)
	delete(q, "limit")
	delete(q, "continue")
	cq.query = q.Encode()
	return cq, nil
}

type requestKind int

const (
	unsupported requestKind = iota
	list
	watch
	discovery
)

// classify tells what a fan-out request is: a list (GET of a collection, not
// a watch), discovery or OpenAPI (served by one member so that clients can
// find resources), or something this increment does not serve.
func classify(req *http.Request, a *request.Attributes) requestKind {
	if httpstream.IsUpgradeRequest(req) || req.Method != http.MethodGet {
		return unsupported
	}
	if a.IsResourceRequest {
		switch {
		case a.Subresource != "":
		case a.Verb == "list":
			return list
		case a.Verb == "watch":
			return watch
		}
		return unsupported
	}
	if isDiscovery(a.Path) {
		return discovery
	}
	return unsupported
}

// isDiscovery: /api, /api/{v}, /apis, /apis/{g}, /apis/{g}/{v}, /openapi/...,
// /version (non-resource paths only reach here).
func isDiscovery(path string) bool {
	p := strings.TrimSuffix(path, "/")
	switch {
	case p == "/version", p == "/api", p == "/apis", strings.HasPrefix(p, "/openapi/"), p == "/openapi":
		return true
	case strings.HasPrefix(p, "/api/"):
		return !strings.Contains(p[len("/api/"):], "/")
	case strings.HasPrefix(p, "/apis/"):
		return strings.Count(p[len("/apis/"):], "/") <= 1
	}
	return false
}

func unsupportedError(req *http.Request, a *request.Attributes) error {
	what := req.Method + " " + a.Path
	switch {
	case httpstream.IsUpgradeRequest(req):
		what = "protocol upgrades (exec, attach, port-forward)"
	case a.IsResourceRequest && a.Subresource != "":
		what = a.Verb + " " + a.Resource + "/" + a.Subresource
	case a.IsResourceRequest:
		what = a.Verb + " " + a.Resource
	}
	return methodNotAllowed(fmt.Sprintf("fan-out paths support list and watch (GET of a collection) and discovery only, not %s: address one cluster by its name for it", what))
}

func methodNotAllowed(msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed, Reason: metav1.StatusReasonMethodNotAllowed, Message: msg,
	}}
}

// member is a selected UpstreamCluster.
type member struct {
	name  string
	ready bool
}

// selectMembers lists the UpstreamClusters the selector matches, sorted by
// name, and keeps those the user may reach, warning about the others.
func (h *Handler) selectMembers(req *http.Request, segment string, selector labels.Selector) ([]member, error) {
	ctx := req.Context()
	// ResourceVersion "0": served from the watch cache when there is one.
	obj, err := h.Clusters.List(ctx, &metainternalversion.ListOptions{LabelSelector: selector, ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	ucs, ok := obj.(*gatewayv1alpha1.UpstreamClusterList)
	if !ok {
		return nil, fmt.Errorf("listing upstream clusters: unexpected %T", obj)
	}
	u, _ := genericapirequest.UserFrom(ctx)
	verb := "get"
	if info, ok := genericapirequest.RequestInfoFrom(ctx); ok && info.Verb != "" {
		verb = info.Verb
	}
	allowed := func(name string) bool {
		decision, _, _ := h.Authorizer.Authorize(ctx, authorizer.AttributesRecord{
			User: u, Verb: verb, APIGroup: gatewayv1alpha1.GroupName, APIVersion: gatewayv1alpha1.SchemeGroupVersion.Version,
			Resource: "upstreamclusters", Subresource: "proxy", Name: name, ResourceRequest: true,
		})
		return decision == authorizer.DecisionAllow
	}
	// Allowed without a name, the user may use every cluster (in RBAC, a
	// rule without resourceNames, which the hub's check of "*" needs anyway):
	// one check instead of one per member, which the hub answers at most
	// 200 per second to the gateway's authorizer.
	// Otherwise each member's own name is checked, Parallel at a time.
	may := make([]bool, len(ucs.Items))
	if allowed("") {
		for i := range may {
			may[i] = true
		}
	} else {
		workqueue.ParallelizeUntil(ctx, h.parallel(), len(ucs.Items), func(i int) { may[i] = allowed(ucs.Items[i].Name) })
	}
	var members []member
	for i := range ucs.Items {
		uc := &ucs.Items[i]
		if !may[i] {
			warning.AddWarning(ctx, "", fmt.Sprintf("upstream cluster %q: left out: the user may not use upstreamclusters/proxy on it", uc.Name))
			continue
		}
		members = append(members, member{name: uc.Name, ready: meta.IsStatusConditionTrue(uc.Status.Conditions, gatewayv1alpha1.ConditionReady)})
	}
	if len(members) == 0 {
		return nil, apierrors.NewNotFound(gatewayv1alpha1.Resource("upstreamclusters"),
			fmt.Sprintf("%s (no upstream cluster this user may reach matches %q)", segment, selector.String()))
	}
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.name, b.name) })
	return members, nil
}

// firstReady is the member that serves discovery: the first Ready one by
// name, else the first (its own answer then tells what is wrong).
func firstReady(members []member) string {
	for _, m := range members {
		if m.ready {
			return m.name
		}
	}
	return members[0].name
}

// result is one member's answer.
type result struct {
	cluster  string
	code     int
	body     []byte
	warnings []string
	// err is set when the member did not answer in time.
	err error

	// list and parseErr are what parse read in body; memory is the list's
	// share of the memory bound, which body and list hold.
	list     *memberList
	parseErr error
	memory   *hold
	// stream, when set, is the answer still arriving: list is its head,
	// the items follow (see stream.go).
	stream *memberStream
}

// parse reads the list in the answer's body, once.
func (r *result) parse() (*memberList, error) {
	if r.list == nil && r.parseErr == nil {
		r.list, r.parseErr = parseList(r.body, r.memory)
	}
	return r.list, r.parseErr
}

// held is what the answer holds of the list's memory: its body, and what
// parse found in it.
func (r *result) held() int {
	if r.list != nil {
		return len(r.body) + r.list.held
	}
	return len(r.body)
}

func (h *Handler) parallel() int {
	if h.Parallel > 0 {
		return h.Parallel
	}
	return DefaultParallel
}

// askOne sends req, the list of call c, to one member, and returns its
// whole answer.
func (h *Handler) askOne(c *listCall, req *http.Request, name string) result {
	s := newMemberStream(name, c.memory)
	h.serveStream(c, req, s)
	r := s.answer()
	if r.err == nil && r.code == http.StatusOK {
		_, _ = r.parse() // here, where members are read in parallel; merge reports the error
	}
	return r
}

// serveMember serves one member's request in a goroutine of the fan-out: a
// member whose answer broke off makes the reverse proxy panic with
// http.ErrAbortHandler, which net/http recovers only in its own goroutines.
// It tells whether the answer was aborted.
func (h *Handler) serveMember(w http.ResponseWriter, req *http.Request, name, path string) (aborted bool) {
	defer func() {
		if r := recover(); r != nil {
			if r != http.ErrAbortHandler { //nolint:errorlint // the panic value is the sentinel itself
				klog.ErrorS(fmt.Errorf("%v", r), "Panic serving a fan-out member request", "upstreamcluster", name, "stack", string(debug.Stack()))
			}
			aborted = true
		}
	}()
	h.Member(w, req, name, path)
	return false
}

// recorder collects warnings of one member request.
type recorder struct {
	mu    sync.Mutex
	texts []string
}

func (r *recorder) AddWarning(_, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.texts = append(r.texts, text)
}

// get returns the warnings so far; a watch's member request goes on adding.
func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.texts)
}
