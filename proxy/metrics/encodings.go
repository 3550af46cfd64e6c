package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubewharf/kube-gateway/registry/jsoncache"
)

// ObjectEncodingsName is the name of the counter of UpstreamCluster objects
// written in LIST and WATCH responses, by where their JSON came from.
const ObjectEncodingsName = "kube_gateway_object_encodings_total"

// Label values of kube_gateway_object_encodings_total.
const (
	ResponseList  = "list"
	ResponseWatch = "watch"
	ResultKept    = "kept"
	ResultEncoded = "encoded"
)

var objectEncodingsDesc = prometheus.NewDesc(ObjectEncodingsName,
	"UpstreamCluster objects this replica wrote in LIST and WATCH responses of its own API (list items, watch initial events), by whether their JSON was kept from an earlier response (kept) or encoded and then kept (encoded). Table and PartialObjectMetadata responses are not counted.",
	[]string{"response", "result"}, nil)

// objectEncodingsCollector reads the counts at scrape time.
type objectEncodingsCollector struct{ writes func() jsoncache.Writes }

// NewObjectEncodingsCollector returns the collector of
// kube_gateway_object_encodings_total, read from writes at each scrape;
// jsoncache.Cache.Writes is one.
func NewObjectEncodingsCollector(writes func() jsoncache.Writes) prometheus.Collector {
	return objectEncodingsCollector{writes: writes}
}

func (c objectEncodingsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- objectEncodingsDesc }

func (c objectEncodingsCollector) Collect(ch chan<- prometheus.Metric) {
	w := c.writes()
	for _, s := range []struct {
		n                uint64
		response, result string
	}{
		{w.ListKept, ResponseList, ResultKept},
		{w.ListEncoded, ResponseList, ResultEncoded},
		{w.WatchKept, ResponseWatch, ResultKept},
		{w.WatchEncoded, ResponseWatch, ResultEncoded},
	} {
		ch <- prometheus.MustNewConstMetric(objectEncodingsDesc, prometheus.CounterValue, float64(s.n), s.response, s.result)
	}
}
