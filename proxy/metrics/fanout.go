package metrics

import "github.com/prometheus/client_golang/prometheus"

// Names of the fan-out list memory metrics.
const (
	FanOutListMemoryName  = "kube_gateway_fanout_list_memory_bytes"
	FanOutListRefusedName = "kube_gateway_fanout_lists_refused_total"
)

// Reasons of kube_gateway_fanout_lists_refused_total.
const (
	ReasonTooLarge   = "TooLarge"
	ReasonMemoryBusy = "MemoryBusy"
)

var (
	fanOutListMemoryDesc = prometheus.NewDesc(FanOutListMemoryName,
		"Bytes of member answers that the fan-out lists in flight hold now; bounded by --fan-out-list-memory.",
		nil, nil)
	fanOutListRefusedDesc = prometheus.NewDesc(FanOutListRefusedName,
		"Fan-out lists failed by --fan-out-list-memory: TooLarge (413, the list alone is larger), MemoryBusy (429, other fan-out lists held the memory).",
		[]string{"reason"}, nil)
)

// FanOutListMemory is what the fan-out lists hold and how many were refused;
// fanout.ListMemory is one.
type FanOutListMemory interface {
	Held() int64
	Refused() (tooLarge, busy uint64)
}

// fanOutCollector reads the fan-out list memory at scrape time.
type fanOutCollector struct{ memory FanOutListMemory }

// NewFanOutCollector returns the collector of the fan-out list memory
// metrics, read from memory at each scrape.
func NewFanOutCollector(memory FanOutListMemory) prometheus.Collector {
	return fanOutCollector{memory: memory}
}

func (c fanOutCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- fanOutListMemoryDesc
	ch <- fanOutListRefusedDesc
}

func (c fanOutCollector) Collect(ch chan<- prometheus.Metric) {
	tooLarge, busy := c.memory.Refused()
	ch <- prometheus.MustNewConstMetric(fanOutListMemoryDesc, prometheus.GaugeValue, float64(c.memory.Held()))
	ch <- prometheus.MustNewConstMetric(fanOutListRefusedDesc, prometheus.CounterValue, float64(tooLarge), ReasonTooLarge)
	ch <- prometheus.MustNewConstMetric(fanOutListRefusedDesc, prometheus.CounterValue, float64(busy), ReasonMemoryBusy)
}
