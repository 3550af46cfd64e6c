package request

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/klog/v2"
)

var resourceVerbs = map[string]bool{
	"get": true, "list": true, "watch": true, "create": true, "update": true,
	"patch": true, "delete": true, "deletecollection": true, "proxy": true,
}

// kubeMethods are the methods Kubernetes gives a resource verb.
var kubeMethods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true}

// parseUnfiltered is what the RequestInfoFactory says with the whole query.
func parseUnfiltered(method, path, rawQuery string) (*Attributes, bool) {
	if method == "" {
		method = http.MethodGet
	}
	info, err := infoFactory.NewRequestInfo(&http.Request{Method: method, URL: &url.URL{Path: path, RawQuery: rawQuery}})
	if err != nil {
		return nil, false
	}
	return &Attributes{
		IsResourceRequest: info.IsResourceRequest, Verb: info.Verb, APIGroup: info.APIGroup,
		APIVersion: info.APIVersion, Resource: info.Resource, Subresource: info.Subresource,
		Namespace: info.Namespace, Name: info.Name,
	}, true
}

// listOptionsDecode reports whether the factory decodes the query without error.
func listOptionsDecode(rawQuery string) bool {
	q, _ := url.ParseQuery(rawQuery)
	opts := metainternalversion.ListOptions{}
	return metainternalversionscheme.ParameterCodec.DecodeParameters(q, metav1.SchemeGroupVersion, &opts) == nil
}

func FuzzParse(f *testing.F) {
	// The factory logs malformed queries at error level; not interesting here.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	f.Cleanup(func() { klog.LogToStderr(true) })

	for _, seed := range []struct{ method, path, query string }{
		{"GET", "/api/v1/namespaces/default/pods", ""},
		{"GET", "/api/v1/namespaces/default/pods", "watch=true&resourceVersion=1"},
		{"GET", "/api/v1/namespaces/default/pods", "fieldSelector=metadata.name%3Dweb-0&watch=1"},
		{"GET", "/api/v1/namespaces/default/pods", "w%61tch=true&limit=x"},
		{"GET", "/api/v1/watch/namespaces/default/pods/web-0", ""},
		{"DELETE", "/apis/apps/v1/namespaces/web/deployments", "labelSelector=a%3Db"},
		{"PATCH", "/apis/apps/v1/namespaces/web/deployments/api/scale", ""},
		{"GET", "/api/v1/namespaces/default/pods/web-0/log", "follow=true"},
		{"POST", "/api/v1/namespaces/default/pods/web-0/exec", "command=sh"},
		{"GET", "/api/v1/nodes/n1/proxy/metrics", ""},
		{"GET", "/api/v1/proxy/nodes/n1/x", ""},
		{"GET", "/api/v1/namespaces/ns1", ""},
		{"PUT", "/api/v1/namespaces/ns1/finalize", ""},
		{"GET", "/healthz/etcd", "verbose"},
		{"HEAD", "/openapi/v3", ""},
		{"OPTIONS", "/api/v1/pods", ""},
		{"", "/", ""},
		{"GET", "/api/v1/watch", ""},
		{"GET", "/api/v1//pods", ""},
		{"GET", "/api/v1/namespaces/a/pods/..", ""},
		{"GET", "/apis/g/v/watch/x", "watch=true;x&fieldSelector=metadata.name=a&&watch=false"},
	} {
		f.Add(seed.method, seed.path, seed.query)
	}
	u := &user.DefaultInfo{Name: "system:serviceaccount:ns:sa"}
	f.Fuzz(func(t *testing.T, method, path, query string) {
		a, err := Parse(method, path, query, u)
		if err != nil {
			if a != (Attributes{}) {
				t.Fatalf("error %v with attributes %+v", err, a)
			}
			if checkPath(path) == nil {
				if _, ok := parseUnfiltered(method, path, query); ok {
					t.Fatalf("Parse refused %q that the factory accepts: %v", path, err)
				}
			}
			return
		}
		if a.Path != path || a.User != u {
			t.Fatalf("Path or User not carried: %+v", a)
		}
		if trimmed := strings.TrimSuffix(path[1:], "/"); trimmed != "" {
			for _, seg := range strings.Split(trimmed, "/") {
				if seg == "" || seg == "." || seg == ".." {
					t.Fatalf("non-canonical path %q accepted", path)
				}
			}
		}
		if a.LongRunning && !a.IsResourceRequest {
			t.Fatalf("long-running non-resource request: %+v", a)
		}
		if a.Verb == "watch" && !a.LongRunning {
			t.Fatalf("watch not long-running: %+v", a)
		}
		m := method
		if m == "" {
			m = http.MethodGet
		}
		if a.IsResourceRequest {
			if a.Resource == "" || a.APIVersion == "" {
				t.Fatalf("resource request without resource or version: %+v", a)
			}
			if a.Verb == "" && kubeMethods[m] || a.Verb != "" && !resourceVerbs[a.Verb] {
				t.Fatalf("resource request with verb %q for method %q", a.Verb, m)
			}
			if strings.HasPrefix(path, "/api/") && a.APIGroup != "" {
				t.Fatalf("core path with group %q", a.APIGroup)
			}
		} else {
			if a.Verb != strings.ToLower(m) {
				t.Fatalf("non-resource verb %q for method %q", a.Verb, m)
			}
			if a.APIGroup != "" || a.APIVersion != "" || a.Resource != "" || a.Subresource != "" || a.Namespace != "" || a.Name != "" {
				t.Fatalf("non-resource request with resource attributes: %+v", a)
			}
		}

		// Filtering the query changes nothing but the documented case.
		ref, ok := parseUnfiltered(method, path, query)
		if !ok {
			t.Fatalf("factory refuses what Parse accepted: %q %q %q", method, path, query)
		}
		got := a
		got.Path, got.User, got.LongRunning = "", nil, false
		if got.Name != ref.Name && ref.Name == "" && !listOptionsDecode(query) {
			got.Name = ""
		}
		if got != *ref {
			t.Fatalf("Parse(%q, %q, %q) =\n %+v\nthe factory with the whole query says\n %+v", method, path, query, got, *ref)
		}
	})
}
