package replicas

import (
	"fmt"
	"slices"
	"testing"
)

func names(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s-%08x", prefix, i*2654435761))
	}
	return out
}

// Every replica that sees the same live set picks the same owner, whatever
// the order it lists them in.
func TestOwnerStable(t *testing.T) {
	live := names("kube-gateway-status", 5)
	reversed := slices.Clone(live)
	slices.Reverse(reversed)
	for _, key := range names("member", 200) {
		if a, b := Owner(key, live), Owner(key, reversed); a != b || !slices.Contains(live, a) {
			t.Fatalf("owner of %s: %q and %q in another order", key, a, b)
		}
	}
	if got := Owner("member-a", nil); got != "" {
		t.Errorf("owner among no replica: %q", got)
	}
	if got := Owner("member-a", live[:1]); got != live[0] {
		t.Errorf("owner among one replica: %q, want %q", got, live[0])
	}
}

// 10,000 clusters over 3 replicas: each owns a third, within 5 %.
func TestOwnerBalanced(t *testing.T) {
	live := names("kube-gateway-status", 3)
	keys := names("member", 10000)
	count := map[string]int{}
	for _, key := range keys {
		count[Owner(key, live)]++
	}
	for _, r := range live {
		if share := float64(count[r]) / float64(len(keys)); share < 0.95/3 || share > 1.05/3 {
			t.Errorf("replica %s owns %d of %d clusters (%.3f), want about a third", r, count[r], len(keys), share)
		}
	}
}

// A replica that joins takes about 1/N of the clusters and nothing else
// moves; one that leaves hands over only its own.
func TestOwnerMovesLittle(t *testing.T) {
	live := names("kube-gateway-status", 4)
	keys := names("member", 10000)
	three, four := live[:3], live
	moved := 0
	for _, key := range keys {
		before, after := Owner(key, three), Owner(key, four)
		if before != after {
			moved++
			if after != live[3] {
				t.Fatalf("%s moved from %s to %s, not to the replica that joined", key, before, after)
			}
		}
	}
	if share := float64(moved) / float64(len(keys)); share < 0.9/4 || share > 1.1/4 {
		t.Errorf("%d of %d clusters moved to the 4th replica (%.3f), want about a quarter", moved, len(keys), share)
	}
	// Back to three: the same ones move back, to where they were.
	for _, key := range keys {
		if before, after := Owner(key, four), Owner(key, three); before != live[3] && before != after {
			t.Fatalf("%s moved from %s to %s when another replica left", key, before, after)
		}
	}
}
