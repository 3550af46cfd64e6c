package fanout

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// continueToken is where the next page of a fan-out list starts: a member,
// and that member's own continue token ("" to start it from its first item),
// with the resourceVersions of the members listed so far.
type continueToken struct {
	Cluster  string            `json:"c"`
	Continue string            `json:"t,omitempty"`
	Versions map[string]string `json:"rv,omitempty"`
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
	remaining := cq.limit
	var results []result
	var next *continueToken
	var remainingCount *int64
	for i := start; i < len(members); i++ {
		q := url.Values{}
		for k, v := range base {
			q[k] = v
		}
		if remaining > 0 {
			q.Set("limit", strconv.FormatInt(remaining, 10))
		}
		if memberCont != "" {
			q.Set("continue", memberCont)
		}
		inner := c.req.Clone(c.req.Context())
		inner.URL.RawQuery = q.Encode()
		r := h.askOne(c, inner, members[i].name)
		results = append(results, r)
		if c.memory.failed() != nil {
			break // Serve reports it
		}
		if memberCont != "" && r.code == http.StatusGone {
			// The member's own token expired: so has the fan-out token.
			return nil, nil, failed(http.StatusGone, fmt.Sprintf("upstream cluster %q: %s: list again from the start", r.cluster, statusCause(r.cluster, r.code, r.body)))
		}
		memberCont = ""
		if r.err != nil || r.code != http.StatusOK {
			continue // merge warns
		}
		l, err := r.parse()
		if err != nil {
			continue
		}
		if c := l.meta.Continue; c != "" {
			next = &continueToken{Cluster: r.cluster, Continue: c}
			if i == len(members)-1 {
				remainingCount = l.meta.RemainingItemCount
			}
			break
		}
		if remaining > 0 {
			if remaining -= int64(l.count); remaining <= 0 {
				if i+1 < len(members) {
					next = &continueToken{Cluster: members[i+1].name}
				}
				break
			}
		}
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
		next.Versions = out.versions
		out.cont = next.encode()
		out.remaining = remainingCount
	}
	return out, warnings, nil
}
