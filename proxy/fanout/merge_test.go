package fanout

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	podListA = `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"11"},"items":[
		{"metadata":{"name":"p1","namespace":"n","annotations":{"keep":"me"}},"spec":{"priority":9007199254740993}},
		{"metadata":{"name":"p2","namespace":"n"}}]}`
	podListB = `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"22"},"items":[{"metadata":{"name":"p3","namespace":"n"}}]}`
	tableA   = `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"11"},
		"columnDefinitions":[{"name":"Name","type":"string","format":"name"},{"name":"Age","type":"string"}],
		"rows":[{"cells":["p1","1m"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"p1"}}}]}`
	tableB = `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"22"},
		"columnDefinitions":[{"name":"Name","type":"string","format":"name"},{"name":"Age","type":"string"}],
		"rows":[{"cells":["p3","2m"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"p3","annotations":{"a":"b"}}}}]}`
	forbidden = `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods is forbidden: User \"alice\" cannot list resource \"pods\"","reason":"Forbidden","code":403}`
)

func ok(cluster, body string) result {
	return result{cluster: cluster, code: http.StatusOK, body: []byte(body)}
}

func decodeVersions(t *testing.T, rv string) map[string]string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(rv)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", rv, err)
	}
	var v map[string]string
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("resourceVersion %q: %v", rv, err)
	}
	return v
}

func TestMergeList(t *testing.T) {
	out, warnings, err := mergeJSON([]result{ok("a", podListA), ok("b", podListB)}, false)
	if err != nil || len(warnings) != 0 {
		t.Fatalf("merge: %v, warnings %q", err, warnings)
	}
	var got struct {
		Kind, APIVersion string
		Metadata         metav1.ListMeta
		Items            []struct {
			Metadata metav1.ObjectMeta
			Spec     struct{ Priority json.Number }
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if got.Kind != "PodList" || got.APIVersion != "v1" || len(got.Items) != 3 {
		t.Fatalf("merged %s", out)
	}
	want := map[string]string{"p1": "a", "p2": "a", "p3": "b"}
	for _, item := range got.Items {
		if c := item.Metadata.Annotations[ClusterAnnotation]; c != want[item.Metadata.Name] {
			t.Errorf("%s: cluster annotation %q, want %q", item.Metadata.Name, c, want[item.Metadata.Name])
		}
	}
	if got.Items[0].Metadata.Annotations["keep"] != "me" {
		t.Errorf("existing annotations lost: %v", got.Items[0].Metadata.Annotations)
	}
	if got.Items[0].Spec.Priority != "9007199254740993" {
		t.Errorf("a large integer changed in the merge: %s", got.Items[0].Spec.Priority)
	}
	if v := decodeVersions(t, got.Metadata.ResourceVersion); v["a"] != "11" || v["b"] != "22" || len(v) != 2 {
		t.Errorf("composite resourceVersion %v", v)
	}
}

func TestMergeTable(t *testing.T) {
	out, _, err := mergeJSON([]result{ok("a", tableA), ok("b", tableB)}, false)
	if err != nil {
		t.Fatal(err)
	}
	var got metav1.Table
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.ColumnDefinitions) != 3 || got.ColumnDefinitions[0].Name != "Cluster" || got.ColumnDefinitions[1].Name != "Name" {
		t.Fatalf("columns %+v", got.ColumnDefinitions)
	}
	if len(got.Rows) != 2 {
		t.Fatalf("rows %+v", got.Rows)
	}
	for i, want := range []struct{ cluster, name string }{{"a", "p1"}, {"b", "p3"}} {
		row := got.Rows[i]
		if len(row.Cells) != 3 || row.Cells[0] != want.cluster || row.Cells[1] != want.name {
			t.Errorf("row %d cells %v, want %s first then %s", i, row.Cells, want.cluster, want.name)
		}
		var obj metav1.PartialObjectMetadata
		if err := json.Unmarshal(row.Object.Raw, &obj); err != nil || obj.Annotations[ClusterAnnotation] != want.cluster {
			t.Errorf("row %d object %s: want annotation %s=%s (%v)", i, row.Object.Raw, ClusterAnnotation, want.cluster, err)
		}
	}
	if v := decodeVersions(t, got.ResourceVersion); v["a"] != "11" || v["b"] != "22" {
		t.Errorf("composite resourceVersion %v", v)
	}
}

func TestMergeWarnsOfFailedMembers(t *testing.T) {
	results := []result{
		ok("a", podListA),
		{cluster: "b", code: http.StatusForbidden, body: []byte(forbidden)},
		{cluster: "c", code: http.StatusOK, err: errors.New("no complete answer within 30s")},
		ok("d", tableA), // another kind than the others
		{cluster: "e", code: http.StatusOK, body: []byte(podListB), warnings: []string{"v1 pods are old"}},
	}
	out, warnings, err := mergeJSON(results, false)
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Items []any }
	if err := json.Unmarshal(out, &list); err != nil || len(list.Items) != 3 {
		t.Fatalf("items of a and e only: %s (%v)", out, err)
	}
	for _, want := range []string{
		`upstream cluster "b": 403 pods is forbidden`,
		`upstream cluster "c": no complete answer within 30s`,
		`upstream cluster "d": left out: it answered meta.k8s.io/v1 Table`,
		`upstream cluster "e": v1 pods are old`,
	} {
		if !containsPrefix(warnings, want) {
			t.Errorf("no warning %q in %q", want, warnings)
		}
	}
	if len(warnings) != 4 {
		t.Errorf("warnings %q, want 4", warnings)
	}

	_, _, err = merge(results, true)
	if status, isStatus := err.(apierrors.APIStatus); !isStatus || status.Status().Code != http.StatusServiceUnavailable ||
		!strings.Contains(err.Error(), `"b": 403`) || !strings.Contains(err.Error(), `"c": no complete answer`) || strings.Contains(err.Error(), `"a":`) {
		t.Errorf("strict: %v, want 503 naming b and c", err)
	}
}

func containsPrefix(texts []string, prefix string) bool {
	for _, s := range texts {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

func TestMergeWhenNoMemberAnswers(t *testing.T) {
	_, _, err := merge([]result{
		{cluster: "a", code: http.StatusForbidden, body: []byte(forbidden)},
		{cluster: "b", code: http.StatusForbidden, body: []byte(forbidden)},
	}, false)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `"a": 403`) || !strings.Contains(err.Error(), `"b": 403`) {
		t.Errorf("every member forbids: %v, want 403 naming both", err)
	}
	_, _, err = merge([]result{
		{cluster: "a", code: http.StatusForbidden, body: []byte(forbidden)},
		{cluster: "b", code: http.StatusBadGateway, body: []byte("bad")},
	}, false)
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("members fail differently: %v, want 503", err)
	}
}

// mergeJSON is merge with its list written, as the client receives it.
func mergeJSON(results []result, strict bool) ([]byte, []string, error) {
	merged, warnings, err := merge(results, strict)
	if err != nil {
		return nil, warnings, err
	}
	var out bytes.Buffer
	err = merged.writeTo(&out)
	return out.Bytes(), warnings, err
}

// TestMergeAnnotates checks how the cluster annotation is set on items the
// merge copies without decoding: everything else of the item stays as it
// was.
func TestMergeAnnotates(t *testing.T) {
	for _, c := range []struct {
		name, item string
		// want is the item after the merge, compared as decoded JSON.
		want string
	}{
		{"annotations", `{"metadata":{"name":"x","annotations":{"k":"v"}},"spec":{"n":12345678901234567890}}`,
			`{"metadata":{"name":"x","annotations":{"k":"v","gateway.kubewharf.io/cluster":"a"}},"spec":{"n":12345678901234567890}}`},
		{"no annotations", `{"metadata":{"name":"x"}}`,
			`{"metadata":{"name":"x","annotations":{"gateway.kubewharf.io/cluster":"a"}}}`},
		{"the member's own value replaced", `{"metadata":{"annotations":{"gateway.kubewharf.io/cluster":"forged","k":"v"}}}`,
			`{"metadata":{"annotations":{"k":"v","gateway.kubewharf.io/cluster":"a"}}}`},
		{"null annotations", `{"metadata":{"name":"x","annotations":null}}`,
			`{"metadata":{"name":"x","annotations":{"gateway.kubewharf.io/cluster":"a"}}}`},
		{"null metadata", `{"kind":"X","metadata":null}`,
			`{"kind":"X","metadata":{"annotations":{"gateway.kubewharf.io/cluster":"a"}}}`},
		{"no metadata", `{"kind":"X"}`,
			`{"kind":"X","metadata":{"annotations":{"gateway.kubewharf.io/cluster":"a"}}}`},
		{"escaped names", `{"metad\u0061ta":{"annot\u0061tions":{"k":"\u003cv\u003e"}}}`,
			`{"metadata":{"annotations":{"k":"<v>","gateway.kubewharf.io/cluster":"a"}}}`},
		{"not an object", `"text"`, `"text"`},
		{"annotations not an object", `{"metadata":{"annotations":[1]}}`, `{"metadata":{"annotations":[1]}}`},
		{"metadata not an object", `{"metadata":7}`, `{"metadata":7}`},
		{"empty item", `{}`, `{"metadata":{"annotations":{"gateway.kubewharf.io/cluster":"a"}}}`},
		{"empty metadata", `{"metadata":{}}`, `{"metadata":{"annotations":{"gateway.kubewharf.io/cluster":"a"}}}`},
		{"empty annotations", `{"metadata":{"annotations":{}}}`, `{"metadata":{"annotations":{"gateway.kubewharf.io/cluster":"a"}}}`},
		{"whitespace", " { \"metadata\" : { \"annotations\" : { \"k\" : \"v\" } } , \"x\" : [ ] } ",
			`{"metadata":{"annotations":{"k":"v","gateway.kubewharf.io/cluster":"a"}},"x":[]}`},
		{"escaped annotation", `{"metadata":{"annotations":{"gateway.kubewharf.io/cl\u0075ster":"forged"}}}`,
			`{"metadata":{"annotations":{"gateway.kubewharf.io/cluster":"a"}}}`},
		// Named twice: both get the annotation, whichever a client keeps.
		{"metadata twice", `{"metadata":{"name":"x"},"metadata":{"name":"y"}}`,
			`{"metadata":{"name":"y","annotations":{"gateway.kubewharf.io/cluster":"a"}}}`},
		{"annotations twice", `{"metadata":{"annotations":{"k":"v"},"annotations":{"j":"w"}}}`,
			`{"metadata":{"annotations":{"j":"w","gateway.kubewharf.io/cluster":"a"}}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := mergeJSON([]result{ok("a", `{"kind":"XList","apiVersion":"v1","metadata":{},"items":[`+c.item+`]}`)}, true)
			if err != nil {
				t.Fatal(err)
			}
			var list struct{ Items []json.RawMessage }
			if err := json.Unmarshal(out, &list); err != nil || len(list.Items) != 1 {
				t.Fatalf("merged %s: %v", out, err)
			}
			if got := list.Items[0]; !jsonEqual(t, got, []byte(c.want)) {
				t.Errorf("merged item %s, want %s", got, c.want)
			}
			if n := strings.Count(string(list.Items[0]), ClusterAnnotation); n > 1 && !strings.HasSuffix(c.name, "twice") {
				t.Errorf("merged item %s names %s %d times", list.Items[0], ClusterAnnotation, n)
			}
		})
	}
}

// TestMergeAnnotatesEveryItem: items of every shape side by side, the ones
// copied token by token among them, each get the annotation, and the items
// of several members are joined into one array.
func TestMergeAnnotatesEveryItem(t *testing.T) {
	items := []string{`{"a":1}`, `{"metadata":{"annotations":{"gateway.kubewharf.io/cluster":"forged"}}}`, `"s"`,
		`{"metadata":null}`, `{"metadata":{"name":"n"},"metadata":{}}`, `{"metadata":{"annotations":null}}`, `{}`}
	a := `{"kind":"XList","apiVersion":"v1","metadata":{},"items":[ ` + strings.Join(items, " ,\n ") + ` ]}`
	empty := `{"kind":"XList","apiVersion":"v1","metadata":{},"items":[ ]}`
	out, _, err := mergeJSON([]result{ok("a", a), ok("b", empty), ok("c", `{"kind":"XList","apiVersion":"v1","items":[{}]}`)}, true)
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Items []json.RawMessage }
	if err := json.Unmarshal(out, &list); err != nil || len(list.Items) != len(items)+1 {
		t.Fatalf("merged %s: %v, want %d items", out, err, len(items)+1)
	}
	for i, item := range append(items, `{}`) {
		cluster := "a"
		if i == len(items) {
			cluster = "c"
		}
		want := editDecoded(decodeJSON(t, []byte(item)), &metaEdit{cluster: cluster})
		if got := decodeJSON(t, list.Items[i]); !reflect.DeepEqual(got, want) {
			t.Errorf("item %d: merged %s, want %v", i, list.Items[i], want)
		}
	}

	// Copied token by token (an answer past what splices hold), the same.
	l, err := parseList([]byte(a), nil)
	if err != nil {
		t.Fatal(err)
	}
	l.byTokens = true
	var byTokens bytes.Buffer
	m := &mergedList{apiVersion: "v1", kind: "XList", parts: []part{{cluster: "a", list: l}}, versions: map[string]string{"a": ""}}
	if err := m.writeTo(&byTokens); err != nil {
		t.Fatal(err)
	}
	var tokenList struct{ Items []json.RawMessage }
	if err := json.Unmarshal(byTokens.Bytes(), &tokenList); err != nil || len(tokenList.Items) != len(items) {
		t.Fatalf("copied by tokens %s: %v", byTokens.Bytes(), err)
	}
	for i := range items {
		if !jsonEqual(t, tokenList.Items[i], list.Items[i]) {
			t.Errorf("item %d: by tokens %s, spliced %s", i, tokenList.Items[i], list.Items[i])
		}
	}
}

// jsonEqual compares two JSON texts as values, numbers as written.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	for _, x := range []struct {
		text []byte
		v    *any
	}{{a, &va}, {b, &vb}} {
		d := json.NewDecoder(bytes.NewReader(x.text))
		d.UseNumber()
		if err := d.Decode(x.v); err != nil {
			t.Fatalf("%s: %v", x.text, err)
		}
	}
	return reflect.DeepEqual(va, vb)
}

func TestMergeTableRows(t *testing.T) {
	table := `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{},"columnDefinitions":[{"name":"Name"}],"rows":[
		{"object":{"metadata":{"name":"no-cells"}}},
		{"cells":null,"object":{"metadata":{"name":"null-cells"}}},
		"not a row",
		{"cells":["x"],"conditions":[{"type":"Completed"}]}]}`
	out, _, err := mergeJSON([]result{ok("a", table)}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"meta.k8s.io/v1","kind":"Table","metadata":{"resourceVersion":"` + CompositeResourceVersion(map[string]string{"a": ""}) + `"},
		"columnDefinitions":[` + clusterColumn + `,{"name":"Name"}],"rows":[
		{"object":{"metadata":{"name":"no-cells","annotations":{"gateway.kubewharf.io/cluster":"a"}}},"cells":["a"]},
		{"cells":["a"],"object":{"metadata":{"name":"null-cells","annotations":{"gateway.kubewharf.io/cluster":"a"}}}},
		{"cells":["a","x"],"conditions":[{"type":"Completed"}]}]}`
	if !jsonEqual(t, out, []byte(want)) {
		t.Errorf("merged\n%s\nwant\n%s", out, want)
	}
}

// TestMergeTableRowsSpliced: rows of every shape, all objects, get the same
// cells and object as the token copier gives them.
func TestMergeTableRowsSpliced(t *testing.T) {
	rows := []string{
		`{"cells":["x",1],"object":{"metadata":{"name":"n","annotations":{"k":"v"}}}}`,
		`{"cells":[],"object":{"kind":"X"}}`,
		`{"cells":null,"object":{"metadata":null}}`,
		`{"object":{"metadata":{"annotations":null}}}`,
		`{"cells":"not an array","object":"not an object"}`,
		`{}`,
		` { "cells" : [ "y" ] , "conditions" : [ ] } `,
		`{"cells":["a"],"cells":["b"]}`,
		`{"object":{"metadata":{}},"object":{"metadata":{}}}`,
		`{"cells":["z"],"object":{"metadata":{"annotations":{"gateway.kubewharf.io/cluster":"forged"}}}}`,
	}
	table := `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{},"columnDefinitions":[{"name":"Name"}],"rows":[` + strings.Join(rows, ",") + `]}`
	l, err := parseList([]byte(table), nil)
	if err != nil || l.byTokens {
		t.Fatalf("parsed %v, %v: want rows to splice", err, l)
	}
	out, _, err := mergeJSON([]result{ok("a", table)}, true)
	if err != nil {
		t.Fatal(err)
	}
	want, err := tokenItems(part{cluster: "a", list: l})
	if err != nil {
		t.Fatal(err)
	}
	var merged struct{ Rows json.RawMessage }
	if err := json.Unmarshal(out, &merged); err != nil {
		t.Fatalf("merged %s: %v", out, err)
	}
	if !jsonEqual(t, merged.Rows, want) {
		t.Errorf("rows\n%s\nwant, as the token copier writes them,\n%s", merged.Rows, want)
	}
}

// TestMergeLeavesOutBrokenAnswers: a member whose answer is not a list of
// valid JSON is left out before anything is written, so that the merged list
// never breaks off in the middle.
func TestMergeLeavesOutBrokenAnswers(t *testing.T) {
	for _, c := range []struct{ body, why string }{
		{`{"kind":"PodList","apiVersion":"v1","items":[{"metadata":{}},{"a":}]}`, `at start of value within "/items/1/a"`},
		{`{"kind":"PodList","apiVersion":"v1","items":{}}`, "items is not an array"},
		{`{"kind":"PodList","apiVersion":"v1","items":[{"metadata":{"name":"` + "\xff" + `"}}]}`, "invalid UTF-8"},
		{`{"kind":"Pod","apiVersion":"v1"}`, `kind "Pod"`},
		{`{"kind":"Table","apiVersion":"meta.k8s.io/v1","rows":[]}`, "without columnDefinitions"},
		{`[]`, "not a JSON object"},
		{`{"kind":"PodList","apiVersion":"v1","items":[]`, "EOF"},
	} {
		out, warnings, err := mergeJSON([]result{ok("a", podListA), ok("b", c.body)}, false)
		if err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		if len(warnings) != 1 || !strings.HasPrefix(warnings[0], `upstream cluster "b": its answer is not a JSON list: `) || !strings.Contains(warnings[0], c.why) {
			t.Errorf("%s: warnings %q, want b left out because of %q", c.body, warnings, c.why)
		}
		var list struct{ Items []json.RawMessage }
		if err := json.Unmarshal(out, &list); err != nil || len(list.Items) != 2 {
			t.Errorf("%s: merged %s (%v), want a's two items", c.body, out, err)
		}
	}
}
