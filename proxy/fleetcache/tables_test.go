package fleetcache

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kubewharf/kube-gateway/proxy/request"
)

const tableColumns = `[{"name":"Name","type":"string","format":"name","description":"","priority":0},` +
	`{"name":"Data","type":"string","format":"","description":"","priority":0}]`

// memberTable is a Table as a member answers it with includeObject=Object.
func memberTable(t *testing.T, columns string, rv string, objects ...*unstructured.Unstructured) []byte {
	t.Helper()
	var rows []string
	for _, o := range objects {
		b, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, `{"cells":["`+o.GetName()+`",1],"object":`+string(b)+`}`)
	}
	body := `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"` + rv + `"},"columnDefinitions":` + columns + `,"rows":[`
	for i, r := range rows {
		if i > 0 {
			body += ","
		}
		body += r
	}
	return []byte(body + "]}")
}

func columnNames(columns []byte) string {
	var cols []metav1.TableColumnDefinition
	if err := json.Unmarshal(columns, &cols); err != nil {
		return err.Error()
	}
	var names []string
	for _, c := range cols {
		names = append(names, c.Name)
	}
	return strings.Join(names, ",")
}

func decodeObject(t *testing.T, b []byte) runtime.Object {
	t.Helper()
	obj, err := runtime.Decode(unstructured.UnstructuredJSONScheme, b)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// A member's Tables fill the store with the objects, their cells and the
// columns: from a list and from watch events; a bookmark's row is its
// metadata.
func TestTablesFillTheStore(t *testing.T) {
	l, err := listFromTable(memberTable(t, tableColumns, "100", configMap("ns", "a", "1", "x"), configMap("ns", "b", "2", "y")))
	if err != nil {
		t.Fatal(err)
	}
	list := l.(*unstructured.UnstructuredList)
	if list.GetResourceVersion() != "100" || len(list.Items) != 2 {
		t.Fatalf("list at %q with %d items", list.GetResourceVersion(), len(list.Items))
	}
	_, columns, err := takeTableFields(list.Object)
	if err != nil || columnNames(columns) != "Name,Data" {
		t.Fatalf("columns %s (%v)", columns, err)
	}
	s := NewStore(NewMemory(0), nil)
	s.SetColumns(columns)
	var items []any
	for i := range list.Items {
		items = append(items, &list.Items[i])
	}
	if err := s.Replace(items, "100"); err != nil {
		t.Fatal(err)
	}
	a := s.Get("ns", "a")
	if string(a.cells) != `["a",1]` || columnNames(s.Columns()) != "Name,Data" {
		t.Fatalf("a's cells %s, columns %s", a.cells, s.Columns())
	}
	var back map[string]any
	if err := json.Unmarshal(a.JSON, &back); err != nil || back[cellsField] != nil || back["kind"] != "ConfigMap" {
		t.Fatalf("a's JSON is not the object alone: %s", a.JSON)
	}

	// A watch event: a Table of one row, with columns the first time.
	ev, keep := eventFromTable(watch.Event{Type: watch.Added, Object: decodeObject(t, memberTable(t, tableColumns, "101", configMap("ns", "c", "101", "z")))})
	if !keep || ev.Type != watch.Added {
		t.Fatalf("event %v kept %v", ev.Type, keep)
	}
	if err := s.Add(ev.Object); err != nil {
		t.Fatal(err)
	}
	if c := s.Get("ns", "c"); c == nil || string(c.cells) != `["c",1]` {
		t.Fatalf("c from the watch: %+v", c)
	}
	bookmark := `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"105"},"columnDefinitions":null,` +
		`"rows":[{"cells":["",0],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":` +
		`{"resourceVersion":"105","annotations":{"k8s.io/initial-events-end":"true"}}}}]}`
	ev, keep = eventFromTable(watch.Event{Type: watch.Bookmark, Object: decodeObject(t, []byte(bookmark))})
	m, err := apimeta.Accessor(ev.Object)
	if !keep || err != nil || m.GetResourceVersion() != "105" || m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
		t.Fatalf("bookmark %+v kept %v (%v)", ev.Object, keep, err)
	}

	// A member without Tables answers a list: kept as it is.
	plain := `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}`
	if l, err := listFromTable([]byte(plain)); err != nil || l.(*unstructured.UnstructuredList).GetKind() != "ConfigMapList" {
		t.Fatalf("plain list: %v %v", l, err)
	}
}

// A Table watch from a resourceVersion: each change as a Table of one row
// with the member's cells, the columns in the first event only, the object
// as includeObject asks (metadata by default, as kubectl get --watch reads),
// no bookmarks.
func TestTableWatchFromCache(t *testing.T) {
	l, err := listFromTable(memberTable(t, tableColumns, "100", configMap("ns", "a", "1", "x")))
	if err != nil {
		t.Fatal(err)
	}
	list := l.(*unstructured.UnstructuredList)
	_, columns, _ := takeTableFields(list.Object)
	rc := filledCache(t, &list.Items[0])
	rc.store.SetColumns(columns)

	rv := 100
	next := func() string { rv++; return strconv.Itoa(rv) }
	for _, include := range []string{"", "Object", "None"} {
		ctx, cancel := context.WithCancel(context.Background())
		query := "watch=1&allowWatchBookmarks=true&resourceVersion=" + rc.store.ResourceVersion()
		if include != "" {
			query += "&includeObject=" + include
		}
		events, done := startWatch(ctx, t, rc, "/api/v1/configmaps", query, request.TableAccept)
		for i, name := range []string{"b", "c"} {
			rc.store.UpdateResourceVersion(next()) // no bookmark in a Table watch
			ev, _ := eventFromTable(watch.Event{Type: watch.Added, Object: decodeObject(t, memberTable(t, "null", "0", configMap("ns", name, next(), "z")))})
			if err := rc.store.Add(ev.Object); err != nil {
				t.Fatal(err)
			}
			if !events.Scan() {
				t.Fatalf("includeObject %q: no event for %s", include, name)
			}
			var got struct {
				Type   string
				Object metav1.Table
			}
			if err := json.Unmarshal(events.Bytes(), &got); err != nil {
				t.Fatalf("event %s: %v", events.Bytes(), err)
			}
			tb := got.Object
			if got.Type != "ADDED" || tb.Kind != "Table" || len(tb.Rows) != 1 || tb.Rows[0].Cells[0] != name {
				t.Fatalf("includeObject %q: event %s", include, events.Bytes())
			}
			if (i == 0) != (len(tb.ColumnDefinitions) == 2) {
				t.Errorf("includeObject %q: event %d has %d columns (the first only has them)", include, i, len(tb.ColumnDefinitions))
			}
			var obj map[string]any
			_ = json.Unmarshal(tb.Rows[0].Object.Raw, &obj)
			kind, _ := obj["kind"].(string)
			objName, _, _ := unstructured.NestedString(obj, "metadata", "name")
			switch {
			case include == "None" && obj != nil,
				include == "Object" && (kind != "ConfigMap" || obj["data"] == nil),
				include == "" && (kind != "PartialObjectMetadata" || objName != name || obj["data"] != nil):
				t.Errorf("includeObject %q: row object %s", include, tb.Rows[0].Object.Raw)
			}
		}
		cancel()
		<-done
		for _, name := range []string{"b", "c"} {
			if err := rc.store.Delete(configMap("ns", name, next(), "z")); err != nil {
				t.Fatal(err)
			}
		}
	}
}
