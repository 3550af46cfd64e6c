package metrics

import "github.com/prometheus/client_golang/prometheus"

// ServerHealthyName is the name of the server health gauge.
const ServerHealthyName = "kube_gateway_upstream_server_healthy"

var serverHealthyDesc = prometheus.NewDesc(ServerHealthyName,
	"Whether an enabled server of a member cluster receives requests (1) or not (0), as this gateway replica sees it.",
	[]string{"cluster", "endpoint"}, nil)

// ServerSource calls fn for every enabled server of every usable cluster with
// its current health; clusterset.Controller.EachServer is one.
type ServerSource func(fn func(cluster, endpoint string, healthy bool))

// serverHealthCollector reads the health of every server at scrape time: no
// series outlives its cluster or server, and nothing is done per probe.
type serverHealthCollector struct {
	source ServerSource
}

// NewServerHealthCollector returns the collector of
// kube_gateway_upstream_server_healthy{cluster,endpoint}, read from source at
// each scrape. Register it next to the proxy metrics.
func NewServerHealthCollector(source ServerSource) prometheus.Collector {
	return serverHealthCollector{source: source}
}

func (c serverHealthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- serverHealthyDesc }

func (c serverHealthCollector) Collect(ch chan<- prometheus.Metric) {
	c.source(func(cluster, endpoint string, healthy bool) {
		v := 0.0
		if healthy {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(serverHealthyDesc, prometheus.GaugeValue, v, safe(cluster), safe(endpoint))
	})
}
