package jsoncache

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// codecs is what the gateway's API group is served with: streaming
// collections on, as genericapiserver.NewDefaultAPIGroupInfo sets them.
func codecs(t testing.TB) (*runtime.Scheme, serializer.CodecFactory) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := gatewayv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	return scheme, serializer.NewCodecFactory(scheme, serializer.WithStreamingCollectionEncodingToJSON())
}

// wrap returns plain with LISTs from a cache of at most maxBytes.
func wrap(t testing.TB, plain runtime.NegotiatedSerializer, maxBytes int64) runtime.NegotiatedSerializer {
	t.Helper()
	c, err := New(plain, gatewayv1alpha1.SchemeGroupVersion, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.NegotiatedSerializer()
}

func jsonInfo(t testing.TB, ns runtime.NegotiatedSerializer) runtime.SerializerInfo {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(ns.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		t.Fatal("no JSON serializer")
	}
	return info
}

// cluster is an UpstreamCluster with what makes encoding slow and easy to
// get wrong: managed fields, timestamps, characters encoding/json escapes.
func cluster(i int) gatewayv1alpha1.UpstreamCluster {
	at := metav1.NewTime(time.Date(2026, 12, 6, 10, 0, i%60, 0, time.UTC))
	return gatewayv1alpha1.UpstreamCluster{
		ObjectMeta: metav1.ObjectMeta{
			Name:              fmt.Sprintf("member-%d", i),
			UID:               types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i)),
			ResourceVersion:   strconv.Itoa(1000 + i),
			Generation:        2,
			CreationTimestamp: at,
			Labels:            map[string]string{"fleet": "a", "zone": "z" + strconv.Itoa(i%3)},
			Annotations:       map[string]string{"note": "<a & b>"},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "gateway.kubewharf.io/v1alpha1",
				Time: &at, FieldsType: "FieldsV1",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:servers":{}, "f:clientConfig":{"f:secretRef":{}}}}`)},
			}},
		},
		Spec: gatewayv1alpha1.UpstreamClusterSpec{
			Servers:      []gatewayv1alpha1.UpstreamServer{{Endpoint: "https://127.0.0.1:6443"}, {Endpoint: "https://127.0.0.2:6443"}},
			ClientConfig: gatewayv1alpha1.ClientConfig{SecretRef: gatewayv1alpha1.SecretReference{Namespace: "kube-gateway", Name: "member"}},
		},
		Status: gatewayv1alpha1.UpstreamClusterStatus{
			ObservedGeneration: 2,
			Conditions: []metav1.Condition{{
				Type: "Ready", Status: metav1.ConditionTrue, Reason: "Healthy", Message: "2/2 servers healthy", LastTransitionTime: at,
			}},
		},
	}
}

func clusters(n int) *gatewayv1alpha1.UpstreamClusterList {
	l := &gatewayv1alpha1.UpstreamClusterList{Items: make([]gatewayv1alpha1.UpstreamCluster, n)}
	for i := range l.Items {
		l.Items[i] = cluster(i)
	}
	l.ResourceVersion = "5000"
	return l
}

// encode writes obj as the API server does: the negotiated serializer's
// encoder for the group's version (conversion, GVK, then JSON).
func encode(t testing.TB, ns runtime.NegotiatedSerializer, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := ns.EncoderForVersion(jsonInfo(t, ns).Serializer, gatewayv1alpha1.SchemeGroupVersion)
	if err := enc.Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The envelope is a copy of apimachinery's list encoder: this fails when
// apimachinery writes lists differently.
func TestListsAreWrittenAsTheInnerSerializerWritesThem(t *testing.T) {
	_, plain := codecs(t)
	wrapped := wrap(t, plain, 1<<20)
	withoutUID := clusters(2)
	withoutUID.Items[1].UID = ""
	withoutRV := clusters(2)
	withoutRV.Items[0].ResourceVersion = ""
	paged := clusters(3)
	paged.Continue = "token<&>"
	paged.RemainingItemCount = new(int64(7))
	typed := clusters(2)
	typed.Items[0].APIVersion, typed.Items[0].Kind = gatewayv1alpha1.SchemeGroupVersion.String(), "UpstreamCluster"
	for name, obj := range map[string]runtime.Object{
		"nil items":                 &gatewayv1alpha1.UpstreamClusterList{},
		"empty items":               &gatewayv1alpha1.UpstreamClusterList{Items: []gatewayv1alpha1.UpstreamCluster{}},
		"one":                       clusters(1),
		"many":                      clusters(50),
		"item without UID":          withoutUID,
		"item without RV":           withoutRV,
		"continue and remaining":    paged,
		"item with kind":            typed,
		"cached resources":          &gatewayv1alpha1.CachedResourceList{Items: []gatewayv1alpha1.CachedResource{{ObjectMeta: metav1.ObjectMeta{Name: "cm", UID: "u", ResourceVersion: "1"}}}},
		"single object (delegated)": new(cluster(1)),
	} {
		t.Run(name, func(t *testing.T) {
			want := encode(t, plain, obj)
			// Twice: the second time the items come from the cache.
			for round := range 2 {
				if got := encode(t, wrapped, obj); !bytes.Equal(got, want) {
					t.Fatalf("round %d:\n got %s\nwant %s", round, got, want)
				}
			}
		})
	}
}

func TestOtherGroupsAndMediaTypesAreDelegated(t *testing.T) {
	_, plain := codecs(t)
	wrapped := wrap(t, plain, 1<<20)
	if len(wrapped.SupportedMediaTypes()) != len(plain.SupportedMediaTypes()) {
		t.Fatalf("media types: %d, want %d", len(wrapped.SupportedMediaTypes()), len(plain.SupportedMediaTypes()))
	}
	for i, info := range wrapped.SupportedMediaTypes() {
		_, ours := info.Serializer.(*Serializer)
		if want := info.MediaType == runtime.ContentTypeJSON; ours != want {
			t.Errorf("%s: wrapped %v, want %v", info.MediaType, ours, want)
		}
		if info.PrettySerializer != plain.SupportedMediaTypes()[i].PrettySerializer {
			t.Errorf("%s: pretty serializer replaced", info.MediaType)
		}
	}
	s := jsonInfo(t, wrapped).Serializer.(*Serializer)
	if _, ok := s.listParts(&metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1"}}); ok {
		t.Error("a list of another group is written from the cache")
	}
	if _, ok := s.listParts(&metav1.Table{TypeMeta: metav1.TypeMeta{APIVersion: gatewayv1alpha1.SchemeGroupVersion.String()}}); ok {
		t.Error("a Table is taken for a list")
	}
	// Decoding is the inner serializer's.
	body := encode(t, wrapped, clusters(3))
	obj, _, err := s.Decode(body, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := obj.(*gatewayv1alpha1.UpstreamClusterList); !ok || len(l.Items) != 3 || l.Items[2].Name != "member-2" {
		t.Fatalf("decoded %#v", obj)
	}
}

func TestItemsAreKeptByUIDAndResourceVersion(t *testing.T) {
	_, plain := codecs(t)
	wrapped := wrap(t, plain, 1<<20)
	l := clusters(3)
	encode(t, wrapped, l)

	// Same UID and resourceVersion: the bytes written before, even though
	// the object differs (storage never does that; this shows the cache
	// is what answered).
	l.Items[1].Spec.Servers[0].Endpoint = "https://127.0.0.9:6443"
	if got := encode(t, wrapped, l); bytes.Contains(got, []byte("127.0.0.9")) {
		t.Fatal("an unchanged resourceVersion was encoded again")
	}
	// A new resourceVersion is a new version: encoded again.
	l.Items[1].ResourceVersion = "99999"
	if got, want := encode(t, wrapped, l), encode(t, plain, l); !bytes.Equal(got, want) {
		t.Fatalf("after an update:\n got %s\nwant %s", got, want)
	}
}

func TestCacheStaysWithinItsBound(t *testing.T) {
	_, plain := codecs(t)
	one := int64(len(encode(t, plain, new(cluster(0)))))
	// Room for about ten items per generation.
	wrapped := wrap(t, plain, 20*(one+entryOverhead+100))
	c := jsonInfo(t, wrapped).Serializer.(*Serializer).items
	l := clusters(50)
	for round := range 3 {
		for i := range l.Items {
			l.Items[i].ResourceVersion = strconv.Itoa(round*1000 + i)
		}
		if got, want := encode(t, wrapped, l), encode(t, plain, l); !bytes.Equal(got, want) {
			t.Fatalf("round %d: output differs", round)
		}
		if n := len(c.current) + len(c.previous); n > 25 || c.currentBytes > c.generation {
			t.Fatalf("round %d: %d entries, %d bytes in the current generation of %d", round, n, c.currentBytes, c.generation)
		}
	}
	// Items that every LIST writes stay cached across generations.
	small := clusters(3)
	for i := range small.Items {
		small.Items[i].UID = types.UID("small-" + strconv.Itoa(i))
	}
	encode(t, wrapped, small)
	churn := clusters(5) // half a generation per round
	for round := range 20 {
		for i := range churn.Items { // new versions: the generations turn over
			churn.Items[i].ResourceVersion = strconv.Itoa(10000 + round*100 + i)
		}
		encode(t, wrapped, churn)
		encode(t, wrapped, small)
	}
	c.mu.Lock()
	_, ok := c.current[itemKey{uid: small.Items[0].UID, resourceVersion: small.Items[0].ResourceVersion}]
	c.mu.Unlock()
	if !ok {
		t.Fatal("an item every LIST writes fell out of the cache")
	}
}

// BenchmarkListOfUpstreamClusters compares a LIST's encoding with and
// without the item cache, conversion included (what the API server runs).
func BenchmarkListOfUpstreamClusters(b *testing.B) {
	_, plain := codecs(b)
	l := clusters(3000)
	for name, ns := range map[string]runtime.NegotiatedSerializer{
		"plain":  plain,
		"cached": wrap(b, plain, 64<<20),
	} {
		b.Run(name, func(b *testing.B) {
			enc := ns.EncoderForVersion(jsonInfo(b, ns).Serializer, gatewayv1alpha1.SchemeGroupVersion)
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				if err := enc.Encode(l, &buf); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(buf.Len()))
		})
	}
}

// failingWriter fails every write, counting them.
type failingWriter struct{ writes int }

func (w *failingWriter) Write([]byte) (int, error) {
	w.writes++
	return 0, errors.New("connection reset")
}

func TestListStopsAtAFailedWrite(t *testing.T) {
	_, plain := codecs(t)
	wrapped := wrap(t, plain, 64<<20)
	enc := wrapped.EncoderForVersion(jsonInfo(t, wrapped).Serializer, gatewayv1alpha1.SchemeGroupVersion)
	var w failingWriter
	if err := enc.Encode(clusters(500), &w); err == nil {
		t.Fatal("no error from a writer that fails")
	}
	if w.writes != 1 {
		t.Fatalf("%d writes after the first failed, want none", w.writes-1)
	}
	c := jsonInfo(t, wrapped).Serializer.(*Serializer).items
	if n := len(c.current); n >= 500 {
		t.Fatalf("all %d items encoded after the first write failed", n)
	}
}
