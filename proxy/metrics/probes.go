package metrics

import "github.com/prometheus/client_golang/prometheus"

// HealthProbesName is the name of the health probe counter.
const HealthProbesName = "kube_gateway_health_probes_total"

// Connections of kube_gateway_health_probes_total.
const (
	ConnectionPooled = "pooled"
	ConnectionNew    = "new"
)

var healthProbesDesc = prometheus.NewDesc(HealthProbesName,
	"Health probes of member servers sent by this gateway replica, by the connection they went over: pooled (the one proxied requests use) or new (a connection of their own, closed after the answer, with --probe-with-new-connections for a server idle for 90s: a TLS handshake each).",
	[]string{"connection"}, nil)

// HealthProbes counts the probes sent; transport.ProbeCount is one.
type HealthProbes interface {
	Sent() (pooled, own uint64)
}

// healthProbesCollector reads the counts at scrape time.
type healthProbesCollector struct{ probes HealthProbes }

// NewHealthProbesCollector returns the collector of
// kube_gateway_health_probes_total, read from probes at each scrape.
func NewHealthProbesCollector(probes HealthProbes) prometheus.Collector {
	return healthProbesCollector{probes: probes}
}

func (c healthProbesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- healthProbesDesc }

func (c healthProbesCollector) Collect(ch chan<- prometheus.Metric) {
	pooled, own := c.probes.Sent()
	ch <- prometheus.MustNewConstMetric(healthProbesDesc, prometheus.CounterValue, float64(pooled), ConnectionPooled)
	ch <- prometheus.MustNewConstMetric(healthProbesDesc, prometheus.CounterValue, float64(own), ConnectionNew)
}
