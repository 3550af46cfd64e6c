package handler

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/cluster/clustertest"
	"github.com/kubewharf/kube-gateway/proxy/controller/clusterset"
	"github.com/kubewharf/kube-gateway/proxy/forward"
	"github.com/kubewharf/kube-gateway/proxy/metrics"
)

type fakeClusters struct {
	c     *cluster.Cluster
	err   error
	calls []string
}

func (f *fakeClusters) Lookup(name string) (*cluster.Cluster, error) {
	f.calls = append(f.calls, name)
	return f.c, f.err
}

type fakeGetter struct {
	obj   runtime.Object
	err   error
	calls []string
}

func (f *fakeGetter) Get(_ context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	f.calls = append(f.calls, name)
	return f.obj, f.err
}

var ucResource = gatewayv1alpha1.Resource("upstreamclusters")

// TestProxyRESTLookup: the errors a request gets for the cluster it names.
func TestLookup(t *testing.T) {
	notFound := apierrors.NewNotFound(ucResource, "member-a")
	etcdDown := apierrors.NewInternalError(errors.New("etcd is down"))
	compiled := &cluster.Cluster{Name: "member-a"}

	tests := []struct {
		name        string
		clusters    *fakeClusters
		getter      *fakeGetter
		wantErr     error // compared by identity, when set
		wantCode    int32 // StatusError code, when set
		wantMsg     []string
		wantGets    int
		wantCluster bool
	}{
		{
			name:     "unknown and absent: the getter's NotFound",
			clusters: &fakeClusters{err: clusterset.ErrUnknown},
			getter:   &fakeGetter{err: notFound},
			wantErr:  notFound,
			wantGets: 1,
		},
		{
			name:     "wrapped unknown and absent",
			clusters: &fakeClusters{err: fmt.Errorf("lookup: %w", clusterset.ErrUnknown)},
			getter:   &fakeGetter{err: notFound},
			wantErr:  notFound,
			wantGets: 1,
		},
		{
			name:     "unknown and the object cannot be read: that error",
			clusters: &fakeClusters{err: clusterset.ErrUnknown},
			getter:   &fakeGetter{err: etcdDown},
			wantErr:  etcdDown,
			wantGets: 1,
		},
		{
			name:     "unknown but present: retry",
			clusters: &fakeClusters{err: clusterset.ErrUnknown},
			getter:   &fakeGetter{obj: &gatewayv1alpha1.UpstreamCluster{ObjectMeta: metav1.ObjectMeta{Name: "member-a"}}},
			wantCode: http.StatusServiceUnavailable,
			wantMsg:  []string{`"member-a"`, "retry"},
			wantGets: 1,
		},
		{
			name:     "lookup error: 503 naming the cluster and the reason",
			clusters: &fakeClusters{err: errors.New("its credential Secret kube-gateway/member-a was not found on the hub")},
			getter:   &fakeGetter{err: errors.New("must not be called")},
			wantCode: http.StatusServiceUnavailable,
			wantMsg:  []string{`"member-a"`, "credential Secret kube-gateway/member-a was not found"},
		},
		{
			name:        "known cluster",
			clusters:    &fakeClusters{c: compiled},
			getter:      &fakeGetter{err: errors.New("must not be called")},
			wantCluster: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := New(Config{Clusters: tt.clusters, Objects: tt.getter, Forwarder: testForwarder})
			c, err := h.lookup(context.Background(), "member-a")
			if !reflect.DeepEqual(tt.clusters.calls, []string{"member-a"}) {
				t.Errorf("Lookup calls = %v", tt.clusters.calls)
			}
			if len(tt.getter.calls) != tt.wantGets {
				t.Errorf("Get calls = %v, want %d", tt.getter.calls, tt.wantGets)
			}
			for _, name := range tt.getter.calls {
				if name != "member-a" {
					t.Errorf("Get(%q), want member-a", name)
				}
			}
			if tt.wantCluster {
				if err != nil || c != compiled {
					t.Fatalf("lookup = %v, %v; want the compiled cluster", c, err)
				}
				return
			}
			if c != nil {
				t.Errorf("lookup returned a cluster with error %v", err)
			}
			if tt.wantErr != nil {
				if err != tt.wantErr {
					t.Fatalf("lookup error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			var se *apierrors.StatusError
			if !errors.As(err, &se) {
				t.Fatalf("lookup error = %T %v, want a StatusError", err, err)
			}
			st := se.Status()
			if st.Code != tt.wantCode || st.Reason != metav1.StatusReasonServiceUnavailable {
				t.Errorf("code, reason = %d, %s; want %d, ServiceUnavailable", st.Code, st.Reason, tt.wantCode)
			}
			if st.Details == nil || st.Details.RetryAfterSeconds <= 0 {
				t.Errorf("details = %+v, want RetryAfterSeconds > 0", st.Details)
			} else if st.Details.Name != "member-a" || st.Details.Group != gatewayv1alpha1.GroupName {
				t.Errorf("details = %+v, want name member-a in group %s", st.Details, gatewayv1alpha1.GroupName)
			}
			if d, ok := apierrors.SuggestsClientDelay(err); !ok || d <= 0 {
				t.Errorf("SuggestsClientDelay = %d, %v", d, ok)
			}
			for _, m := range tt.wantMsg {
				if !strings.Contains(st.Message, m) {
					t.Errorf("message %q does not contain %q", st.Message, m)
				}
			}
		})
	}
}

// TestServe forwards a request that names one member to it.
func TestServe(t *testing.T) {
	type seen struct{ path, query, user, authz string }
	var (
		mu   sync.Mutex
		reqs []seen
	)
	member := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reqs = append(reqs, seen{r.URL.Path, r.URL.RawQuery, r.Header.Get("Impersonate-User"), r.Header.Get("Authorization")})
		mu.Unlock()
		_, _ = io.WriteString(w, "from member")
	}))
	defer member.Close()

	c := clustertest.Compile(t, "member-a", "gw-token", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: member.Certificate().Raw}), nil, member.URL)

	tests := []struct {
		name     string
		path     string
		wantSeen seen
	}{
		{
			name:     "forwarded with the client's query, dryRun included",
			path:     "/api/v1/pods",
			wantSeen: seen{"/api/v1/pods", "labelSelector=a%3Db&dryRun=All", "alice", "Bearer gw-token"},
		},
		{
			name:     "the member's root",
			path:     "/",
			wantSeen: seen{"/", "labelSelector=a%3Db&dryRun=All", "alice", "Bearer gw-token"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			reqs = nil
			mu.Unlock()
			ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice", Groups: []string{"dev"}})
			rec := httptest.NewRecorder()
			h := New(Config{Clusters: &fakeClusters{c: c}, Objects: &fakeGetter{}, Forwarder: testForwarder})
			req := httptest.NewRequest(http.MethodGet, "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-a/proxy"+tt.path+"?labelSelector=a%3Db&dryRun=All", nil)
			h.Serve(rec, req.WithContext(ctx), "member-a", tt.path)
			if rec.Code != http.StatusOK {
				t.Fatalf("status = %d (%s), want 200", rec.Code, rec.Body.String())
			}
			mu.Lock()
			defer mu.Unlock()
			if len(reqs) != 1 || reqs[0] != tt.wantSeen {
				t.Errorf("member saw %+v, want %+v", reqs, tt.wantSeen)
			}
			if rec.Body.String() != "from member" {
				t.Errorf("body = %q", rec.Body.String())
			}
		})
	}
}

// testForwarder forwards with metrics that are never registered.
var testForwarder = forward.NewForwarder(metrics.New())

// denyConnect is a validating admission plugin that refuses CONNECT to one
// cluster and records what it was asked.
type denyConnect struct {
	deny  string
	attrs []admission.Attributes
}

func (d *denyConnect) Handles(op admission.Operation) bool { return op == admission.Connect }
func (d *denyConnect) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	d.attrs = append(d.attrs, a)
	if a.GetName() == d.deny {
		return admission.NewForbidden(a, errors.New("proxying to this cluster is closed"))
	}
	return nil
}

// TestAdmitsConnect: the handler runs CONNECT admission as the generic
// Connect handler does, and writes its refusal as a Status before anything is
// looked up or forwarded.
func TestAdmitsConnect(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := gatewayv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	admit := &denyConnect{deny: "member-a"}
	clusters := &fakeClusters{err: errors.New("must not be looked up")}
	h := New(Config{Clusters: clusters, Objects: &fakeGetter{}, Forwarder: testForwarder, Admission: admit, Scheme: scheme, Serializer: serializer.NewCodecFactory(scheme)})

	req := httptest.NewRequest(http.MethodGet, "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/member-a/proxy/api?x=1", nil)
	req = req.WithContext(genericapirequest.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"}))
	rec := httptest.NewRecorder()
	h.Serve(rec, req, "member-a", "/api")

	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), `"kind":"Status"`) || !strings.Contains(rec.Body.String(), "proxying to this cluster is closed") {
		t.Errorf("response %d %s, want a 403 Status with the plugin's reason", rec.Code, rec.Body.String())
	}
	if len(clusters.calls) != 0 {
		t.Errorf("looked up %v after admission refused", clusters.calls)
	}
	if len(admit.attrs) != 1 {
		t.Fatalf("admission asked %d times", len(admit.attrs))
	}
	a := admit.attrs[0]
	opts, _ := a.GetObject().(*gatewayv1alpha1.UpstreamClusterProxyOptions)
	if a.GetOperation() != admission.Connect || a.GetName() != "member-a" || a.GetResource().Resource != "upstreamclusters" ||
		a.GetSubresource() != "proxy" || a.GetKind().Kind != "UpstreamClusterProxyOptions" || a.GetUserInfo().GetName() != "alice" ||
		opts == nil || opts.Path != "/api" {
		t.Errorf("admission attributes: op %s name %s resource %v sub %s kind %v user %v object %#v",
			a.GetOperation(), a.GetName(), a.GetResource(), a.GetSubresource(), a.GetKind(), a.GetUserInfo(), a.GetObject())
	}
}

// TestHubHeadersOnce: a response the hub passes on carries neither the
// gateway's nor the member's Audit-ID and Cache-Control (the hub sets its
// own); a client of the gateway alone gets one of each.
func TestHubHeadersOnce(t *testing.T) {
	const id = "4f6c0b1e-audit"
	member := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Audit-Id", r.Header.Get("Audit-Id"))
		w.Header().Set("Cache-Control", "no-cache, private")
		if r.URL.Path == "/missing" {
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer member.Close()
	c := clustertest.Compile(t, "member-a", "gw-token", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: member.Certificate().Raw}), nil, member.URL)
	scheme := runtime.NewScheme()
	if err := gatewayv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})

	for _, viaHub := range []bool{true, false} {
		for _, path := range []string{"/api", "/missing"} {
			for _, cluster := range []string{"member-a", "unknown"} {
				clusters := &fakeClusters{c: c}
				if cluster == "unknown" {
					clusters = &fakeClusters{err: errors.New("not compiled")} // an error the gateway writes
				}
				h := New(Config{Clusters: clusters, Objects: &fakeGetter{}, Forwarder: testForwarder, Serializer: serializer.NewCodecFactory(scheme),
					ViaHub: func(*http.Request) bool { return viaHub }})
				req := httptest.NewRequest(http.MethodGet, "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/"+cluster+"/proxy"+path, nil)
				req.Header.Set("Audit-Id", id)
				req = req.WithContext(genericapirequest.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"}))
				rec := httptest.NewRecorder()
				// What the short chain sets before the handler runs.
				rec.Header().Set("Audit-Id", id)
				rec.Header().Set("Cache-Control", "no-cache, private")
				h.Serve(rec, req, cluster, path)

				want := 1
				if viaHub {
					want = 0
				}
				ids, cc := rec.Header().Values("Audit-Id"), rec.Header().Values("Cache-Control")
				if len(ids) != want || len(cc) != want {
					t.Errorf("via hub %v, %s%s (%d): Audit-Id %q, Cache-Control %q; want %d of each", viaHub, cluster, path, rec.Code, ids, cc, want)
				}
			}
		}
	}
}
