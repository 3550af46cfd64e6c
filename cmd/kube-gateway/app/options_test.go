package app

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestValidateFanOut(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{MemberAccessReviewTTL: time.Minute, FanOutParallel: 0, FanOutMemberTimeout: time.Second}, "--fan-out-parallel 0: must be 1 or more"},
		{Options{MemberAccessReviewTTL: time.Minute, FanOutParallel: 1, FanOutMemberTimeout: 0}, "--fan-out-member-timeout 0s: must be positive"},
		{Options{MemberAccessReviewTTL: time.Minute, FanOutParallel: 1, FanOutMemberTimeout: time.Second, FanOutListMemory: resource.QuantityValue{Quantity: resource.MustParse("-1Mi")}},
			"--fan-out-list-memory -1Mi: must be 0 (no bound) or more"},
		{Options{MemberAccessReviewTTL: time.Minute, FanOutParallel: 1, FanOutMemberTimeout: time.Second, FleetCacheMemory: resource.QuantityValue{Quantity: resource.MustParse("-1Gi")}},
			"--fleet-cache-memory -1Gi: must be 0 (no bound) or more"},
		{Options{FanOutParallel: 1, FanOutMemberTimeout: time.Second}, "--member-access-review-ttl 0s: must be more than 0"},
	} {
		errs := c.o.validateFanOut()
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, errs, c.want)
		}
	}
}
