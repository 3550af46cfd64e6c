package upstreamcluster

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
)

var requestInfoFactory = &genericrequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

func TestWithRawProxyQuery(t *testing.T) {
	const proxyPath = "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-a/proxy/api/v1/namespaces/default/configmaps"
	tests := []struct {
		name          string
		method        string
		target        string
		noRequestInfo bool
		wantStored    bool
		wantRawQuery  string     // stored raw query, when wantStored
		wantURLQuery  url.Values // what the next handler sees in req.URL
	}{
		{
			name:         "proxy with dryRun: stored as is, hidden from the next handler",
			method:       http.MethodPatch,
			target:       proxyPath + "/cm?labelSelector=a%3Db&watch=true&dryRun=All&fieldManager=kubectl",
			wantStored:   true,
			wantRawQuery: "labelSelector=a%3Db&watch=true&dryRun=All&fieldManager=kubectl",
			wantURLQuery: url.Values{"labelSelector": {"a=b"}, "watch": {"true"}, "fieldManager": {"kubectl"}},
		},
		{
			name:         "proxy with repeated dryRun",
			method:       http.MethodPost,
			target:       proxyPath + "?dryRun=All&dryRun=All",
			wantStored:   true,
			wantRawQuery: "dryRun=All&dryRun=All",
			wantURLQuery: url.Values{},
		},
		{
			name:         "proxy without dryRun",
			method:       http.MethodGet,
			target:       proxyPath + "?labelSelector=a%3Db&watch=true",
			wantStored:   true,
			wantRawQuery: "labelSelector=a%3Db&watch=true",
			wantURLQuery: url.Values{"labelSelector": {"a=b"}, "watch": {"true"}},
		},
		{
			name:         "proxy without query",
			method:       http.MethodGet,
			target:       "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-a/proxy",
			wantStored:   true,
			wantRawQuery: "",
			wantURLQuery: url.Values{},
		},
		{
			name:         "get of an upstreamcluster keeps dryRun",
			method:       http.MethodGet,
			target:       "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-a?dryRun=All",
			wantURLQuery: url.Values{"dryRun": {"All"}},
		},
		{
			name:         "status subresource",
			method:       http.MethodPut,
			target:       "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-a/status?dryRun=All",
			wantURLQuery: url.Values{"dryRun": {"All"}},
		},
		{
			name:         "proxy of another group's upstreamclusters",
			method:       http.MethodPost,
			target:       "/apis/example.com/v1/upstreamclusters/member-a/proxy/x?dryRun=All",
			wantURLQuery: url.Values{"dryRun": {"All"}},
		},
		{
			name:         "proxy of another resource of the group",
			method:       http.MethodPost,
			target:       "/apis/gateway.kubewharf.io/v1alpha1/others/member-a/proxy/x?dryRun=All",
			wantURLQuery: url.Values{"dryRun": {"All"}},
		},
		{
			name:         "core pod proxy",
			method:       http.MethodPost,
			target:       "/api/v1/namespaces/default/pods/p/proxy/x?dryRun=All",
			wantURLQuery: url.Values{"dryRun": {"All"}},
		},
		{
			name:         "non-resource request",
			method:       http.MethodGet,
			target:       "/healthz?dryRun=All",
			wantURLQuery: url.Values{"dryRun": {"All"}},
		},
		{
			name:          "no RequestInfo",
			method:        http.MethodPost,
			target:        proxyPath + "?dryRun=All",
			noRequestInfo: true,
			wantURLQuery:  url.Values{"dryRun": {"All"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.target, nil)
			if !tt.noRequestInfo {
				info, err := requestInfoFactory.NewRequestInfo(req)
				if err != nil {
					t.Fatalf("NewRequestInfo: %v", err)
				}
				req = req.WithContext(genericrequest.WithRequestInfo(req.Context(), info))
			}
			origRawQuery := req.URL.RawQuery

			var (
				called    bool
				stored    string
				hasStored bool
				nextURL   *url.URL
			)
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				called = true
				stored, hasStored = rawQueryFrom(r.Context())
				nextURL = r.URL
				w.WriteHeader(http.StatusNoContent)
			})
			rec := httptest.NewRecorder()
			WithRawProxyQuery(next).ServeHTTP(rec, req)

			if !called {
				t.Fatal("the next handler was not called")
			}
			if rec.Code != http.StatusNoContent {
				t.Errorf("status = %d", rec.Code)
			}
			if hasStored != tt.wantStored {
				t.Fatalf("raw query stored = %v, want %v", hasStored, tt.wantStored)
			}
			if tt.wantStored && stored != tt.wantRawQuery {
				t.Errorf("stored raw query = %q, want %q", stored, tt.wantRawQuery)
			}
			if got := nextURL.Query(); !reflect.DeepEqual(got, tt.wantURLQuery) {
				t.Errorf("next handler query = %v, want %v", got, tt.wantURLQuery)
			}
			if nextURL.Path != req.URL.Path {
				t.Errorf("next handler path = %q, want %q", nextURL.Path, req.URL.Path)
			}
			if req.URL.RawQuery != origRawQuery {
				t.Errorf("the inbound request's URL was modified: %q, want %q", req.URL.RawQuery, origRawQuery)
			}
		})
	}
}
