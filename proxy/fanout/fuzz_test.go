package fanout

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// FuzzCopyObject checks the copier against a statement of the edit on
// decoded JSON: whatever valid JSON a member sends as an item (or an event's
// object), the client decoding what the gateway wrote finds the member's
// value with the cluster annotation set (and the resourceVersion replaced),
// and nothing else changed.
func FuzzCopyObject(f *testing.F) {
	for _, seed := range []string{
		`{"metadata":{"name":"x","annotations":{"k":"v"}},"spec":{"n":12345678901234567890}}`,
		`{"metadata":{"annotations":{"gateway.kubewharf.io/cluster":"forged"}},"metadata":{"name":"twice"}}`,
		`{"metadata":null}`, `{"metadata":{"annotations":null,"resourceVersion":"5"}}`, `{"kind":"X"}`,
		`{"metad\u0061ta":{"annotations":[1]}}`, `"text"`, `[{"metadata":{}}]`, `{"metadata":"text"}`, `1e2`,
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	f.Fuzz(func(t *testing.T, item string, setVersion bool) {
		if !jsontext.Value(item).IsValid(jsontext.AllowDuplicateNames(true)) {
			return // not what a member's answer can hold: parseList refuses it
		}
		e := &metaEdit{cluster: "member-a"}
		if setVersion {
			e.resourceVersion = jsontext.Value(`"composite"`)
		}
		var out bytes.Buffer
		c := newCopier(&out)
		if err := c.copyObject(newDecoder([]byte(item)), e); err != nil || c.err != nil {
			t.Fatalf("%s: %v %v", item, err, c.err)
		}
		got, want := decodeJSON(t, out.Bytes()), editDecoded(decodeJSON(t, []byte(item)), e)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s\nwrote %s", item, out.Bytes())
		}
		if setVersion {
			return
		}
		// The same item twice in a member's list: the merge splices the
		// annotation into the member's bytes.
		member := `{"kind":"XList","apiVersion":"v1","metadata":{},"items":[` + item + `,` + item + `]}`
		merged, _, err := mergeJSON([]result{ok("member-a", member)}, true)
		if err != nil {
			t.Fatalf("%s: %v", item, err)
		}
		// Streamed, as the items of a member still answering: the same.
		streamed, _, err := streamJSON(t, []string{"member-a"}, []string{member}, true)
		if err != nil || !reflect.DeepEqual(decodeJSON(t, streamed), decodeJSON(t, merged)) {
			t.Errorf("%s\nstreamed %s (%v)\nmerged %s", item, streamed, err, merged)
		}
		var list struct{ Items []json.RawMessage }
		if err := json.Unmarshal(merged, &list); err != nil || len(list.Items) != 2 {
			t.Fatalf("%s: merged %s: %v", item, merged, err)
		}
		for _, got := range list.Items {
			if !reflect.DeepEqual(decodeJSON(t, got), want) {
				t.Errorf("%s\nmerged %s", item, merged)
			}
		}
		// The item as a Table's row, twice, and as a row's object: the rows
		// are spliced as the token copier copies them.
		for _, row := range []string{item, `{"cells":[1],"object":` + item + `}`} {
			table := `{"kind":"Table","apiVersion":"meta.k8s.io/v1","columnDefinitions":[],"rows":[` + row + `,` + row + `]}`
			l, err := parseList([]byte(table), nil)
			if err != nil {
				t.Fatalf("%s: %v", table, err)
			}
			merged, _, err := mergeJSON([]result{ok("member-a", table)}, true)
			if err != nil {
				t.Fatalf("%s: %v", table, err)
			}
			var got struct{ Rows json.RawMessage }
			if err := json.Unmarshal(merged, &got); err != nil {
				t.Fatalf("%s: merged %s: %v", table, merged, err)
			}
			streamed, _, err := streamJSON(t, []string{"member-a"}, []string{table}, true)
			if err != nil || !reflect.DeepEqual(decodeJSON(t, streamed), decodeJSON(t, merged)) {
				t.Errorf("%s\nstreamed %s (%v)\nmerged %s", table, streamed, err, merged)
			}
			want, err := tokenItems(part{cluster: "member-a", list: l})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(decodeJSON(t, got.Rows), decodeJSON(t, want)) {
				t.Errorf("%s\nmerged rows %s\nwant %s", table, got.Rows, want)
			}
		}
	})
}

func decodeJSON(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return v
}

// editDecoded is the edit on a decoded value: an object's metadata, missing
// or null, becomes an object; in an object metadata the annotations, missing
// or null, become an object, which gets the cluster annotation, and the
// resourceVersion is replaced. Values of another type are left as they are.
func editDecoded(v any, e *metaEdit) any {
	obj, ok := v.(map[string]any)
	if !ok {
		return v
	}
	md, ok := obj["metadata"].(map[string]any)
	switch {
	case obj["metadata"] == nil:
		md = map[string]any{}
		obj["metadata"] = md
	case !ok:
		return v
	}
	if e.cluster != "" {
		switch ann := md["annotations"].(type) {
		case nil:
			md["annotations"] = map[string]any{ClusterAnnotation: e.cluster}
		case map[string]any:
			ann[ClusterAnnotation] = e.cluster
		}
	}
	if e.resourceVersion != nil {
		md["resourceVersion"] = "composite"
	}
	return v
}
