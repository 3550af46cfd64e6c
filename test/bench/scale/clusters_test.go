package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestCountReady(t *testing.T) {
	uc := func(gen, observed int64, ready string) unstructured.Unstructured {
		u := unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "x"}}}
		u.SetGeneration(gen)
		status := map[string]any{"observedGeneration": observed}
		if ready != "" {
			status["conditions"] = []any{
				map[string]any{"type": "Other", "status": "True"},
				map[string]any{"type": "Ready", "status": ready},
			}
		}
		u.Object["status"] = status
		return u
	}
	items := []unstructured.Unstructured{
		uc(1, 1, "True"),  // compiled and Ready
		uc(1, 1, "False"), // compiled, no server ready
		uc(2, 1, "True"),  // a new generation not compiled yet: Ready is stale
		uc(1, 0, ""),      // no status yet
	}
	compiled, ready := countReady(items)
	if compiled != 2 || ready != 1 {
		t.Errorf("countReady = %d compiled, %d ready; want 2, 1", compiled, ready)
	}
}
