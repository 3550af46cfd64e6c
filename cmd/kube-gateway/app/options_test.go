package app

import (
	"strings"
	"testing"
	"time"
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
}
