// Package scrape reads a component's Prometheus /metrics endpoint: metric
// families by name, and quantiles of a histogram as PromQL's
// histogram_quantile computes them.
package scrape

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families fetches url (the text exposition format) and parses it.
func Families(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return fams, nil
}

// Histogram returns the histogram name in fams, its series summed (the
// buckets of every label combination added up).
func Histogram(fams map[string]*dto.MetricFamily, name string) (*dto.Histogram, error) {
	f, ok := fams[name]
	if !ok {
		return nil, fmt.Errorf("no metric %s", name)
	}
	if f.GetType() != dto.MetricType_HISTOGRAM {
		return nil, fmt.Errorf("metric %s is a %s, not a histogram", name, f.GetType())
	}
	hs := make([]*dto.Histogram, 0, len(f.Metric))
	for _, m := range f.Metric {
		hs = append(hs, m.GetHistogram())
	}
	return Sum(hs...), nil
}

// Sum adds histograms with the same buckets up: the series of one metric,
// or one metric scraped from several processes (a benchmark that restarts
// its scheduler for each pass).
func Sum(hs ...*dto.Histogram) *dto.Histogram {
	sum := &dto.Histogram{SampleCount: new(uint64), SampleSum: new(float64)}
	byBound := map[float64]uint64{}
	for _, h := range hs {
		*sum.SampleCount += h.GetSampleCount()
		*sum.SampleSum += h.GetSampleSum()
		for _, b := range h.Bucket {
			byBound[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	bounds := make([]float64, 0, len(byBound))
	for ub := range byBound {
		bounds = append(bounds, ub)
	}
	sort.Float64s(bounds)
	for _, ub := range bounds {
		sum.Bucket = append(sum.Bucket, &dto.Bucket{UpperBound: &ub, CumulativeCount: new(byBound[ub])})
	}
	return sum
}

// Quantile is the q-quantile (0 ≤ q ≤ 1) of h as histogram_quantile
// estimates it: linear interpolation inside the bucket that holds the
// rank, the first bucket starting at 0, and the upper bound of the highest
// finite bucket when the rank falls into +Inf. NaN for an empty histogram.
func Quantile(q float64, h *dto.Histogram) float64 {
	total := float64(h.GetSampleCount())
	if total == 0 || q < 0 || q > 1 {
		return math.NaN()
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for _, b := range h.Bucket {
		ub, count := b.GetUpperBound(), float64(b.GetCumulativeCount())
		if count >= rank {
			if math.IsInf(ub, 1) {
				return lower
			}
			if count == below {
				return ub
			}
			return lower + (ub-lower)*(rank-below)/(count-below)
		}
		lower, below = ub, count
	}
	return lower // the +Inf bucket is implicit in the text format's count
}
