package flowcontrol

import (
	"fmt"
	"testing"

	"k8s.io/utils/clock"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// The benchmarks use the real clock: its cost is part of the hot path.
func benchSchemas() []gatewayv1alpha1.FlowControlSchema {
	const huge = 1 << 30 // never refuses within a benchmark
	return []gatewayv1alpha1.FlowControlSchema{
		exempt("exempt"),
		bucket("tokenBucket", huge, huge),
		distinguished(bucket("tokenBucket/user", huge, huge), gatewayv1alpha1.FlowDistinguisherUser),
		inflight("maxInflight", huge, false),
		distinguished(inflight("maxInflight/user", huge, false), gatewayv1alpha1.FlowDistinguisherUser),
		inflight("maxInflight/longRunning", huge, false),
	}
}

func BenchmarkAdmit(b *testing.B) {
	set := NewSet(nil, benchSchemas(), clock.RealClock{}, nil)
	for _, sc := range benchSchemas() {
		s := set.Schema(sc.Name)
		r := Request{User: "system:serviceaccount:kube-system:replicaset-controller", Namespace: "default",
			LongRunning: sc.Name == "maxInflight/longRunning"}
		b.Run(sc.Name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rel, _, ok := s.Admit(r)
				if !ok {
					b.Fatal("refused")
				}
				rel()
			}
		})
		b.Run(sc.Name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					rel, _, ok := s.Admit(r)
					if !ok {
						b.Fatal("refused")
					}
					rel()
				}
			})
		})
	}
}

// BenchmarkAdmitManyUsers admits requests of 5,000 distinct users in turn on a
// distinguished token bucket: map lookups on a large table.
func BenchmarkAdmitManyUsers(b *testing.B) {
	set := NewSet(nil, benchSchemas(), clock.RealClock{}, nil)
	s := set.Schema("tokenBucket/user")
	reqs := make([]Request, 5000)
	for i := range reqs {
		reqs[i] = Request{User: fmt.Sprint("user-", i)}
		s.Admit(reqs[i])
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		rel, _, ok := s.Admit(reqs[i%len(reqs)])
		if !ok {
			b.Fatal("refused")
		}
		rel()
		i++
	}
}

// BenchmarkRefused measures the reject path of a token bucket (Retry-After computed).
func BenchmarkRefused(b *testing.B) {
	set := NewSet(nil, []gatewayv1alpha1.FlowControlSchema{bucket("tb", 1, 1)}, clock.RealClock{}, nil)
	s := set.Schema("tb")
	s.Admit(Request{})
	b.ReportAllocs()
	for b.Loop() {
		s.Admit(Request{}) // one token a second gets through; the rest are refused
	}
}

func BenchmarkNewSet(b *testing.B) {
	schemas := make([]gatewayv1alpha1.FlowControlSchema, 0, 50)
	for i := 0; i < 50; i++ {
		schemas = append(schemas, bucket(fmt.Sprint("s", i), 10, 10))
	}
	prev := NewSet(nil, schemas, clock.RealClock{}, nil)
	b.ReportAllocs()
	for b.Loop() {
		prev = NewSet(prev, schemas, clock.RealClock{}, nil)
	}
}
