package metrics

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/kubewharf/kube-gateway/registry/jsoncache"
)

// The Grafana dashboard and docs/metrics.md are checked against the metrics the
// gateway registers, so that neither can rot: every metric a query names exists
// with the labels the query uses, every kube_gateway metric is on the dashboard,
// and the docs list every kube_gateway metric with exactly its labels.

const (
	dashboardFile = "../../docs/grafana/kube-gateway.json"
	metricsDoc    = "../../docs/metrics.md"
)

// family is a registered metric: its type and label names.
type family struct {
	typ    dto.MetricType
	labels map[string]bool
}

// registeredFamilies returns what a gateway serves on /metrics that a dashboard
// may use: the proxy metrics (each recorded once, since a vector without series is
// not gathered), the server health, replicas, fan-out and probe metrics, and the process and Go runtime metrics
// of the legacy registry k8s.io/apiserver serves.
func registeredFamilies(t *testing.T) map[string]family {
	t.Helper()
	m, reg := New(), prometheus.NewPedanticRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(NewServerHealthCollector(func(fn func(cluster, endpoint string, healthy bool)) {
		fn("member-a", "https://192.0.2.10:6443", true)
	}))
	reg.MustRegister(NewReplicasCollector(func() int { return 2 }))
	reg.MustRegister(NewFanOutCollector(fanOutMemory{}))
	reg.MustRegister(NewHealthProbesCollector(probeCounts{}))
	reg.MustRegister(NewHealthProbesSkippedCollector(func() map[string]uint64 { return map[string]uint64{"Traffic": 3} }))
	reg.MustRegister(NewObjectEncodingsCollector(func() jsoncache.Writes { return jsoncache.Writes{ListKept: 2} }))
	m.Observe(Series{Cluster: "member-a", Door: DoorHub, Policy: "p", Schema: "s"}, "get", "pods", 200, time.Millisecond)
	m.InFlight(Series{Cluster: "member-a", Door: DoorHub, Policy: "p", Schema: "s"}).Inc()
	m.Rejected(Series{Cluster: "member-a", Door: DoorHub, Policy: "p", Schema: "s"}, ReasonTokenBucket)
	m.Retried("member-a", "https://192.0.2.10:6443")
	m.Aborted(Series{Cluster: "member-a", Door: DoorHub, Policy: "p", Schema: "s"}, "get", "pods")
	m.TokenReviewed("member-a", TokenAuthenticated)
	m.AccessReviewed("member-a")
	m.CacheRead("member-a", "list", "cache")

	out := map[string]family{}
	for _, g := range []prometheus.Gatherer{reg, legacyregistry.DefaultGatherer} {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			f := family{typ: mf.GetType(), labels: map[string]bool{}}
			for _, metric := range mf.GetMetric() {
				for _, l := range metric.GetLabel() {
					f.labels[l.GetName()] = true
				}
			}
			out[mf.GetName()] = f
		}
	}
	// A vector without series is not gathered: every metric of m needs one above.
	proxyFamilies := 0
	for name := range out {
		if strings.HasPrefix(name, namespace+"_"+subsystem+"_") || strings.HasPrefix(name, namespace+"_member_door_") || strings.HasPrefix(name, namespace+"_fleet_cache_") {
			proxyFamilies++
		}
	}
	if want := len(m.collectors()); proxyFamilies != want {
		t.Fatalf("%d families of Metrics gathered, it has %d: give every metric a series in registeredFamilies", proxyFamilies, want)
	}
	return out
}

// gatewayFamilies are the registered kube_gateway_* metrics.
func gatewayFamilies(all map[string]family) []string {
	var names []string
	for n := range all {
		if strings.HasPrefix(n, "kube_gateway_") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// query is what a PromQL expression references.
type query struct {
	metrics []string // metric names as written (histogram series suffixes kept)
	labels  []string // label names in selectors and grouping clauses
}

var (
	labelValuesRe = regexp.MustCompile(`label_values\(\s*([^,]*?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)`)
	stringRe      = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	selectorRe    = regexp.MustCompile(`\{[^{}]*\}`)
	matcherRe     = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	groupingRe    = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)`)
	rangeRe       = regexp.MustCompile(`\[[^\[\]]*\]`)
	identRe       = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// PromQL words that are not metric names when not followed by "(".
	promqlKeywords = map[string]bool{
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
	}
)

// parseQuery extracts metric and label names from a PromQL expression (or a
// Grafana label_values(...) variable query) without a full parser: strings,
// selectors, grouping clauses and ranges are taken out in turn; identifiers left
// are functions (followed by "("), keywords or metric names.
func parseQuery(expr string) query {
	var q query
	expr = labelValuesRe.ReplaceAllStringFunc(expr, func(m string) string {
		sub := labelValuesRe.FindStringSubmatch(m)
		q.labels = append(q.labels, sub[2])
		return sub[1]
	})
	expr = stringRe.ReplaceAllString(expr, `""`)
	expr = selectorRe.ReplaceAllStringFunc(expr, func(sel string) string {
		for _, m := range matcherRe.FindAllStringSubmatch(sel, -1) {
			q.labels = append(q.labels, m[1])
		}
		return " "
	})
	expr = groupingRe.ReplaceAllStringFunc(expr, func(g string) string {
		inner := groupingRe.FindStringSubmatch(g)[1]
		for _, l := range strings.Split(inner, ",") {
			if l = strings.TrimSpace(l); l != "" {
				q.labels = append(q.labels, l)
			}
		}
		return " "
	})
	expr = rangeRe.ReplaceAllString(expr, " ")
	for _, loc := range identRe.FindAllStringIndex(expr, -1) {
		word := expr[loc[0]:loc[1]]
		if loc[0] > 0 && (isWordByte(expr[loc[0]-1]) || expr[loc[0]-1] == '.' || expr[loc[0]-1] == '$') {
			continue // inside a number such as 1e3, or a Grafana variable
		}
		rest := strings.TrimLeft(expr[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") || promqlKeywords[strings.ToLower(word)] {
			continue
		}
		q.metrics = append(q.metrics, word)
	}
	return q
}

func isWordByte(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

func TestParseQuery(t *testing.T) {
	tests := []struct {
		expr            string
		metrics, labels []string
	}{
		{`sum by (cluster, code) (rate(foo_total{job=~"$job", code=~"5.."}[$__rate_interval]))`, []string{"foo_total"}, []string{"job", "code", "cluster", "code"}},
		{`histogram_quantile(0.99, sum by (le) (rate(bar_bucket{a="x{y}"}[5m]))) / 1e3`, []string{"bar_bucket"}, []string{"a", "le"}},
		{`a_total / on (cluster) group_left (endpoint) b_total offset 5m`, []string{"a_total", "b_total"}, []string{"cluster", "endpoint"}},
		{`count(x == 0) or vector(0)`, []string{"x"}, nil},
		{`label_values(foo_total{job=~"$job"}, cluster)`, []string{"foo_total"}, []string{"cluster", "job"}},
	}
	for _, tt := range tests {
		got := parseQuery(tt.expr)
		if !slices.Equal(got.metrics, tt.metrics) || !slices.Equal(got.labels, tt.labels) {
			t.Errorf("parseQuery(%q) = metrics %v labels %v, want %v %v", tt.expr, got.metrics, got.labels, tt.metrics, tt.labels)
		}
	}
}

// dashboardQueries returns every PromQL expression of the dashboard (panel
// targets) and every variable query, with where it was found.
func dashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	out := map[string]string{} // expression -> where
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				p := path + "." + k
				if title, ok := v["title"].(string); ok {
					p = path + "[" + title + "]." + k
				}
				if s, ok := child.(string); ok && (k == "expr" || k == "definition" || (k == "query" && strings.Contains(s, "("))) {
					out[s] = p
					continue
				}
				walk(p, child)
			}
		case []any:
			for _, child := range v {
				walk(path, child)
			}
		}
	}
	walk("", dash)
	return out
}

// Labels Prometheus adds to every scraped series.
var targetLabels = map[string]bool{"job": true, "instance": true}

func TestDashboardUsesRegisteredMetrics(t *testing.T) {
	families := registeredFamilies(t)
	queries := dashboardQueries(t)
	if len(queries) < 10 {
		t.Fatalf("found only %d queries in %s: is the walk broken?", len(queries), dashboardFile)
	}
	used := map[string]bool{}
	for expr, where := range queries {
		q := parseQuery(expr)
		if len(q.metrics) == 0 {
			t.Errorf("%s: no metric in %q", where, expr)
			continue
		}
		allowed := map[string]bool{}
		for k := range targetLabels {
			allowed[k] = true
		}
		for _, name := range q.metrics {
			f, ok := families[name]
			base := name
			if !ok {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, found := strings.CutSuffix(name, suffix); found {
						if hf, isFamily := families[b]; isFamily && hf.typ == dto.MetricType_HISTOGRAM {
							f, ok, base = hf, true, b
							if suffix == "_bucket" {
								allowed["le"] = true
							}
						}
					}
				}
			}
			if !ok {
				t.Errorf("%s: %q is not a metric the gateway registers (in %q)", where, name, expr)
				continue
			}
			used[base] = true
			for l := range f.labels {
				allowed[l] = true
			}
		}
		for _, l := range q.labels {
			if !allowed[l] {
				t.Errorf("%s: label %q is not a label of %v (in %q)", where, l, q.metrics, expr)
			}
		}
	}
	for _, name := range gatewayFamilies(families) {
		if !used[name] {
			t.Errorf("the dashboard does not show %s", name)
		}
	}
}

// docs/metrics.md lists every kube_gateway metric, with its labels, in its table.
func TestMetricsDocListsEveryMetric(t *testing.T) {
	data, err := os.ReadFile(filepath.Clean(metricsDoc))
	if err != nil {
		t.Fatal(err)
	}
	rowRe := regexp.MustCompile("(?m)^\\| `(kube_gateway_[a-z_]+)` \\| [^|]+ \\| ([^|]*) \\|")
	documented := map[string][]string{}
	for _, m := range rowRe.FindAllStringSubmatch(string(data), -1) {
		var labels []string
		for _, l := range strings.Split(m[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
		sort.Strings(labels)
		documented[m[1]] = labels
	}
	families := registeredFamilies(t)
	for _, name := range gatewayFamilies(families) {
		var labels []string
		for l := range families[name].labels {
			if l != "le" {
				labels = append(labels, l)
			}
		}
		sort.Strings(labels)
		doc, ok := documented[name]
		switch {
		case !ok:
			t.Errorf("%s does not list %s", metricsDoc, name)
		case !slices.Equal(doc, labels):
			t.Errorf("%s lists %s with labels %v, the code has %v", metricsDoc, name, doc, labels)
		}
		delete(documented, name)
	}
	for name := range documented {
		t.Errorf("%s lists %s, which the gateway does not register", metricsDoc, name)
	}
}

// fanOutMemory is a fan-out list memory that holds 1 KiB and refused one list
// of each reason.
type fanOutMemory struct{}

func (fanOutMemory) Held() int64                      { return 1024 }
func (fanOutMemory) Refused() (tooLarge, busy uint64) { return 1, 1 }

type probeCounts struct{}

func (probeCounts) Sent() (pooled, own uint64) { return 5, 2 }
