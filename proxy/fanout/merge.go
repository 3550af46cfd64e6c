package fanout

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// capture is the in-memory ResponseWriter a member's answer goes to.
type capture struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newCapture() *capture { return &capture{header: http.Header{}} }

func (c *capture) Header() http.Header { return c.header }

func (c *capture) WriteHeader(code int) {
	if c.status == 0 && code >= http.StatusOK {
		c.status = code
	}
}

func (c *capture) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.body.Write(b)
}

func (c *capture) code() int {
	if c.status == 0 {
		return http.StatusOK
	}
	return c.status
}

// memberWarnings returns the texts of a member's Warning headers.
func memberWarnings(h http.Header) []string {
	ws, _ := utilnet.ParseWarningHeaders(h.Values("Warning"))
	texts := make([]string, 0, len(ws))
	for _, w := range ws {
		texts = append(texts, w.Text)
	}
	return texts
}

// tableAccept asks a member for a Table in JSON; the fallback lets the
// gateway's own errors (Status) negotiate.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io, application/json"

// wantsTable tells whether the client asked for a Table (kubectl get does),
// in its first media type, as the apiserver negotiates.
func wantsTable(accept string) bool {
	first, _, _ := strings.Cut(accept, ",")
	_, params, err := mime.ParseMediaType(strings.TrimSpace(first))
	return err == nil && params["as"] == "Table" && params["g"] == "meta.k8s.io"
}

// answer is a member's decoded list.
type answer struct {
	cluster string
	obj     map[string]any
}

// merge makes one List (or Table) of the members' answers. A member that
// failed, or answered something else than the others, is left out with a
// warning; with strict, or when no member answered, the merge fails.
func merge(results []result, strict bool) (out map[string]any, warnings []string, err error) {
	var answers []answer
	var failures []string
	fail := func(cluster, cause string) {
		failures = append(failures, fmt.Sprintf("%q: %s", cluster, cause))
		warnings = append(warnings, fmt.Sprintf("upstream cluster %q: %s", cluster, cause))
	}
	codes := map[int]bool{}
	for _, r := range results {
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
		obj, err := decode(r.body)
		if err != nil {
			fail(r.cluster, "its answer is not a JSON list: "+err.Error())
			codes[http.StatusBadGateway] = true
			continue
		}
		if len(answers) > 0 {
			if why := differs(answers[0], obj); why != "" {
				fail(r.cluster, why)
				codes[http.StatusBadGateway] = true
				continue
			}
		}
		answers = append(answers, answer{cluster: r.cluster, obj: obj})
	}
	switch {
	case len(answers) == 0:
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
	return combine(answers), warnings, nil
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

// decode reads a list or a Table, keeping numbers as they are.
func decode(body []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var obj map[string]any
	if err := d.Decode(&obj); err != nil {
		return nil, err
	}
	kind, _ := obj["kind"].(string)
	if kind == "Table" {
		if _, ok := obj["columnDefinitions"].([]any); !ok {
			return nil, fmt.Errorf("a Table without columnDefinitions")
		}
		return obj, nil
	}
	if !strings.HasSuffix(kind, "List") {
		return nil, fmt.Errorf("kind %q", kind)
	}
	if _, ok := obj["items"].([]any); !ok && obj["items"] != nil {
		return nil, fmt.Errorf("items is not an array")
	}
	return obj, nil
}

// differs tells why obj cannot be merged with first: another kind, or a
// Table with other columns.
func differs(first answer, obj map[string]any) string {
	if first.obj["kind"] != obj["kind"] || first.obj["apiVersion"] != obj["apiVersion"] {
		return fmt.Sprintf("left out: it answered %v %v, not %v %v as %q", obj["apiVersion"], obj["kind"], first.obj["apiVersion"], first.obj["kind"], first.cluster)
	}
	if obj["kind"] == "Table" && !slices.Equal(columnNames(first.obj), columnNames(obj)) {
		return fmt.Sprintf("left out: its table columns %v differ from those of %q %v", columnNames(obj), first.cluster, columnNames(first.obj))
	}
	return ""
}

func columnNames(table map[string]any) []string {
	cols, _ := table["columnDefinitions"].([]any)
	names := make([]string, 0, len(cols))
	for _, c := range cols {
		m, _ := c.(map[string]any)
		name, _ := m["name"].(string)
		names = append(names, name)
	}
	return names
}

// clusterColumn is the first column of a merged Table.
var clusterColumn = map[string]any{
	"name": "Cluster", "type": "string", "format": "", "priority": 0,
	"description": "The upstream cluster the object is in.",
}

// combine merges answers (at least one, all of one kind) into one object:
// the items, or the Table rows with a first Cluster column, each annotated
// with its cluster, under a composite resourceVersion.
func combine(answers []answer) map[string]any {
	first := answers[0].obj
	versions := make(map[string]string, len(answers))
	out := map[string]any{"apiVersion": first["apiVersion"], "kind": first["kind"]}
	table := first["kind"] == "Table"
	all := []any{}
	for _, a := range answers {
		md, _ := a.obj["metadata"].(map[string]any)
		rv, _ := md["resourceVersion"].(string)
		versions[a.cluster] = rv
		if table {
			rows, _ := a.obj["rows"].([]any)
			for _, row := range rows {
				r, ok := row.(map[string]any)
				if !ok {
					continue
				}
				cells, _ := r["cells"].([]any)
				r["cells"] = append([]any{a.cluster}, cells...)
				annotate(r["object"], a.cluster)
				all = append(all, r)
			}
			continue
		}
		items, _ := a.obj["items"].([]any)
		for _, item := range items {
			annotate(item, a.cluster)
			all = append(all, item)
		}
	}
	out["metadata"] = map[string]any{"resourceVersion": CompositeResourceVersion(versions)}
	if table {
		cols, _ := first["columnDefinitions"].([]any)
		out["columnDefinitions"] = append([]any{clusterColumn}, cols...)
		out["rows"] = all
	} else {
		out["items"] = all
	}
	return out
}

// annotate sets the cluster annotation on an object (an item, or a row's
// object) that has metadata.
func annotate(obj any, cluster string) {
	m, ok := obj.(map[string]any)
	if !ok {
		return
	}
	md, ok := m["metadata"].(map[string]any)
	if !ok {
		md = map[string]any{}
		m["metadata"] = md
	}
	ann, ok := md["annotations"].(map[string]any)
	if !ok {
		ann = map[string]any{}
		md["annotations"] = ann
	}
	ann[ClusterAnnotation] = cluster
}

// CompositeResourceVersion is the resourceVersion of a fan-out list: opaque
// to clients, it records each member's list resourceVersion (base64url of
// the JSON object {cluster: resourceVersion}) so that a later watch can
// start from it.
func CompositeResourceVersion(versions map[string]string) string {
	b, _ := json.Marshal(versions) // map keys are sorted
	return base64.RawURLEncoding.EncodeToString(b)
}
