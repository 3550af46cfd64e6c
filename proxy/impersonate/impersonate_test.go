package impersonate_test

import (
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/transport"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/impersonate"
)

func hubUser() *user.DefaultInfo {
	return &user.DefaultInfo{
		Name:   "alice",
		UID:    "uid-1234",
		Groups: []string{"dev", "ops", "system:authenticated"},
		Extra: map[string][]string{
			"scopes":                         {"a", "b"},
			"authentication.kubernetes.io/x": {"y"},
			"empty":                          {},
		},
	}
}

func TestPolicyIdentity(t *testing.T) {
	tests := []struct {
		name   string
		policy *gatewayv1alpha1.ImpersonationPolicy
		want   transport.ImpersonationConfig
	}{
		{
			name:   "nil policy: identity unchanged",
			policy: nil,
			want: transport.ImpersonationConfig{
				UserName: "alice",
				UID:      "uid-1234",
				Groups:   []string{"dev", "ops", "system:authenticated"},
				Extra: map[string][]string{
					"scopes":                         {"a", "b"},
					"authentication.kubernetes.io/x": {"y"},
				},
			},
		},
		{
			name:   "empty policy: identity unchanged",
			policy: &gatewayv1alpha1.ImpersonationPolicy{},
			want: transport.ImpersonationConfig{
				UserName: "alice",
				UID:      "uid-1234",
				Groups:   []string{"dev", "ops", "system:authenticated"},
				Extra: map[string][]string{
					"scopes":                         {"a", "b"},
					"authentication.kubernetes.io/x": {"y"},
				},
			},
		},
		{
			name:   "prefixes",
			policy: &gatewayv1alpha1.ImpersonationPolicy{UserPrefix: "hub:", GroupPrefix: "hub-"},
			want: transport.ImpersonationConfig{
				UserName: "hub:alice",
				UID:      "uid-1234",
				Groups:   []string{"hub-dev", "hub-ops", "hub-system:authenticated"},
				Extra: map[string][]string{
					"scopes":                         {"a", "b"},
					"authentication.kubernetes.io/x": {"y"},
				},
			},
		},
		{
			name: "group allow list, filtered by hub names before the prefix",
			policy: &gatewayv1alpha1.ImpersonationPolicy{
				GroupPrefix: "hub:",
				Groups:      &gatewayv1alpha1.NameFilter{Allow: []string{"dev", "system:authenticated", "not-a-member"}},
			},
			want: transport.ImpersonationConfig{
				UserName: "alice",
				UID:      "uid-1234",
				Groups:   []string{"hub:dev", "hub:system:authenticated"},
				Extra: map[string][]string{
					"scopes":                         {"a", "b"},
					"authentication.kubernetes.io/x": {"y"},
				},
			},
		},
		{
			name: "group deny list",
			policy: &gatewayv1alpha1.ImpersonationPolicy{
				Groups: &gatewayv1alpha1.NameFilter{Deny: []string{"ops"}},
			},
			want: transport.ImpersonationConfig{
				UserName: "alice",
				UID:      "uid-1234",
				Groups:   []string{"dev", "system:authenticated"},
				Extra: map[string][]string{
					"scopes":                         {"a", "b"},
					"authentication.kubernetes.io/x": {"y"},
				},
			},
		},
		{
			name: "deny wins over allow",
			policy: &gatewayv1alpha1.ImpersonationPolicy{
				Groups: &gatewayv1alpha1.NameFilter{Allow: []string{"dev", "ops"}, Deny: []string{"dev"}},
			},
			want: transport.ImpersonationConfig{
				UserName: "alice",
				UID:      "uid-1234",
				Groups:   []string{"ops"},
				Extra: map[string][]string{
					"scopes":                         {"a", "b"},
					"authentication.kubernetes.io/x": {"y"},
				},
			},
		},
		{
			name: "no group kept",
			policy: &gatewayv1alpha1.ImpersonationPolicy{
				Groups: &gatewayv1alpha1.NameFilter{Allow: []string{"nobody"}},
			},
			want: transport.ImpersonationConfig{
				UserName: "alice",
				UID:      "uid-1234",
				Extra: map[string][]string{
					"scopes":                         {"a", "b"},
					"authentication.kubernetes.io/x": {"y"},
				},
			},
		},
		{
			name: "extras allow list",
			policy: &gatewayv1alpha1.ImpersonationPolicy{
				Extras: &gatewayv1alpha1.NameFilter{Allow: []string{"scopes", "empty"}},
			},
			want: transport.ImpersonationConfig{
				UserName: "alice",
				UID:      "uid-1234",
				Groups:   []string{"dev", "ops", "system:authenticated"},
				Extra:    map[string][]string{"scopes": {"a", "b"}},
			},
		},
		{
			name: "extras deny list",
			policy: &gatewayv1alpha1.ImpersonationPolicy{
				Extras: &gatewayv1alpha1.NameFilter{Deny: []string{"scopes"}},
			},
			want: transport.ImpersonationConfig{
				UserName: "alice",
				UID:      "uid-1234",
				Groups:   []string{"dev", "ops", "system:authenticated"},
				Extra:    map[string][]string{"authentication.kubernetes.io/x": {"y"}},
			},
		},
		{
			name: "every extra denied",
			policy: &gatewayv1alpha1.ImpersonationPolicy{
				Extras: &gatewayv1alpha1.NameFilter{Allow: []string{"scopes"}, Deny: []string{"scopes"}},
			},
			want: transport.ImpersonationConfig{
				UserName: "alice",
				UID:      "uid-1234",
				Groups:   []string{"dev", "ops", "system:authenticated"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := hubUser()
			got := impersonate.Compile(tt.policy).Identity(u)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Identity() =\n  %#v\nwant\n  %#v", got, tt.want)
			}
			if !reflect.DeepEqual(u, hubUser()) {
				t.Errorf("Identity modified the hub user: %#v", u)
			}
		})
	}
}

func TestPolicyIdentityWithoutUIDAndGroups(t *testing.T) {
	got := impersonate.Compile(nil).Identity(&user.DefaultInfo{Name: "system:serviceaccount:ns:sa"})
	want := transport.ImpersonationConfig{UserName: "system:serviceaccount:ns:sa"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Identity() = %#v, want %#v", got, want)
	}
}

func TestStripInbound(t *testing.T) {
	// Header values set with Set/Add are canonicalized; those assigned directly to
	// the map keep the letter case of the test. Both must be removed.
	removedCanonical := []string{
		"Authorization", "Proxy-Authorization", "Cookie",
		"Impersonate-User", "Impersonate-Group", "Impersonate-Uid", "Impersonate-Extra-Scopes",
		"Impersonate-Extra-Example.com%2fa%20b",
		"X-Remote-User", "X-Remote-Group", "X-Remote-Uid", "X-Remote-Extra-Scopes",
	}
	removedRawPrefixed := []string{
		"impersonate-user", "IMPERSONATE-GROUP", "iMpErSoNaTe-ExTrA-foo",
		"x-remote-user", "X-REMOTE-GROUP", "x-Remote-Extra-Foo",
	}
	kept := map[string]string{
		"Accept":              "application/json",
		"Content-Type":        "application/json",
		"User-Agent":          "kubectl",
		"X-Remote":            "no dash after Remote",
		"X-Remoteuser":        "not the X-Remote- prefix",
		"Impersonated-By":     "not the Impersonate- prefix",
		"X-Impersonate-User":  "prefix only at the start",
		"Authorization-Extra": "not Authorization",
		"Cookies":             "not Cookie",
		"Set-Cookie":          "a response header, harmless here",
	}

	h := http.Header{}
	for _, k := range removedCanonical {
		h.Add(k, "client-value")
	}
	for _, k := range removedRawPrefixed {
		h[k] = []string{"client-value"}
	}
	for k, v := range kept {
		h.Set(k, v)
	}
	impersonate.StripInbound(h)

	var left []string
	for k := range h {
		if _, ok := kept[k]; !ok {
			left = append(left, k)
		}
	}
	sort.Strings(left)
	if len(left) > 0 {
		t.Errorf("StripInbound left credential headers %v", left)
	}
	for k, v := range kept {
		if got := h.Get(k); got != v {
			t.Errorf("StripInbound removed or changed %s: got %q, want %q", k, got, v)
		}
	}
}

// TestStripInboundNonCanonicalCredentialHeaders covers map keys that are not in
// canonical form for the fixed credential headers (Authorization, Cookie, ...).
// net/http servers always canonicalize inbound header keys, so this cannot be
// triggered through the server, only by code that builds header maps by hand.
func TestStripInboundNonCanonicalCredentialHeaders(t *testing.T) {
	for _, k := range []string{"authorization", "AUTHORIZATION", "proxy-authorization", "cookie"} {
		t.Run(k, func(t *testing.T) {
			h := http.Header{k: {"client-value"}, "Accept": {"*/*"}}
			impersonate.StripInbound(h)
			if _, ok := h[k]; ok {
				t.Errorf("StripInbound kept the non-canonical key %q", k)
			}
			if h.Get("Accept") != "*/*" {
				t.Error("Accept was removed")
			}
		})
	}
}

func TestRoundTripperImpersonates(t *testing.T) {
	tests := []struct {
		name        string
		id          transport.ImpersonationConfig
		wantHeaders map[string][]string // canonical key -> values
		wantAbsent  []string
	}{
		{
			name: "full identity",
			id: transport.ImpersonationConfig{
				UserName: "hub:alice",
				UID:      "uid-1234",
				Groups:   []string{"dev", "system:authenticated"},
				Extra: map[string][]string{
					"scopes":          {"a", "b"},
					"example.com/a b": {"v"},
					"50%":             {"p"},
				},
			},
			wantHeaders: map[string][]string{
				"Impersonate-User":  {"hub:alice"},
				"Impersonate-Uid":   {"uid-1234"},
				"Impersonate-Group": {"dev", "system:authenticated"},
				"Impersonate-Extra-" + url.PathEscape("scopes"): {"a", "b"},
				// client-go escapes the key: "/" and " " are not legal in a
				// header name, and "%" is escaped so that unescaping is exact.
				"Impersonate-Extra-example.com%2Fa%20b": {"v"},
				"Impersonate-Extra-50%25":               {"p"},
			},
		},
		{
			name:        "user only",
			id:          transport.ImpersonationConfig{UserName: "bob"},
			wantHeaders: map[string][]string{"Impersonate-User": {"bob"}},
			wantAbsent:  []string{"Impersonate-Uid", "Impersonate-Group"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, "https://member.example.com/api/v1/pods?watch=true", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Accept", "application/json")
			before := req.Header.Clone()

			out, err := roundTrip(req, tt.id)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if out == req {
				t.Fatal("Apply returned the input request instead of a copy")
			}
			if !reflect.DeepEqual(req.Header, before) {
				t.Errorf("Apply mutated the input headers: %v, want %v", req.Header, before)
			}
			if out.URL.String() != req.URL.String() || out.Method != req.Method {
				t.Errorf("Apply changed the request line: %s %s", out.Method, out.URL)
			}
			if out.Header.Get("Accept") != "application/json" {
				t.Errorf("Apply dropped Accept")
			}
			var imp int
			for k := range out.Header {
				if len(k) > len("Impersonate-") && k[:len("Impersonate-")] == "Impersonate-" {
					imp++
				}
			}
			if imp != len(tt.wantHeaders) {
				t.Errorf("got %d Impersonate-* headers %v, want %d", imp, out.Header, len(tt.wantHeaders))
			}
			for k, want := range tt.wantHeaders {
				if got := out.Header.Values(k); !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %q, want %q (all headers: %v)", k, got, want, out.Header)
				}
			}
			for _, k := range tt.wantAbsent {
				if v, ok := out.Header[http.CanonicalHeaderKey(k)]; ok {
					t.Errorf("%s = %q, want absent", k, v)
				}
			}
		})
	}
}

// roundTrip sends req with identity id through impersonate.NewRoundTripper and
// returns the request its delegate received.
func roundTrip(req *http.Request, id transport.ImpersonationConfig) (*http.Request, error) {
	var got *http.Request
	rt := impersonate.NewRoundTripper(roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		got = r
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	}))
	in := req.WithContext(impersonate.WithIdentity(req.Context(), id))
	if _, err := rt.RoundTrip(in); err != nil {
		return nil, err
	}
	// Compare against the caller's request, not the context copy.
	if got == in {
		got = req
	}
	return got, nil
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A request without an identity in its context is never forwarded: it would
// reach the member as the gateway itself.
func TestRoundTripperRefusesRequestsWithoutIdentity(t *testing.T) {
	called := false
	rt := impersonate.NewRoundTripper(roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		called = true
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	}))
	req, _ := http.NewRequest(http.MethodGet, "https://member.example.com/", nil)
	if _, err := rt.RoundTrip(req); err == nil || called {
		t.Fatalf("request without identity: err=%v, forwarded=%v", err, called)
	}
}

func TestRoundTripperRefusesEmptyUser(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "https://member.example.com/", nil)
	if _, err := roundTrip(req, transport.ImpersonationConfig{Groups: []string{"dev"}}); err == nil {
		t.Fatal("an empty user name was forwarded")
	}
}

// Apply must impersonate the identity it is given even if the request already
// carries impersonation headers (StripInbound runs first in forward, so this is
// defense in depth).
func TestRoundTripperOverridesExistingImpersonation(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "https://member.example.com/", nil)
	req.Header.Set("Impersonate-User", "mallory")
	req.Header.Set("Impersonate-Group", "system:masters")
	out, err := roundTrip(req, transport.ImpersonationConfig{UserName: "alice", Groups: []string{"dev"}})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if got := out.Header.Values("Impersonate-User"); !reflect.DeepEqual(got, []string{"alice"}) {
		t.Errorf("Impersonate-User = %q, want [alice]", got)
	}
	if got := out.Header.Values("Impersonate-Group"); !reflect.DeepEqual(got, []string{"dev"}) {
		t.Errorf("Impersonate-Group = %q, want [dev]", got)
	}
}

// Stray Impersonate-* headers on the outgoing request (in any letter case) are
// replaced by the identity's, and the caller's request is left as it was.
func TestRoundTripperReplacesStrayImpersonation(t *testing.T) {
	req, err := http.NewRequest(http.MethodGet, "https://member.example.com/api", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Impersonate-User", "mallory")
	req.Header["impersonate-group"] = []string{"system:masters"}
	req.Header.Set("Accept", "application/json")
	before := req.Header.Clone()

	out, err := roundTrip(req, transport.ImpersonationConfig{UserName: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(req.Header, before) {
		t.Errorf("the caller's headers changed: %v, want %v", req.Header, before)
	}
	if got := out.Header.Values("Impersonate-User"); !reflect.DeepEqual(got, []string{"alice"}) {
		t.Errorf("Impersonate-User = %v, want [alice]", got)
	}
	for k := range out.Header {
		if k != "Impersonate-User" && strings.HasPrefix(http.CanonicalHeaderKey(k), "Impersonate-") {
			t.Errorf("stray %s: %v reached the member", k, out.Header[k])
		}
	}
	if out.Header.Get("Accept") != "application/json" {
		t.Error("Accept was dropped")
	}
}

// Apply and Headers.Apply set exactly the headers client-go's impersonating
// round tripper sets, whether through it or by themselves (from the header
// names Headers learned), and leave the other headers.
func TestApplyMatchesClientGo(t *testing.T) {
	manyExtras := map[string][]string{}
	for i := range 70 { // more keys than a Headers remembers
		manyExtras[fmt.Sprintf("example.com/key %d", i)] = []string{fmt.Sprint(i)}
	}
	headers := &impersonate.Headers{} // shared by the cases, as by a forwarder's requests
	for name, id := range map[string]transport.ImpersonationConfig{
		"user":                       {UserName: "alice"},
		"user, UID":                  {UserName: "alice", UID: "uid-1"},
		"groups":                     {UserName: "alice", Groups: []string{"dev", "", "system:authenticated"}},
		"extras":                     {UserName: "alice", Groups: []string{"dev"}, Extra: map[string][]string{"scopes": {"a", "b"}, "example.com/key with space": {"v"}}},
		"keys that escape alike":     {UserName: "alice", Extra: map[string][]string{"Scopes": {"a"}, "scopes": {"b"}}},
		"service account":            {UserName: "system:serviceaccount:ns:sa", UID: "u", Groups: []string{"system:serviceaccounts"}, Extra: map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=1"}, "authentication.kubernetes.io/pod-name": {"p"}}},
		"values needing no escaping": {UserName: "system:serviceaccount:ns:sa", UID: "a b", Groups: []string{"Ärger", "x,y"}},
		"many extra keys":            {UserName: "alice", Extra: manyExtras},
	} {
		t.Run(name, func(t *testing.T) {
			newReq := func() *http.Request {
				req, _ := http.NewRequest(http.MethodGet, "https://member.example.com/api", nil)
				req.Header.Set("Accept", "application/json")
				return req
			}
			var want *http.Request
			_, _ = transport.NewImpersonatingRoundTripper(id, roundTripFunc(func(r *http.Request) (*http.Response, error) {
				want = r
				return nil, nil
			})).RoundTrip(newReq())
			for _, apply := range []struct {
				how string
				f   func(*http.Request, transport.ImpersonationConfig) (*http.Request, error)
			}{
				{"Apply", impersonate.Apply},
				{"Headers.Apply, first", headers.Apply},
				{"Headers.Apply, again", headers.Apply},
			} {
				got, err := apply.f(newReq(), id)
				if err != nil {
					t.Fatalf("%s: %v", apply.how, err)
				}
				// Keys that escape alike have their values in map order.
				if !reflect.DeepEqual(sortedValues(got.Header), sortedValues(want.Header)) {
					t.Errorf("%s: headers = %v, client-go sets %v", apply.how, got.Header, want.Header)
				}
			}
		})
	}
}

// The request's groups header shares the identity's groups; a header added
// later must not write into the identity's array.
func TestApplyKeepsIdentityGroups(t *testing.T) {
	groups := make([]string, 1, 4) // room to append in place
	groups[0] = "dev"
	req, _ := http.NewRequest(http.MethodGet, "https://member.example.com/api", nil)
	out, err := impersonate.Apply(req, transport.ImpersonationConfig{UserName: "alice", Groups: groups})
	if err != nil {
		t.Fatal(err)
	}
	out.Header.Add("Impersonate-Group", "late")
	if spare := groups[:2][1]; spare != "" {
		t.Errorf("adding a group to the request wrote %q into the identity's groups", spare)
	}
	if got := out.Header.Values("Impersonate-Group"); !reflect.DeepEqual(got, []string{"dev", "late"}) {
		t.Errorf("Impersonate-Group = %q, want [dev late]", got)
	}
}

func sortedValues(h http.Header) http.Header {
	out := http.Header{}
	for k, v := range h {
		out[k] = slices.Sorted(slices.Values(v))
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Requests of many users share a forwarder's Headers while it learns.
func TestHeadersConcurrentUse(t *testing.T) {
	h := &impersonate.Headers{}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 20 {
				key := fmt.Sprintf("example.com/k%d", (i+j)%10)
				req, _ := http.NewRequest(http.MethodGet, "https://member.example.com/api", nil)
				out, err := h.Apply(req, transport.ImpersonationConfig{UserName: "alice", Extra: map[string][]string{key: {"v"}}})
				if err != nil {
					t.Error(err)
					return
				}
				want := transport.ImpersonateUserExtraHeaderPrefix + "Example.com%2Fk" + fmt.Sprint((i+j)%10)
				if got := out.Header.Values(want); len(got) != 1 || got[0] != "v" {
					t.Errorf("%s = %q, want [v]; headers %v", want, got, out.Header)
					return
				}
			}
		})
	}
	wg.Wait()
}
