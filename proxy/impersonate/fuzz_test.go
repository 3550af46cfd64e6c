package impersonate_test

import (
	"net/http"
	"net/textproto"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"

	"github.com/kubewharf/kube-gateway/proxy/impersonate"
)

// isCredentialKey is the specification of what StripInbound removes: a key
// whose canonical form (textproto.CanonicalMIMEHeaderKey, what net/http
// servers store and transports send) is Authorization, Proxy-Authorization or
// Cookie, or begins with Impersonate- or X-Remote-.
func isCredentialKey(key string) bool {
	c := textproto.CanonicalMIMEHeaderKey(key)
	return c == "Authorization" || c == "Proxy-Authorization" || c == "Cookie" ||
		strings.HasPrefix(c, "Impersonate-") || strings.HasPrefix(c, "X-Remote-")
}

// asciiLower lowers A-Z only: HTTP field names are case-insensitive in ASCII,
// and nothing else folds (unlike strings.EqualFold, where the Kelvin sign
// matches k).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// isCredentialOnTheWire is an independent statement of the same rule for names
// that can travel in a request (valid field names): ASCII case-insensitive.
func isCredentialOnTheWire(key string) bool {
	l := asciiLower(key)
	return l == "authorization" || l == "proxy-authorization" || l == "cookie" ||
		strings.HasPrefix(l, "impersonate-") || strings.HasPrefix(l, "x-remote-")
}

// FuzzStripInbound: after StripInbound, no key whose canonical form is a
// credential or identity header remains, and every other key is kept with its
// values unchanged (nothing added, nothing reordered).
//
// names holds the header keys, separated by newlines, used as map keys exactly
// as given (mixed case, spaces, unicode: whatever code building a header map by
// hand could put there); key i gets the values values+i and "second". The
// seeds are in testdata/fuzz/FuzzStripInbound.
func FuzzStripInbound(f *testing.F) {
	f.Fuzz(func(t *testing.T, names, values string) {
		h := http.Header{}
		for i, k := range strings.Split(names, "\n") {
			h[k] = append(h[k], values+string(rune('0'+i%10)), "second")
		}
		orig := http.Header{}
		for k, v := range h {
			orig[k] = append([]string(nil), v...)
		}

		impersonate.StripInbound(h)

		for k, v := range orig {
			got, present := h[k]
			if isCredentialKey(k) {
				if present {
					t.Errorf("kept the credential key %q (canonical %q)", k, textproto.CanonicalMIMEHeaderKey(k))
				}
				continue
			}
			if !present {
				t.Errorf("removed the key %q (canonical %q)", k, textproto.CanonicalMIMEHeaderKey(k))
			} else if !reflect.DeepEqual(got, v) {
				t.Errorf("changed the values of %q: %q, want %q", k, got, v)
			}
			if httpguts.ValidHeaderFieldName(k) && isCredentialOnTheWire(k) {
				t.Errorf("the field name %q is a credential in any letter case, yet its canonical form %q is not", k, textproto.CanonicalMIMEHeaderKey(k))
			}
		}
		for k := range h {
			if _, ok := orig[k]; !ok {
				t.Errorf("added the key %q", k)
			}
		}

		// What a server would have stored and a transport would send: the
		// canonical keys. None of the credential ones may survive either.
		canonical := http.Header{}
		for k, v := range orig {
			if httpguts.ValidHeaderFieldName(k) {
				canonical[textproto.CanonicalMIMEHeaderKey(k)] = v
			}
		}
		impersonate.StripInbound(canonical)
		for k := range canonical {
			if isCredentialOnTheWire(k) {
				t.Errorf("a credential header %q would be sent", k)
			}
		}
	})
}
