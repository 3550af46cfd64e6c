package fanout

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// memberWarnings returns the texts of a member's Warning headers.
func memberWarnings(h http.Header) []string {
	ws, _ := utilnet.ParseWarningHeaders(h.Values("Warning"))
	texts := make([]string, 0, len(ws))
	for _, w := range ws {
		texts = append(texts, w.Text)
	}
	return texts
}

// merge makes one List (or Table) of the members' answers. A member that
// failed, or answered something else than the others, is left out with a
// warning; with strict, or when no member answered, the merge fails.
func merge(results []result, strict bool) (out *mergedList, warnings []string, err error) {
	var parts []part
	var failures []string
	fail := func(cluster, cause string) {
		failures = append(failures, fmt.Sprintf("%q: %s", cluster, cause))
		warnings = append(warnings, fmt.Sprintf("upstream cluster %q: %s", cluster, cause))
	}
	codes := map[int]bool{}
	for i := range results {
		r := &results[i]
		for _, w := range r.warnings {
			warnings = append(warnings, fmt.Sprintf("upstream cluster %q: %s", r.cluster, w))
		}
		if r.err != nil {
			fail(r.cluster, r.err.Error())
			codes[http.StatusGatewayTimeout] = true
			continue
		}
		if r.code != http.StatusOK {
			fail(r.cluster, statusCause(r.cluster, r.code, r.body))
			codes[r.code] = true
			continue
		}
		l, err := r.parse()
		if err != nil {
			fail(r.cluster, "its answer is not a JSON list: "+err.Error())
			codes[http.StatusBadGateway] = true
			continue
		}
		if len(parts) > 0 {
			if why := differs(parts[0], l); why != "" {
				fail(r.cluster, why)
				codes[http.StatusBadGateway] = true
				r.leaveOut()
				continue
			}
		}
		parts = append(parts, part{cluster: r.cluster, list: l, stream: r.stream})
	}
	switch {
	case len(parts) == 0:
		code := http.StatusServiceUnavailable
		if len(codes) == 1 { // e.g. every member forbids, or none serves the resource
			for c := range codes {
				code = c
			}
		}
		return nil, warnings, failed(code, fmt.Sprintf("no upstream cluster answered the list: %s", strings.Join(failures, "; ")))
	case strict && len(failures) > 0:
		return nil, warnings, failed(http.StatusServiceUnavailable, fmt.Sprintf("%d of %d upstream clusters failed the list (%s=true): %s",
			len(failures), len(results), StrictParam, strings.Join(failures, "; ")))
	}
	versions := make(map[string]string, len(parts))
	for _, p := range parts {
		versions[p.cluster] = p.list.meta.ResourceVersion
	}
	first := parts[0].list
	return &mergedList{apiVersion: first.apiVersion, kind: first.kind, parts: parts, versions: versions}, warnings, nil
}

func failed(code int, msg string) error {
	reason := metav1.StatusReasonServiceUnavailable
	switch code {
	case http.StatusForbidden:
		reason = metav1.StatusReasonForbidden
	case http.StatusNotFound:
		reason = metav1.StatusReasonNotFound
	case http.StatusGatewayTimeout:
		reason = metav1.StatusReasonTimeout
	case http.StatusGone:
		reason = metav1.StatusReasonExpired
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg}}
}

// statusCause describes a member's failed answer by its Status, if it is one.
func statusCause(cluster string, code int, body []byte) string {
	var s metav1.Status
	if json.Unmarshal(body, &s) == nil && s.Kind == "Status" && s.Message != "" {
		// The gateway's own Status names the cluster already; the warning does.
		msg := strings.TrimPrefix(s.Message, fmt.Sprintf("upstream cluster %q ", cluster))
		msg = strings.TrimPrefix(msg, fmt.Sprintf("upstream cluster %q: ", cluster))
		return fmt.Sprintf("%d %s", code, msg)
	}
	text := strings.TrimSpace(string(body))
	if len(text) > 200 {
		text = text[:200] + "..."
	}
	if text == "" {
		return fmt.Sprintf("%d %s", code, http.StatusText(code))
	}
	return fmt.Sprintf("%d %s", code, text)
}

// differs tells why l cannot be merged with first: another kind, or a Table
// with other columns.
func differs(first part, l *memberList) string {
	if first.list.kind != l.kind || first.list.apiVersion != l.apiVersion {
		return fmt.Sprintf("left out: it answered %s %s, not %s %s as %q", l.apiVersion, l.kind, first.list.apiVersion, first.list.kind, first.cluster)
	}
	if l.isTable() && !slices.Equal(first.list.columnNames, l.columnNames) {
		return fmt.Sprintf("left out: its table columns %v differ from those of %q %v", l.columnNames, first.cluster, first.list.columnNames)
	}
	return ""
}
