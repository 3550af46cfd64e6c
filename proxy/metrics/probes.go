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

// HealthProbesSkippedName is the name of the counter of health probes that
// fell due and were not sent.
const HealthProbesSkippedName = "kube_gateway_health_probes_skipped_total"

var healthProbesSkippedDesc = prometheus.NewDesc(HealthProbesSkippedName,
	"Health probes of member servers that fell due on this gateway replica and were not sent, by reason: Traffic (the server answered a proxied request within the interval, it is healthy and its last probe succeeded), NotOwner (--share-health-checks: another replica owns the cluster, probes it and publishes its verdicts).",
	[]string{"reason"}, nil)

// healthProbesSkippedCollector reads the counts at scrape time.
type healthProbesSkippedCollector struct{ skipped func() map[string]uint64 }

// NewHealthProbesSkippedCollector returns the collector of
// kube_gateway_health_probes_skipped_total, read from skipped (by reason) at
// each scrape; health.Scheduler.Skipped is one.
func NewHealthProbesSkippedCollector(skipped func() map[string]uint64) prometheus.Collector {
	return healthProbesSkippedCollector{skipped: skipped}
}

func (c healthProbesSkippedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- healthProbesSkippedDesc
}

func (c healthProbesSkippedCollector) Collect(ch chan<- prometheus.Metric) {
	for reason, n := range c.skipped() {
		ch <- prometheus.MustNewConstMetric(healthProbesSkippedDesc, prometheus.CounterValue, float64(n), reason)
	}
}
