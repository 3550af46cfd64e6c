package fanout

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"
)

// continueToken is where the next page of a fan-out list starts: a member,
// and that member's own continue token ("" to start it from its first item),
// with the resourceVersions of the members listed so far.
type continueToken struct {
	Cluster  string            `json:"c"`
	Continue string            `json:"t,omitempty"`
	Versions map[string]string `json:"rv,omitempty"`
	// Counted members listed a list of Items items in the pages so far: the
	// next page's first window is as many members as they say fit.
	Counted int `json:"n,omitempty"`
	Items   int `json:"i,omitempty"`
}

func (t *continueToken) encode() string {
	b, _ := json.Marshal(t)
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseContinue(s string) (*continueToken, error) {
	invalid := func(why string) error {
		return apierrors.NewBadRequest(fmt.Sprintf("continue token %q is not one of a fan-out list (%s): pass the metadata.continue of the previous page unchanged, or list from the start without continue", s, why))
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, invalid("not base64url")
	}
	var t continueToken
	if err := json.Unmarshal(raw, &t); err != nil || t.Cluster == "" {
		return nil, invalid("no cluster")
	}
	return &t, nil
}

// page serves one page of a list with limit or continue: members are listed
// in name order, each with the limit that is left, until limit items are in
// the page; the continue token names the member (and its own token) where
// the next page starts. A member that fails is skipped with a warning.
// Members are asked a window at a time (see nextWindow); the page is the one
// asking them one after the other would give.
func (h *Handler) page(c *listCall, members []member, cq clientQuery, tok *continueToken) (*mergedList, []string, error) {
	versions := map[string]string{}
	start, memberCont := 0, ""
	if tok != nil {
		for c, rv := range tok.Versions {
			versions[c] = rv
		}
		// Members are in name order: a member gone since the last page is
		// passed over, the next one starts from its first item.
		for start < len(members) && members[start].name < tok.Cluster {
			start++
		}
		if start < len(members) && members[start].name == tok.Cluster {
			memberCont = tok.Continue
		}
	}
	base, _ := url.ParseQuery(c.req.URL.RawQuery)
	if tok != nil {
		// Kubernetes refuses a resourceVersion with continue; members joined
		// in a later page are listed at their most recent state.
		base.Del("resourceVersion")
		base.Del("resourceVersionMatch")
	}
	// askMember asks members[i] for at most limit items (0: all) from its
	// own continue token cont.
	askMember := func(i int, limit int64, cont string) result {
		q := url.Values{}
		for k, v := range base {
			q[k] = v
		}
		if limit > 0 {
			q.Set("limit", strconv.FormatInt(limit, 10))
		}
		if cont != "" {
			q.Set("continue", cont)
		}
		inner := c.req.Clone(c.req.Context())
		inner.URL.RawQuery = q.Encode()
		return h.askOne(c, inner, members[i].name)
	}
	remaining := cq.limit
	var results []result
	var next *continueToken
	var remainingCount *int64
	var counted, items int // members that answered a list so far, and their items
	if tok != nil {
		counted, items = tok.Counted, tok.Items
	}
	// take adds members[i]'s answer r to the page; stop: the page is full,
	// or the member has more than the page holds.
	take := func(i int, r result) (stop bool) {
		results = append(results, r)
		if c.memory.failed() != nil {
			return true // Serve reports it
		}
		if r.err != nil || r.code != http.StatusOK {
			return false // merge warns
		}
		l, err := r.parse()
		if err != nil {
			return false
		}
		counted, items = counted+1, items+l.count
		if cont := l.meta.Continue; cont != "" {
			next = &continueToken{Cluster: r.cluster, Continue: cont}
			if i == len(members)-1 {
				remainingCount = l.meta.RemainingItemCount
			}
			return true
		}
		if remaining > 0 {
			if remaining -= int64(l.count); remaining <= 0 {
				if i+1 < len(members) {
					next = &continueToken{Cluster: members[i+1].name}
				}
				return true
			}
		}
		return false
	}
	// Members are asked a window at a time, in parallel, in name order: as
	// many as the items of those that answered say fit in what is left of
	// the page, one at first (unless earlier pages tell), at most Parallel.
	// One member at a time costs a round trip each, most of a page's time
	// over many small members far away; asking more members than the page
	// needs wastes their answers.
	window := 1
	if remaining == 0 || counted > 0 {
		window = nextWindow(window, remaining, counted, items, h.parallel())
	}
page:
	for i := start; i < len(members); {
		asked := remaining
		batch := make([]result, min(window, len(members)-i))
		workqueue.ParallelizeUntil(context.Background(), len(batch), len(batch), func(j int) {
			cont := ""
			if j == 0 {
				cont = memberCont
			}
			batch[j] = askMember(i+j, asked, cont)
		})
		for j, r := range batch {
			if j == 0 && memberCont != "" && r.code == http.StatusGone {
				// The member's own token expired: so has the fan-out token.
				return nil, nil, failed(http.StatusGone, fmt.Sprintf("upstream cluster %q: %s: list again from the start", r.cluster, statusCause(r.cluster, r.code, r.body)))
			}
			if r.err == nil && r.code == http.StatusOK && remaining < asked {
				if l, err := r.parse(); err == nil && int64(l.count) > remaining {
					// Asked for more than is left now: for what is left.
					c.memory.give(r.held())
					r = askMember(i+j, remaining, "")
				}
			}
			if take(i+j, r) {
				for _, unused := range batch[j+1:] { // past the page
					c.memory.give(unused.held())
				}
				break page
			}
		}
		memberCont = ""
		i += len(batch)
		window = nextWindow(window, remaining, counted, items, h.parallel())
	}
	if len(results) == 0 {
		return nil, nil, failed(http.StatusGone, fmt.Sprintf("the continue token names upstream cluster %q, after every selected cluster: list again from the start", tok.Cluster))
	}
	out, warnings, err := merge(results, cq.strict)
	if err != nil {
		return nil, warnings, err
	}
	// merge recorded the versions of this page's members: add the earlier pages'.
	for c, rv := range versions {
		if _, ok := out.versions[c]; !ok {
			out.versions[c] = rv
		}
	}
	if next != nil {
		next.Versions, next.Counted, next.Items = out.versions, counted, items
		out.cont = next.encode()
		out.remaining = remainingCount
	}
	return out, warnings, nil
}

// nextWindow is how many members a page asks at once next: as many as, by
// the items per member so far, fit in remaining (0: no limit, all it may),
// between 1 and parallel. While members brought no items, it doubles.
func nextWindow(window int, remaining int64, counted, items, parallel int) int {
	switch {
	case remaining <= 0:
		return parallel
	case items == 0:
		return min(2*window, parallel)
	}
	fit := (remaining*int64(counted) + int64(items) - 1) / int64(items)
	return int(max(1, min(fit, int64(parallel))))
}
