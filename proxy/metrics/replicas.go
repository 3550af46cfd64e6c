package metrics

import "github.com/prometheus/client_golang/prometheus"

// ReplicasName is the name of the live replicas gauge.
const ReplicasName = "kube_gateway_replicas"

var replicasDesc = prometheus.NewDesc(ReplicasName,
	"Gateway replicas this replica counts as live, itself included; flow-control limits are divided by it. 1 when limits are not split or the replicas' Leases cannot be read or written.",
	nil, nil)

// replicasCollector reads the count at scrape time.
type replicasCollector struct{ live func() int }

// NewReplicasCollector returns the collector of kube_gateway_replicas, read
// from live at each scrape.
func NewReplicasCollector(live func() int) prometheus.Collector {
	return replicasCollector{live: live}
}

func (c replicasCollector) Describe(ch chan<- *prometheus.Desc) { ch <- replicasDesc }

func (c replicasCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(replicasDesc, prometheus.GaugeValue, float64(c.live()))
}
