// Package request derives the Kubernetes attributes of a proxied request (the
// request the member apiserver will see): resource or non-resource, verb, API
// group and version, resource and subresource, namespace, name, whether it is
// long-running, and the hub identity that sent it. Dispatch policies and flow
// control decide on these attributes.
package request

import (
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// Attributes describe a proxied request as the member will see it.
type Attributes struct {
	// IsResourceRequest is true for requests to an API resource or subresource
	// (/api/{version}/... and /apis/{group}/{version}/... with at least a resource).
	IsResourceRequest bool
	// Verb of a resource request: get, list, watch, create, update, patch, delete,
	// deletecollection; "proxy" for the legacy /api/v1/proxy/ path prefix; "" for
	// an HTTP method Kubernetes gives no verb (e.g. OPTIONS on a resource).
	// Non-resource requests: the lower-cased HTTP method.
	Verb string
	// APIGroup of a resource request ("" is the core group).
	APIGroup string
	// APIVersion of a resource request.
	APIVersion string
	// Resource, e.g. "pods"; never empty for a resource request.
	Resource string
	// Subresource, e.g. "status", "log", "exec"; "" for the resource itself.
	Subresource string
	// Namespace of the request; "" for cluster-scoped and non-resource requests.
	// A request for a namespace object itself (/api/v1/namespaces/foo) has the
	// namespace "foo", as in Kubernetes authorization.
	Namespace string
	// Name of the object when the request names one: in the path, or for list and
	// watch through a fieldSelector metadata.name=<name> (as Kubernetes authorization
	// does).
	Name string
	// Path is the member path.
	Path string
	// LongRunning requests hold their connection open for as long as they are used:
	// watch (?watch=true and the /watch/ path prefix), the exec, attach,
	// portforward and proxy subresources, the legacy /proxy/ path prefix, and log
	// with follow=true.
	LongRunning bool
	// User is the hub identity (after hub-side impersonation). May be nil.
	User user.Info
}

// ServiceAccount returns the namespace and name of the service account the user is,
// when the user name has the form system:serviceaccount:<namespace>:<name>.
func (a *Attributes) ServiceAccount() (namespace, name string, ok bool) {
	if a.User == nil {
		return "", "", false
	}
	rest, found := strings.CutPrefix(a.User.GetName(), serviceaccount.ServiceAccountUsernamePrefix)
	if !found {
		return "", "", false
	}
	namespace, name, found = strings.Cut(rest, serviceaccount.ServiceAccountUsernameSeparator)
	if !found || namespace == "" || name == "" || strings.Contains(name, serviceaccount.ServiceAccountUsernameSeparator) {
		return "", "", false
	}
	return namespace, name, true
}

// infoFactory is the Kubernetes path grammar, as kube-apiserver configures it.
var infoFactory = &genericapirequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// longRunningSubresources hold a connection open whatever the query says.
var longRunningSubresources = map[string]bool{
	"exec": true, "attach": true, "portforward": true, "proxy": true,
}

// synthetic is the request handed to the RequestInfoFactory. It is recycled: the
// factory reads Method, URL.Path and URL.RawQuery and keeps none of them.
type synthetic struct {
	req http.Request
	url url.URL
}

var synthetics = sync.Pool{New: func() any {
	s := &synthetic{}
	s.req.URL = &s.url
	return s
}}

// Parse derives Attributes from the member path, the raw query and the HTTP method.
// The path must be in the canonical form the gateway forwards (beginning with "/",
// without empty, "." or ".." segments; one trailing "/" is allowed); anything else
// is an error, since the member could resolve it to another object than the one
// matched. An empty method means GET.
func Parse(method, path, rawQuery string, u user.Info) (Attributes, error) {
	if err := checkPath(path); err != nil {
		return Attributes{}, err
	}
	if method == "" {
		method = http.MethodGet
	}

	s := synthetics.Get().(*synthetic)
	s.req.Method = method
	s.url.Path = path
	s.url.RawQuery = factoryQuery(rawQuery)
	info, err := infoFactory.NewRequestInfo(&s.req)
	s.req.Method, s.url.Path, s.url.RawQuery = "", "", ""
	synthetics.Put(s)
	if err != nil {
		return Attributes{}, fmt.Errorf("invalid request path %q: %v", path, err)
	}

	a := Attributes{
		IsResourceRequest: info.IsResourceRequest,
		Verb:              info.Verb,
		APIGroup:          info.APIGroup,
		APIVersion:        info.APIVersion,
		Resource:          info.Resource,
		Subresource:       info.Subresource,
		Namespace:         info.Namespace,
		Name:              info.Name,
		Path:              path,
		User:              u,
	}
	if a.IsResourceRequest && a.Resource == "" {
		// Not reachable with a canonical path; refuse rather than match a request
		// whose resource nobody can name in a rule.
		return Attributes{}, fmt.Errorf("invalid request path %q: no resource", path)
	}
	a.LongRunning = isLongRunning(&a, rawQuery)
	return a, nil
}

func isLongRunning(a *Attributes, rawQuery string) bool {
	if !a.IsResourceRequest {
		return false
	}
	switch {
	case a.Verb == "watch" || a.Verb == "proxy":
		return true
	case longRunningSubresources[a.Subresource]:
		return true
	case a.Subresource == "log":
		return follows(rawQuery)
	}
	return false
}

// follows reports whether the query asks to follow a log, read the way the member
// decodes PodLogOptions: the first "follow" value, true unless "0" or "false".
func follows(rawQuery string) bool {
	if !strings.Contains(rawQuery, "follow") {
		return false
	}
	q, _ := url.ParseQuery(rawQuery) // the member ignores malformed pairs too
	v, ok := q["follow"]
	if !ok || len(v) == 0 {
		return false
	}
	return v[0] != "0" && !strings.EqualFold(v[0], "false")
}

// factoryQuery keeps, in order, the pairs of rawQuery whose (unescaped) key is one
// the RequestInfoFactory decides on: watch (list or watch) and fieldSelector (the
// name of a list or watch restricted by metadata.name). The other parameters change
// none of the attributes, yet the factory would decode them all (label selectors,
// integers, durations: tens of allocations) and log every malformed value at error
// level, with the whole query, on each request a client sends.
//
// One difference follows, on purpose: when another parameter is malformed, the
// factory forgets the name of a metadata.name field selector, and we keep it. The
// member rejects such a request (400) whatever the gateway matched.
func factoryQuery(rawQuery string) string {
	if rawQuery == "" {
		return ""
	}
	var (
		kept    string // the kept pairs so far, when they are one slice of rawQuery
		start   = -1   // where kept starts in rawQuery
		joined  []byte // the kept pairs, once they are not contiguous
		dropped bool   // a pair was dropped since kept ended
	)
	for off := 0; off <= len(rawQuery); {
		end := strings.IndexByte(rawQuery[off:], '&')
		if end < 0 {
			end = len(rawQuery)
		} else {
			end += off
		}
		pair := rawQuery[off:end]
		key, _, _ := strings.Cut(pair, "=")
		if strings.ContainsAny(key, "%+") {
			k, err := url.QueryUnescape(key)
			if err != nil {
				k = "" // url.ParseQuery skips the pair too
			}
			key = k
		}
		switch {
		case key != "watch" && key != "fieldSelector":
			dropped = start >= 0
		case joined != nil:
			joined = append(append(joined, '&'), pair...)
		case start < 0:
			start, kept = off, pair
		case !dropped:
			kept = rawQuery[start:end]
		default:
			joined = append(append(append([]byte{}, kept...), '&'), pair...)
		}
		off = end + 1
	}
	if joined != nil {
		return string(joined)
	}
	return kept
}

// checkPath refuses paths that are not in canonical form, without allocating.
func checkPath(p string) error {
	if p == "" || p[0] != '/' {
		return fmt.Errorf("invalid request path %q: must begin with /", p)
	}
	segStart := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		seg := p[segStart:i]
		switch {
		case seg == "" && i < len(p):
			// "" is fine only after a single trailing "/" (or as "/" itself).
			return fmt.Errorf("invalid request path %q: empty segments are not allowed", p)
		case seg == "." || seg == "..":
			return fmt.Errorf("invalid request path %q: . and .. segments are not allowed", p)
		}
		segStart = i + 1
	}
	return nil
}

// TableAccept asks a member for a Table in JSON; the fallback lets errors
// (Status) and servers without Tables negotiate.
const TableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io, application/json"

// WantsTable tells whether a client asked for a Table (kubectl get does), in
// its first media type, as the apiserver negotiates.
func WantsTable(accept string) bool {
	first, _, _ := strings.Cut(accept, ",")
	_, params, err := mime.ParseMediaType(strings.TrimSpace(first))
	return err == nil && params["as"] == "Table" && params["g"] == "meta.k8s.io"
}
