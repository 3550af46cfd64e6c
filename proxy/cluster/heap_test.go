package cluster_test

import (
	"crypto/x509"
	"fmt"
	"runtime"
	"testing"

	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/test/testca"
)

// BenchmarkCompiledHeap reports the heap a compiled cluster with two servers
// holds while idle, before any connection: B/cluster, over b.N clusters
// compiled with a client certificate and a CA, as the bench's stand-ins use
// (make bench-scale; docs/benchmark.md, "10,000 clusters").
func BenchmarkCompiledHeap(b *testing.B) {
	serverCA, clientCA := testca.New(b, "members"), testca.New(b, "gateway-client")
	leaf := clientCA.Issue(b, testca.Spec{CommonName: "gateway", Usage: x509.ExtKeyUsageClientAuth})
	data := map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM, "ca.crt": serverCA.PEM}
	held := make([]*cluster.Cluster, b.N)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range b.N {
		uc := upstreamCluster(fmt.Sprintf("https://127.0.100.1:%d", 1000+i%4), fmt.Sprintf("https://127.0.100.2:%d", 1000+i%4))
		uc.Name = fmt.Sprintf("scale-%05d", i)
		c, err := cluster.Compile(uc, secret(data), nil, nil, cluster.Options{})
		if err != nil {
			b.Fatal(err)
		}
		held[i] = c
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "B/cluster")
	runtime.KeepAlive(held)
}
