package fanout

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// CompositeResourceVersion is the resourceVersion of a fan-out list or
// watch event: opaque to clients, it records each member's resourceVersion
// (base64url of the JSON object {cluster: resourceVersion}) so that a later
// watch can start from it.
func CompositeResourceVersion(versions map[string]string) string {
	var v versionSet
	for cluster, rv := range versions {
		v.set(cluster, rv)
	}
	q := v.composite()
	return string(q[1 : len(q)-1])
}

// ParseCompositeResourceVersion reads a CompositeResourceVersion.
func ParseCompositeResourceVersion(rv string) (map[string]string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(rv)
	if err != nil {
		return nil, errors.New("not base64url")
	}
	var versions map[string]string
	if err := json.Unmarshal(raw, &versions); err != nil || versions == nil {
		return nil, errors.New("not a JSON object of cluster names to resourceVersions")
	}
	return versions, nil
}

// versionSet holds each member's resourceVersion in a merged watch and
// encodes them as a CompositeResourceVersion, for every event when the
// client takes no bookmarks.
//
// The composite grows with the members: encoding and quoting it whole for
// each event cost more than the event itself (BenchmarkWatchEvent;
// docs/benchmark-history.md). So each
// member's piece of the JSON object, `,"name":"resourceVersion"`, is padded
// with JSON whitespace to a multiple of 3 bytes when it changes: its base64
// is then a fixed piece of the composite's, and an event costs copying the
// pieces.
type versionSet struct {
	members []versionMember // sorted by name, as json.Marshal sorts a map's keys
	buf     []byte
}

type versionMember struct {
	name string
	json []byte // ,"name":"resourceVersion" and the padding
	b64  []byte // base64url of json
}

func (v *versionSet) set(cluster, rv string) {
	i, known := slices.BinarySearchFunc(v.members, cluster, func(m versionMember, name string) int { return strings.Compare(m.name, name) })
	if !known {
		v.members = slices.Insert(v.members, i, versionMember{name: cluster})
	}
	m := &v.members[i]
	m.json = append(m.json[:0], ',')
	m.json, _ = jsontext.AppendQuote(m.json, cluster) // valid UTF-8: names and resourceVersions are
	m.json = append(m.json, ':')
	m.json, _ = jsontext.AppendQuote(m.json, rv)
	m.json = pad(m.json)
	m.b64 = base64.RawURLEncoding.AppendEncode(m.b64[:0], m.json)
}

// pad adds spaces to b up to a multiple of 3 bytes, which base64 encodes
// without a partial group.
func pad(b []byte) []byte {
	for len(b)%3 != 0 {
		b = append(b, ' ')
	}
	return b
}

// composite is the CompositeResourceVersion of the set as a JSON string. It
// is valid until the next call.
func (v *versionSet) composite() jsontext.Value {
	b := append(v.buf[:0], '"')
	if len(v.members) == 0 {
		b = base64.RawURLEncoding.AppendEncode(b, []byte("{}"))
	} else {
		// The object starts where the first member's comma was: its first
		// 3 bytes, 4 base64 characters, are encoded again.
		m := v.members[0]
		b = base64.RawURLEncoding.AppendEncode(b, []byte{'{', m.json[1], m.json[2]})
		b = append(b, m.b64[4:]...)
		for _, m := range v.members[1:] {
			b = append(b, m.b64...)
		}
		b = base64.RawURLEncoding.AppendEncode(b, []byte{'}'})
	}
	v.buf = append(b, '"')
	return v.buf
}
