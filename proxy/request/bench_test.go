package request

import (
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
)

func BenchmarkParse(b *testing.B) {
	u := &user.DefaultInfo{Name: "alice", Groups: []string{"dev", "system:authenticated"}}
	cases := []struct{ name, method, path, query string }{
		{"get", "GET", "/api/v1/namespaces/default/pods/web-0", ""},
		{"list", "GET", "/apis/apps/v1/namespaces/web/deployments", "limit=500&labelSelector=app%3Dweb"},
		{"watch", "GET", "/api/v1/namespaces/default/pods", "watch=true&resourceVersion=123&allowWatchBookmarks=true"},
		{"create", "POST", "/api/v1/namespaces/default/configmaps", "fieldManager=kubectl"},
		{"log-follow", "GET", "/api/v1/namespaces/default/pods/web-0/log", "follow=true&container=c"},
		{"nonresource", "GET", "/healthz/etcd", ""},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(c.method, c.path, c.query, u); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
