package upstreamcluster

import (
	"testing"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
)

func TestStartsWithState(t *testing.T) {
	yes, no := true, false
	for _, c := range []struct {
		rv      string
		initial *bool
		want    bool
	}{
		{"", nil, true}, {"0", nil, true}, {"", &yes, true}, {"0", &yes, true},
		{"", &no, false}, {"0", &no, false}, {"42", nil, false}, {"42", &yes, false},
	} {
		if got := startsWithState(&metainternalversion.ListOptions{ResourceVersion: c.rv, SendInitialEvents: c.initial}); got != c.want {
			t.Errorf("resourceVersion %q, sendInitialEvents %v: %v, want %v", c.rv, c.initial, got, c.want)
		}
	}
	if startsWithState(nil) {
		t.Error("no options: starts with the state")
	}
}
