// Package scrape reads a broker's /metrics (the admin listener, netio/admin) into plain
// samples: what `ringlog top` shows and what tests assert on. It links neither the broker
// nor the client; only the Prometheus text format parser.
package scrape

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// bodyBytesMax bounds a scraped page (a broker with 10,000 partitions writes ~10 MiB).
const bodyBytesMax = 64 << 20

// Sample is one series' value. Histograms give their count and sum as Value and Sum.
type Sample struct {
	Labels map[string]string
	Value  float64
	Sum    float64 // histograms only
	// Buckets maps a histogram's upper bounds to cumulative counts.
	Buckets map[float64]uint64
}

// Metrics are the samples of one scrape by metric name.
type Metrics map[string][]Sample

// Fetch scrapes url (http://host:port/metrics).
func Fetch(ctx context.Context, hc *http.Client, url string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return Parse(io.LimitReader(resp.Body, bodyBytesMax))
}

// Parse reads the Prometheus text format.
func Parse(r io.Reader) (Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	out := Metrics{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			out[name] = append(out[name], sample(m))
		}
	}
	return out, nil
}

func sample(m *dto.Metric) Sample {
	s := Sample{Labels: map[string]string{}}
	for _, l := range m.GetLabel() {
		s.Labels[l.GetName()] = l.GetValue()
	}
	switch {
	case m.Gauge != nil:
		s.Value = m.Gauge.GetValue()
	case m.Counter != nil:
		s.Value = m.Counter.GetValue()
	case m.Untyped != nil:
		s.Value = m.Untyped.GetValue()
	case m.Histogram != nil:
		s.Value, s.Sum = float64(m.Histogram.GetSampleCount()), m.Histogram.GetSampleSum()
		s.Buckets = map[float64]uint64{}
		for _, b := range m.Histogram.GetBucket() {
			s.Buckets[b.GetUpperBound()] = b.GetCumulativeCount()
		}
	}
	return s
}

// Value returns the value of the series of name whose labels include every pair of
// labels (k1, v1, k2, v2, ...), and whether there is one.
func (m Metrics) Value(name string, labels ...string) (float64, bool) {
	for _, s := range m[name] {
		if s.matches(labels) {
			return s.Value, true
		}
	}
	return 0, false
}

// Sum adds the values of every series of name whose labels include labels.
func (m Metrics) Sum(name string, labels ...string) float64 {
	total := 0.0
	for _, s := range m[name] {
		if s.matches(labels) {
			total += s.Value
		}
	}
	return total
}

func (s Sample) matches(labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		if s.Labels[labels[i]] != labels[i+1] {
			return false
		}
	}
	return true
}

// Quantile estimates a histogram quantile (0..1) from its cumulative buckets, as
// Prometheus's histogram_quantile does (linear within the bucket); 0 when empty.
func (s Sample) Quantile(q float64) float64 {
	if s.Value == 0 || len(s.Buckets) == 0 {
		return 0
	}
	bounds := make([]float64, 0, len(s.Buckets))
	for b := range s.Buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	rank := q * s.Value
	lower, below := 0.0, uint64(0)
	for _, b := range bounds {
		count := s.Buckets[b]
		if float64(count) >= rank {
			inBucket := float64(count - below)
			if inBucket == 0 {
				return b
			}
			return lower + (b-lower)*(rank-float64(below))/inBucket
		}
		lower, below = b, count
	}
	return lower // above the last bound
}

// Key joins label values for map keys and sorting ("topic/partition").
func Key(s Sample, labels ...string) string {
	parts := make([]string, len(labels))
	for i, l := range labels {
		parts[i] = s.Labels[l]
	}
	return strings.Join(parts, "/")
}
