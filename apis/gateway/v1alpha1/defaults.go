package v1alpha1

import "fmt"

// Defaults of the health check, applied when spec.healthCheck is absent too so
// that every cluster is checked the same way unless told otherwise.
const (
	DefaultHealthCheckPath               = "/readyz"
	DefaultHealthCheckIntervalSeconds    = 5
	DefaultHealthCheckTimeoutSeconds     = 2
	DefaultHealthCheckUnhealthyThreshold = 2
	DefaultHealthCheckHealthyThreshold   = 1
)

// Defaults of the member door's token reviews: KubeGateway's lifetimes, which
// kept a member's TokenReviews off the path of repeated tokens.
const (
	DefaultTokenReviewCacheTTLSeconds        = 600
	DefaultTokenReviewFailureCacheTTLSeconds = 10
)

// SetDefaults_UpstreamCluster fills in the defaults of an UpstreamCluster.
// defaulter-gen calls it from SetObjectDefaults_UpstreamCluster
// (zz_generated.defaults.go), which RegisterDefaults registers with a scheme:
// every decoder of a scheme with AddToScheme applies it, the server's decoding of
// request bodies and of what it reads back from etcd included.
func SetDefaults_UpstreamCluster(obj *UpstreamCluster) {
	if obj.Spec.HealthCheck == nil {
		obj.Spec.HealthCheck = &HealthCheck{}
	}
	hc := obj.Spec.HealthCheck
	if hc.Path == "" {
		hc.Path = DefaultHealthCheckPath
	}
	if hc.IntervalSeconds == 0 {
		hc.IntervalSeconds = DefaultHealthCheckIntervalSeconds
	}
	if hc.TimeoutSeconds == 0 {
		hc.TimeoutSeconds = DefaultHealthCheckTimeoutSeconds
	}
	if hc.UnhealthyThreshold == 0 {
		hc.UnhealthyThreshold = DefaultHealthCheckUnhealthyThreshold
	}
	if hc.HealthyThreshold == 0 {
		hc.HealthyThreshold = DefaultHealthCheckHealthyThreshold
	}
	if ss := obj.Spec.SecureServing; ss != nil {
		if ss.ClientCA == "" {
			ss.ClientCA = ClientCAFromSecret
		}
		if ss.TokenReview == nil {
			ss.TokenReview = &TokenReview{}
		}
		if ss.TokenReview.CacheTTLSeconds == 0 {
			ss.TokenReview.CacheTTLSeconds = DefaultTokenReviewCacheTTLSeconds
		}
		if ss.TokenReview.FailureCacheTTLSeconds == 0 {
			ss.TokenReview.FailureCacheTTLSeconds = DefaultTokenReviewFailureCacheTTLSeconds
		}
	}
	for i := range obj.Spec.DispatchPolicies {
		p := &obj.Spec.DispatchPolicies[i]
		if p.Strategy == "" {
			p.Strategy = RoundRobin
		}
		if p.Name == "" {
			p.Name = fmt.Sprintf("policy-%d", i)
		}
	}
}
