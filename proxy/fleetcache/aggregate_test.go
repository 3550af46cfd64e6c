package fleetcache

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

func withCaches(uc *gatewayv1alpha1.UpstreamCluster, caches ...gatewayv1alpha1.UpstreamClusterCacheStatus) *gatewayv1alpha1.UpstreamCluster {
	uc.Status.Caches = caches
	return uc
}

func TestDesiredSumsSelectedClusters(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cr := cachedResource("cms", map[string]string{"cache": "yes"})
	sel := map[string]string{"cache": "yes"}
	stale := metav1.NewTime(now.Add(-time.Minute))
	clusters := []*gatewayv1alpha1.UpstreamCluster{
		withCaches(upstream("a", sel, "s"), gatewayv1alpha1.UpstreamClusterCacheStatus{CachedResource: "cms", Synced: true, Objects: 3, Bytes: 300}),
		withCaches(upstream("b", sel, "s"), gatewayv1alpha1.UpstreamClusterCacheStatus{CachedResource: "cms", Reason: ReasonWatchFailed,
			Message: "m", StaleSince: &stale, Objects: 2, Bytes: 200}),
		withCaches(upstream("c", sel, ""), gatewayv1alpha1.UpstreamClusterCacheStatus{CachedResource: "cms", Reason: ReasonNoCacheIdentity}),
		withCaches(upstream("d", nil, "s"), gatewayv1alpha1.UpstreamClusterCacheStatus{CachedResource: "cms", Synced: true, Objects: 9}),
		withCaches(upstream("e", sel, "s"), gatewayv1alpha1.UpstreamClusterCacheStatus{CachedResource: "other", Synced: true, Objects: 9}),
	}
	st := Desired(cr, clusters, now)
	if st.SelectedClusters != 4 || st.SyncedClusters != 1 || st.Objects != 5 || st.Bytes != 500 {
		t.Fatalf("totals %+v", st)
	}
	if len(st.NotSynced) != 3 || st.NotSynced[0].Cluster != "b" || st.NotSynced[0].StaleSince == nil ||
		st.NotSynced[1].Reason != ReasonNoCacheIdentity || st.NotSynced[2].Cluster != "e" || st.NotSyncedTruncated {
		t.Fatalf("notSynced %+v", st.NotSynced)
	}
	if c := meta.FindStatusCondition(st.Conditions, gatewayv1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonNotAllSynced {
		t.Fatalf("Ready %+v", c)
	}

	var many []*gatewayv1alpha1.UpstreamCluster
	for i := range gatewayv1alpha1.MaxNotSyncedClusters + 1 {
		many = append(many, upstream(fmt.Sprintf("m%03d", i), nil, "s"))
	}
	st = Desired(cachedResource("all", nil), many, now)
	if len(st.NotSynced) != gatewayv1alpha1.MaxNotSyncedClusters || !st.NotSyncedTruncated || st.NotSynced[0].Cluster != "m000" {
		t.Fatalf("truncation: %d listed, truncated %v", len(st.NotSynced), st.NotSyncedTruncated)
	}

	synced := Desired(cr, clusters[:1], now)
	if c := meta.FindStatusCondition(synced.Conditions, gatewayv1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Ready %+v with every cluster synced", c)
	}
	more := *synced
	more.Objects++
	if !countsOnly(synced, &more) {
		t.Fatal("a change of objects alone is not counts only")
	}
	more.SyncedClusters++
	if countsOnly(synced, &more) {
		t.Fatal("a change of synced clusters is counts only")
	}
}
