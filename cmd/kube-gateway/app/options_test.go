package app

import (
	"strings"
	"testing"
	"time"

	"github.com/kubewharf/kube-gateway/proxy/fanout"
)

func TestValidateFanOut(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{FanOutParallel: 0, FanOutMemberTimeout: time.Second}, "--fan-out-parallel 0: must be 1 or more"},
		{Options{FanOutParallel: 1, FanOutMemberTimeout: 0}, "--fan-out-member-timeout 0s: must be positive"},
	} {
		errs := c.o.validateFanOut()
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, errs, c.want)
		}
	}
	// NewOptions registers feature gates: it can be called once per process,
	// and other tests do. The defaults are fanout's.
	defaults := Options{FanOutParallel: fanout.DefaultParallel, FanOutMemberTimeout: fanout.DefaultMemberTimeout}
	if errs := defaults.validateFanOut(); len(errs) != 0 {
		t.Errorf("the defaults are refused: %v", errs)
	}
}
