package request

import (
	"net/http"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
)

func TestParse(t *testing.T) {
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{"dev", "system:authenticated"}}
	type want = Attributes
	tests := []struct {
		name         string
		method, path string
		query        string
		want         Attributes // Path and User are filled in by the test
		wantErr      string
		wantNonRes   bool // shorthand: non-resource request with verb lower(method)
	}{
		// core group, namespaced
		{name: "list pods", method: "GET", path: "/api/v1/namespaces/default/pods",
			want: want{IsResourceRequest: true, Verb: "list", APIVersion: "v1", Resource: "pods", Namespace: "default"}},
		{name: "list pods trailing slash", method: "GET", path: "/api/v1/namespaces/default/pods/",
			want: want{IsResourceRequest: true, Verb: "list", APIVersion: "v1", Resource: "pods", Namespace: "default"}},
		{name: "get pod", method: "GET", path: "/api/v1/namespaces/default/pods/web-0",
			want: want{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "pods", Namespace: "default", Name: "web-0"}},
		{name: "head pod is get", method: "HEAD", path: "/api/v1/namespaces/default/pods/web-0",
			want: want{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "pods", Namespace: "default", Name: "web-0"}},
		{name: "create pod", method: "POST", path: "/api/v1/namespaces/default/pods",
			want: want{IsResourceRequest: true, Verb: "create", APIVersion: "v1", Resource: "pods", Namespace: "default"}},
		{name: "update pod", method: "PUT", path: "/api/v1/namespaces/default/pods/web-0",
			want: want{IsResourceRequest: true, Verb: "update", APIVersion: "v1", Resource: "pods", Namespace: "default", Name: "web-0"}},
		{name: "patch pod", method: "PATCH", path: "/api/v1/namespaces/default/pods/web-0",
			want: want{IsResourceRequest: true, Verb: "patch", APIVersion: "v1", Resource: "pods", Namespace: "default", Name: "web-0"}},
		{name: "delete pod", method: "DELETE", path: "/api/v1/namespaces/default/pods/web-0",
			want: want{IsResourceRequest: true, Verb: "delete", APIVersion: "v1", Resource: "pods", Namespace: "default", Name: "web-0"}},
		{name: "deletecollection pods", method: "DELETE", path: "/api/v1/namespaces/default/pods",
			want: want{IsResourceRequest: true, Verb: "deletecollection", APIVersion: "v1", Resource: "pods", Namespace: "default"}},
		{name: "options on a resource has no verb", method: "OPTIONS", path: "/api/v1/namespaces/default/pods",
			want: want{IsResourceRequest: true, Verb: "", APIVersion: "v1", Resource: "pods", Namespace: "default"}},
		{name: "empty method is GET", method: "", path: "/api/v1/namespaces/default/pods",
			want: want{IsResourceRequest: true, Verb: "list", APIVersion: "v1", Resource: "pods", Namespace: "default"}},
		{name: "list pods all namespaces", method: "GET", path: "/api/v1/pods",
			want: want{IsResourceRequest: true, Verb: "list", APIVersion: "v1", Resource: "pods"}},
		{name: "list with metadata.name field selector names the object", method: "GET", path: "/api/v1/namespaces/default/pods",
			query: "fieldSelector=metadata.name%3Dweb-0",
			want:  want{IsResourceRequest: true, Verb: "list", APIVersion: "v1", Resource: "pods", Namespace: "default", Name: "web-0"}},
		{name: "list with other query parameters", method: "GET", path: "/api/v1/namespaces/default/pods",
			query: "limit=500&labelSelector=app%3Dweb&resourceVersion=0",
			want:  want{IsResourceRequest: true, Verb: "list", APIVersion: "v1", Resource: "pods", Namespace: "default"}},

		// core group, cluster-scoped
		{name: "list nodes", method: "GET", path: "/api/v1/nodes",
			want: want{IsResourceRequest: true, Verb: "list", APIVersion: "v1", Resource: "nodes"}},
		{name: "get node", method: "GET", path: "/api/v1/nodes/n1",
			want: want{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "nodes", Name: "n1"}},
		{name: "list namespaces", method: "GET", path: "/api/v1/namespaces",
			want: want{IsResourceRequest: true, Verb: "list", APIVersion: "v1", Resource: "namespaces"}},
		{name: "get namespace carries its own namespace", method: "GET", path: "/api/v1/namespaces/kube-system",
			want: want{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "namespaces", Namespace: "kube-system", Name: "kube-system"}},
		{name: "namespace status", method: "PUT", path: "/api/v1/namespaces/ns1/status",
			want: want{IsResourceRequest: true, Verb: "update", APIVersion: "v1", Resource: "namespaces", Subresource: "status", Namespace: "ns1", Name: "ns1"}},
		{name: "namespace finalize", method: "PUT", path: "/api/v1/namespaces/ns1/finalize",
			want: want{IsResourceRequest: true, Verb: "update", APIVersion: "v1", Resource: "namespaces", Subresource: "finalize", Namespace: "ns1", Name: "ns1"}},

		// named groups
		{name: "list deployments", method: "GET", path: "/apis/apps/v1/namespaces/web/deployments",
			want: want{IsResourceRequest: true, Verb: "list", APIGroup: "apps", APIVersion: "v1", Resource: "deployments", Namespace: "web"}},
		{name: "patch deployment scale", method: "PATCH", path: "/apis/apps/v1/namespaces/web/deployments/api/scale",
			want: want{IsResourceRequest: true, Verb: "patch", APIGroup: "apps", APIVersion: "v1", Resource: "deployments", Subresource: "scale", Namespace: "web", Name: "api"}},
		{name: "update deployment status", method: "PUT", path: "/apis/apps/v1/namespaces/web/deployments/api/status",
			want: want{IsResourceRequest: true, Verb: "update", APIGroup: "apps", APIVersion: "v1", Resource: "deployments", Subresource: "status", Namespace: "web", Name: "api"}},
		{name: "cluster-scoped named group", method: "GET", path: "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin",
			want: want{IsResourceRequest: true, Verb: "get", APIGroup: "rbac.authorization.k8s.io", APIVersion: "v1", Resource: "clusterroles", Name: "admin"}},
		{name: "node lease", method: "PUT", path: "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
			want: want{IsResourceRequest: true, Verb: "update", APIGroup: "coordination.k8s.io", APIVersion: "v1", Resource: "leases", Namespace: "kube-node-lease", Name: "n1"}},
		{name: "node status", method: "PATCH", path: "/api/v1/nodes/n1/status",
			want: want{IsResourceRequest: true, Verb: "patch", APIVersion: "v1", Resource: "nodes", Subresource: "status", Name: "n1"}},
		{name: "custom resource", method: "POST", path: "/apis/example.com/v1beta1/namespaces/x/widgets",
			want: want{IsResourceRequest: true, Verb: "create", APIGroup: "example.com", APIVersion: "v1beta1", Resource: "widgets", Namespace: "x"}},
		{name: "pod status", method: "PUT", path: "/api/v1/namespaces/default/pods/web-0/status",
			want: want{IsResourceRequest: true, Verb: "update", APIVersion: "v1", Resource: "pods", Subresource: "status", Namespace: "default", Name: "web-0"}},
		{name: "pod eviction", method: "POST", path: "/api/v1/namespaces/default/pods/web-0/eviction",
			want: want{IsResourceRequest: true, Verb: "create", APIVersion: "v1", Resource: "pods", Subresource: "eviction", Namespace: "default", Name: "web-0"}},

		// watch forms
		{name: "watch=true", method: "GET", path: "/api/v1/namespaces/default/pods", query: "watch=true",
			want: want{IsResourceRequest: true, Verb: "watch", APIVersion: "v1", Resource: "pods", Namespace: "default", LongRunning: true}},
		{name: "watch=1", method: "GET", path: "/api/v1/pods", query: "watch=1&resourceVersion=10",
			want: want{IsResourceRequest: true, Verb: "watch", APIVersion: "v1", Resource: "pods", LongRunning: true}},
		{name: "watch=false is a list", method: "GET", path: "/api/v1/pods", query: "watch=false",
			want: want{IsResourceRequest: true, Verb: "list", APIVersion: "v1", Resource: "pods"}},
		{name: "watch=0 is a list", method: "GET", path: "/api/v1/pods", query: "watch=0",
			want: want{IsResourceRequest: true, Verb: "list", APIVersion: "v1", Resource: "pods"}},
		{name: "watch with a malformed other parameter", method: "GET", path: "/api/v1/pods", query: "watch=true&limit=abc",
			want: want{IsResourceRequest: true, Verb: "watch", APIVersion: "v1", Resource: "pods", LongRunning: true}},
		{name: "watch one object by field selector", method: "GET", path: "/api/v1/namespaces/default/configmaps",
			query: "watch=true&fieldSelector=metadata.name%3Dcfg",
			want:  want{IsResourceRequest: true, Verb: "watch", APIVersion: "v1", Resource: "configmaps", Namespace: "default", Name: "cfg", LongRunning: true}},
		{name: "watch prefix", method: "GET", path: "/api/v1/watch/namespaces/default/pods",
			want: want{IsResourceRequest: true, Verb: "watch", APIVersion: "v1", Resource: "pods", Namespace: "default", LongRunning: true}},
		{name: "watch prefix one object", method: "GET", path: "/api/v1/watch/namespaces/default/pods/web-0",
			want: want{IsResourceRequest: true, Verb: "watch", APIVersion: "v1", Resource: "pods", Namespace: "default", Name: "web-0", LongRunning: true}},
		{name: "watch prefix cluster-scoped", method: "GET", path: "/apis/apps/v1/watch/deployments",
			want: want{IsResourceRequest: true, Verb: "watch", APIGroup: "apps", APIVersion: "v1", Resource: "deployments", LongRunning: true}},
		{name: "watch prefix of namespaces", method: "GET", path: "/api/v1/watch/namespaces",
			want: want{IsResourceRequest: true, Verb: "watch", APIVersion: "v1", Resource: "namespaces", LongRunning: true}},
		{name: "get of a named object ignores watch=true", method: "GET", path: "/api/v1/namespaces/default/pods/web-0", query: "watch=true",
			want: want{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "pods", Namespace: "default", Name: "web-0"}},

		// long-running subresources, logs
		{name: "pod log", method: "GET", path: "/api/v1/namespaces/default/pods/web-0/log",
			want: want{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "pods", Subresource: "log", Namespace: "default", Name: "web-0"}},
		{name: "pod log follow=true", method: "GET", path: "/api/v1/namespaces/default/pods/web-0/log", query: "container=c&follow=true",
			want: want{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "pods", Subresource: "log", Namespace: "default", Name: "web-0", LongRunning: true}},
		{name: "pod log follow=1", method: "GET", path: "/api/v1/namespaces/default/pods/web-0/log", query: "follow=1",
			want: want{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "pods", Subresource: "log", Namespace: "default", Name: "web-0", LongRunning: true}},
		{name: "pod log follow without value", method: "GET", path: "/api/v1/namespaces/default/pods/web-0/log", query: "follow",
			want: want{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "pods", Subresource: "log", Namespace: "default", Name: "web-0", LongRunning: true}},
		{name: "pod log follow=false", method: "GET", path: "/api/v1/namespaces/default/pods/web-0/log", query: "follow=False",
			want: want{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "pods", Subresource: "log", Namespace: "default", Name: "web-0"}},
		{name: "pod log follow=0", method: "GET", path: "/api/v1/namespaces/default/pods/web-0/log", query: "follow=0&follow=true",
			want: want{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "pods", Subresource: "log", Namespace: "default", Name: "web-0"}},
		{name: "pod log followers is not follow", method: "GET", path: "/api/v1/namespaces/default/pods/web-0/log", query: "followers=1",
			want: want{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "pods", Subresource: "log", Namespace: "default", Name: "web-0"}},
		{name: "follow on something else than a log", method: "GET", path: "/api/v1/namespaces/default/pods/web-0", query: "follow=true",
			want: want{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "pods", Namespace: "default", Name: "web-0"}},
		{name: "pod exec POST", method: "POST", path: "/api/v1/namespaces/default/pods/web-0/exec", query: "command=sh&stdin=true&tty=true",
			want: want{IsResourceRequest: true, Verb: "create", APIVersion: "v1", Resource: "pods", Subresource: "exec", Namespace: "default", Name: "web-0", LongRunning: true}},
		{name: "pod exec GET (websocket)", method: "GET", path: "/api/v1/namespaces/default/pods/web-0/exec", query: "command=ls",
			want: want{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "pods", Subresource: "exec", Namespace: "default", Name: "web-0", LongRunning: true}},
		{name: "pod attach", method: "POST", path: "/api/v1/namespaces/default/pods/web-0/attach",
			want: want{IsResourceRequest: true, Verb: "create", APIVersion: "v1", Resource: "pods", Subresource: "attach", Namespace: "default", Name: "web-0", LongRunning: true}},
		{name: "pod portforward", method: "POST", path: "/api/v1/namespaces/default/pods/web-0/portforward",
			want: want{IsResourceRequest: true, Verb: "create", APIVersion: "v1", Resource: "pods", Subresource: "portforward", Namespace: "default", Name: "web-0", LongRunning: true}},
		{name: "service proxy subresource with a path", method: "GET", path: "/api/v1/namespaces/default/services/web:80/proxy/metrics",
			want: want{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "services", Subresource: "proxy", Namespace: "default", Name: "web:80", LongRunning: true}},
		{name: "node proxy subresource", method: "GET", path: "/api/v1/nodes/n1/proxy/stats/summary",
			want: want{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "nodes", Subresource: "proxy", Name: "n1", LongRunning: true}},
		{name: "gateway proxy subresource of a member that is a gateway too", method: "GET",
			path: "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/m/proxy/api/v1/pods",
			want: want{IsResourceRequest: true, Verb: "get", APIGroup: "gateway.kubewharf.io", APIVersion: "v1alpha1", Resource: "upstreamclusters", Subresource: "proxy", Name: "m", LongRunning: true}},
		{name: "legacy proxy path prefix", method: "GET", path: "/api/v1/proxy/namespaces/default/pods/web-0/x/y",
			want: want{IsResourceRequest: true, Verb: "proxy", APIVersion: "v1", Resource: "pods", Namespace: "default", Name: "web-0", LongRunning: true}},

		// non-resource
		{name: "version", method: "GET", path: "/version", wantNonRes: true},
		{name: "healthz", method: "GET", path: "/healthz", wantNonRes: true},
		{name: "healthz etcd", method: "GET", path: "/healthz/etcd", wantNonRes: true},
		{name: "readyz verbose head", method: "HEAD", path: "/readyz", query: "verbose", wantNonRes: true},
		{name: "root", method: "GET", path: "/", wantNonRes: true},
		{name: "apis discovery", method: "GET", path: "/apis", wantNonRes: true},
		{name: "api discovery", method: "GET", path: "/api", wantNonRes: true},
		{name: "api version discovery", method: "GET", path: "/api/v1", wantNonRes: true},
		{name: "group discovery", method: "GET", path: "/apis/apps", wantNonRes: true},
		{name: "group version discovery", method: "GET", path: "/apis/apps/v1", wantNonRes: true},
		{name: "openapi v3", method: "GET", path: "/openapi/v3", wantNonRes: true},
		{name: "openapi v3 group", method: "GET", path: "/openapi/v3/apis/apps/v1", query: "hash=ABC", wantNonRes: true},
		{name: "openapi v2", method: "GET", path: "/openapi/v2", wantNonRes: true},
		{name: "metrics", method: "GET", path: "/metrics", wantNonRes: true},
		{name: "non-resource POST", method: "POST", path: "/some/endpoint", wantNonRes: true},
		{name: "non-resource lower-cases any method", method: "PROPFIND", path: "/x", wantNonRes: true},
		{name: "non-resource with watch query stays non-resource", method: "GET", path: "/healthz", query: "watch=true", wantNonRes: true},

		// errors
		{name: "relative path", method: "GET", path: "api/v1/pods", wantErr: "must begin with /"},
		{name: "empty path", method: "GET", path: "", wantErr: "must begin with /"},
		{name: "empty segment", method: "GET", path: "/api/v1//pods", wantErr: "empty segments"},
		{name: "double trailing slash", method: "GET", path: "/api/v1/pods//", wantErr: "empty segments"},
		{name: "double leading slash", method: "GET", path: "//api/v1/pods", wantErr: "empty segments"},
		{name: "dot segment", method: "GET", path: "/api/v1/namespaces/a/pods/../secrets", wantErr: ". and .."},
		{name: "single dot segment", method: "GET", path: "/api/./v1/pods", wantErr: ". and .."},
		{name: "watch prefix without resource", method: "GET", path: "/api/v1/watch", wantErr: "unable to determine"},
		{name: "watch prefix without resource, trailing slash", method: "GET", path: "/api/v1/watch/", wantErr: "unable to determine"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.method, tt.path, tt.query, alice)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q, %q, %q) error = %v, want one containing %q", tt.method, tt.path, tt.query, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q, %q, %q): %v", tt.method, tt.path, tt.query, err)
			}
			want := tt.want
			if tt.wantNonRes {
				want = Attributes{Verb: strings.ToLower(tt.method)}
			}
			want.Path, want.User = tt.path, alice
			if got != want {
				t.Errorf("Parse(%q, %q, %q) =\n  %+v\nwant\n  %+v", tt.method, tt.path, tt.query, got, want)
			}
		})
	}
}

func TestParseNilUser(t *testing.T) {
	a, err := Parse(http.MethodGet, "/api/v1/pods", "", nil)
	if err != nil || a.User != nil || a.Resource != "pods" {
		t.Fatalf("Parse with nil user = %+v, %v", a, err)
	}
	if _, _, ok := a.ServiceAccount(); ok {
		t.Errorf("nil user is a service account")
	}
}

func TestServiceAccount(t *testing.T) {
	tests := []struct {
		user           string
		wantNS, wantSA string
		wantOK         bool
	}{
		{"system:serviceaccount:kube-system:coredns", "kube-system", "coredns", true},
		{"system:serviceaccount:ns:sa", "ns", "sa", true},
		{"system:serviceaccount:ns", "", "", false},
		{"system:serviceaccount::sa", "", "", false},
		{"system:serviceaccount:ns:", "", "", false},
		{"system:serviceaccount:ns:sa:extra", "", "", false},
		{"system:serviceaccounts:ns", "", "", false}, // the group, not a user
		{"alice", "", "", false},
		{"", "", "", false},
		{"System:serviceaccount:ns:sa", "", "", false},
	}
	for _, tt := range tests {
		a := Attributes{User: &user.DefaultInfo{Name: tt.user}}
		ns, name, ok := a.ServiceAccount()
		if ns != tt.wantNS || name != tt.wantSA || ok != tt.wantOK {
			t.Errorf("ServiceAccount(%q) = %q, %q, %v, want %q, %q, %v", tt.user, ns, name, ok, tt.wantNS, tt.wantSA, tt.wantOK)
		}
	}
}

// The synthetic request is recycled: concurrent parses must not see each other's
// method, path or query.
func TestParseConcurrent(t *testing.T) {
	inputs := []struct{ method, path, query, verb string }{
		{"GET", "/api/v1/namespaces/a/pods", "", "list"},
		{"GET", "/api/v1/namespaces/a/pods", "watch=true", "watch"},
		{"DELETE", "/api/v1/namespaces/a/pods/p", "", "delete"},
		{"POST", "/healthz", "", "post"},
	}
	done := make(chan struct{})
	for w := 0; w < 8; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 2000; i++ {
				in := inputs[(i+w)%len(inputs)]
				a, err := Parse(in.method, in.path, in.query, nil)
				if err != nil || a.Verb != in.verb || a.Path != in.path {
					t.Errorf("Parse(%q, %q, %q) = %+v, %v; want verb %q", in.method, in.path, in.query, a, err, in.verb)
					return
				}
			}
		}()
	}
	for w := 0; w < 8; w++ {
		<-done
	}
}

func TestFactoryQuery(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"watch=true", "watch=true"},
		{"limit=500", ""},
		{"limit=500&watch=1", "watch=1"},
		{"watch=1&limit=500", "watch=1"},
		{"watch=1&fieldSelector=metadata.name%3Da", "watch=1&fieldSelector=metadata.name%3Da"},
		{"x=1&watch=1&fieldSelector=f&y=2", "watch=1&fieldSelector=f"},
		{"watch=1&x=1&fieldSelector=f", "watch=1&fieldSelector=f"},
		{"watch=1&x=1&fieldSelector=f&y=1&watch=0", "watch=1&fieldSelector=f&watch=0"},
		{"w%61tch=true", "w%61tch=true"},             // the member unescapes keys
		{"fieldSelector=a&%zz=1", "fieldSelector=a"}, // malformed key dropped
		{"watch", "watch"},
		{"&&watch=1&", "watch=1"},
		{"watcher=1&xwatch=1", ""},
		{"labelSelector=a%3Db&resourceVersion=0&timeoutSeconds=x", ""},
	}
	for _, tt := range tests {
		if got := factoryQuery(tt.in); got != tt.want {
			t.Errorf("factoryQuery(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestWantsTable(t *testing.T) {
	for accept, want := range map[string]bool{
		"application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json": true,
		"application/json": false,
		"application/json, application/json;as=Table;v=v1;g=meta.k8s.io": false,
		"": false,
	} {
		if got := WantsTable(accept); got != want {
			t.Errorf("WantsTable(%q) = %v", accept, got)
		}
	}
}
