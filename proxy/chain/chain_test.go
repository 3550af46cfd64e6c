package chain

import "testing"

func TestSplit(t *testing.T) {
	const p = "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/"
	tests := []struct {
		urlPath    string
		name, path string
		ok         bool
	}{
		{p + "member-a/proxy", "member-a", "/", true},
		{p + "member-a/proxy/", "member-a", "/", true},
		{p + "member-a/proxy/api/v1/pods", "member-a", "/api/v1/pods", true},
		{p + "member-a/proxy/api/", "member-a", "/api/", true},
		// The forms below mirror the generic Connect handler's sub-path.
		{p + "member-a/proxy//", "member-a", "/", true},
		{p + "member-a/proxy//x", "member-a", "/x", true},
		{p + "member-a/proxy///x", "member-a", "//x", true},
		{p + "member-a/proxy/a//", "member-a", "/a/", true},
		{p + "member-a/proxy/a//b", "member-a", "/a//b", true},
		{p + "member-a/proxy/../x", "member-a", "/../x", true},
		{p + "member-a/proxy//x/", "member-a", "/x/", true},
		{p + "member-a/proxy//x//", "member-a", "/x/", true},
		{p + "member-a/proxy////", "member-a", "/", true},
		// Not the proxy subresource.
		{p + "member-a", "", "", false},
		{p + "member-a/", "", "", false},
		{p + "member-a/status", "", "", false},
		{p + "member-a/proxyfoo/x", "", "", false},
		{p + "/proxy/x", "", "", false},
		{p, "", "", false},
		{"/apis/gateway.kubewharf.io/v1beta1/upstreamclusters/member-a/proxy", "", "", false},
		{"/api/v1/namespaces/default/services/x/proxy", "", "", false},
	}
	for _, tt := range tests {
		name, path, ok := Split(tt.urlPath)
		if name != tt.name || path != tt.path || ok != tt.ok {
			t.Errorf("Split(%q) = %q, %q, %v; want %q, %q, %v", tt.urlPath, name, path, ok, tt.name, tt.path, tt.ok)
		}
	}
	// Every proxied request is split twice: the path is a slice of the URL's.
	if n := testing.AllocsPerRun(100, func() { Split(p + "member-a/proxy/api/v1/pods/") }); n != 0 {
		t.Errorf("Split allocates %.0f times", n)
	}
}
