package fanout

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// configMapList is a member's answer to a LIST of n ConfigMaps shaped as the
// benchmark's (make bench): a label, two data keys, one of 256 bytes, and the
// managed fields the apiserver records.
func configMapList(n int) []byte {
	value := strings.Repeat("v", 256)
	var b strings.Builder
	b.WriteString(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"123456"},"items":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"metadata":{"name":"cm-%05d","namespace":"bench-list","uid":"6a0e1f9c-6f3b-4c7e-9a52-%012d","resourceVersion":"%d","creationTimestamp":"2026-11-24T10:00:00Z","labels":{"app":"kube-gateway-bench"},`+
			`"managedFields":[{"manager":"bench","operation":"Update","apiVersion":"v1","time":"2026-11-24T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:index":{},"f:value":{}},"f:metadata":{"f:labels":{".":{},"f:app":{}}}}}]},`+
			`"data":{"index":"%d","value":"%s"}}`, i, i, 100000+i, i, value)
	}
	b.WriteString("]}\n")
	return []byte(b.String())
}

// configMapTable is a member's answer to a LIST of n ConfigMaps as Table
// (kubectl get): three cells and the object's metadata per row.
func configMapTable(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"123456"},"columnDefinitions":[` +
		`{"name":"Name","type":"string","format":"name","description":"Name","priority":0},{"name":"Data","type":"string","format":"","description":"Data","priority":0},` +
		`{"name":"Age","type":"string","format":"","description":"Age","priority":0}],"rows":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"cells":["cm-%05d",2,"5m"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"cm-%05d","namespace":"bench-list","uid":"6a0e1f9c-6f3b-4c7e-9a52-%012d","resourceVersion":"%d","creationTimestamp":"2026-11-24T10:00:00Z","labels":{"app":"kube-gateway-bench"},`+
			`"managedFields":[{"manager":"bench","operation":"Update","apiVersion":"v1","time":"2026-11-24T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:index":{},"f:value":{}},"f:metadata":{"f:labels":{".":{},"f:app":{}}}}}]}}}`, i, i, i, 100000+i)
	}
	b.WriteString("]}\n")
	return []byte(b.String())
}

// BenchmarkMerge merges two members' lists of 10,000 ConfigMaps (6.4 MB each)
// and writes the merged list, as a fan-out LIST does after the members answered.
func BenchmarkMerge(b *testing.B) { benchmarkMerge(b, configMapList(10000), configMapList(10000)) }

// BenchmarkMergeTable merges two members' Tables of 10,000 ConfigMaps, as
// kubectl get lists them.
func BenchmarkMergeTable(b *testing.B) {
	benchmarkMerge(b, configMapTable(10000), configMapTable(10000))
}

func benchmarkMerge(b *testing.B, a, c []byte) {
	b.SetBytes(int64(len(a) + len(c)))
	b.ReportAllocs()
	for b.Loop() {
		results := []result{{cluster: "a", code: http.StatusOK, body: a}, {cluster: "b", code: http.StatusOK, body: c}}
		merged, _, err := merge(results, true)
		if err != nil {
			b.Fatal(err)
		}
		if err := merged.writeTo(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWatchEvent passes one event of a Pod of about 2.5 KB through a
// merged watch of 10, 100 and 1,000 members: read from the member's stream,
// written with its cluster and the composite resourceVersion.
func BenchmarkWatchEvent(b *testing.B) {
	for _, members := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("members=%d", members), func(b *testing.B) { benchmarkWatchEvent(b, members) })
	}
}

func benchmarkWatchEvent(b *testing.B, members int) {
	pod := `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"n","uid":"u","resourceVersion":"12345","labels":{"a":"b"},"annotations":{"x":"y"},` +
		`"managedFields":[{"manager":"m","operation":"Update","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:containers":{}}}}]},` +
		`"spec":{"containers":[{"name":"c","image":"i","args":["` + strings.Repeat("a", 2000) + `"]}]},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}`
	line := []byte(`{"type":"MODIFIED","object":` + pod + "}\n")
	versions := &versionSet{}
	for i := range members {
		versions.set(fmt.Sprint("member-", i), "123456")
	}
	c := newCopier(io.Discard)
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		v, err := newDecoder(line).ReadValue()
		if err != nil {
			b.Fatal(err)
		}
		ev, err := parseEvent(bytes.Clone(v))
		if err != nil {
			b.Fatal(err)
		}
		ev.cluster = "member-1"
		versions.set(ev.cluster, ev.resourceVersion)
		if err := c.writeEvent(&ev, versions.composite(), &tableColumns{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStream streams two members' lists of 10,000 ConfigMaps into the
// merged list, as a list without limit does with answers still arriving:
// taken from the members' writes, read as they come, written out.
func BenchmarkStream(b *testing.B) { benchmarkStream(b, configMapList(10000), configMapList(10000)) }

// BenchmarkStreamTable is BenchmarkStream with Tables, as kubectl get lists.
func BenchmarkStreamTable(b *testing.B) {
	benchmarkStream(b, configMapTable(10000), configMapTable(10000))
}

func benchmarkStream(b *testing.B, a, c []byte) {
	b.SetBytes(int64(len(a) + len(c)))
	b.ReportAllocs()
	for b.Loop() {
		results := make([]result, 2)
		for i, body := range [][]byte{a, c} {
			s := newMemberStream(fmt.Sprint("member-", i), nil)
			s.start(context.Background(), func() {})
			if _, err := s.Write(body); err != nil {
				b.Fatal(err)
			}
			if results[i] = s.head(); results[i].stream == nil {
				b.Fatal("not streamed")
			}
			s.finish(nil)
		}
		merged, _, err := merge(results, true)
		if err != nil {
			b.Fatal(err)
		}
		if err := merged.writeTo(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}
