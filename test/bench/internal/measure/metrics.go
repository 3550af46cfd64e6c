package measure

import (
	"context"
	"fmt"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape of a Prometheus text endpoint, by family name.
type Metrics map[string]*dto.MetricFamily

// Scrape GETs url (a /metrics endpoint) with the target's client and headers
// and parses it.
func (t *Target) Scrape(ctx context.Context, url string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range t.Header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := t.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	return Metrics(fams), nil
}

// Sum adds the values of the samples of family name whose labels include
// every pair of match; ok is false when the family is missing.
func (m Metrics) Sum(name string, match map[string]string) (v float64, ok bool) {
	f, ok := m[name]
	if !ok {
		return 0, false
	}
metrics:
	for _, s := range f.GetMetric() {
		for k, want := range match {
			found := false
			for _, l := range s.GetLabel() {
				if l.GetName() == k {
					found = l.GetValue() == want
					break
				}
			}
			if !found {
				continue metrics
			}
		}
		switch {
		case s.Counter != nil:
			v += s.GetCounter().GetValue()
		case s.Gauge != nil:
			v += s.GetGauge().GetValue()
		case s.Untyped != nil:
			v += s.GetUntyped().GetValue()
		}
	}
	return v, true
}

// AllocBytes reads the cumulative count of heap bytes a Go process allocated
// from its metrics (client_golang's go collector, old or new name).
func (m Metrics) AllocBytes() (float64, error) {
	for _, name := range []string{"go_memstats_alloc_bytes_total", "go_gc_heap_allocs_bytes_total"} {
		if v, ok := m.Sum(name, nil); ok {
			return v, nil
		}
	}
	return 0, fmt.Errorf("no go_memstats_alloc_bytes_total in the metrics")
}
