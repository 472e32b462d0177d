package gpunode

import (
	"context"
	"sort"

	dto "github.com/prometheus/client_model/go"

	"github.com/tessera-gpu/tessera/test/e2e/scrape"
)

// The monitor's per-container series (docs/metrics.md).
const (
	metricUsed    = "tessera_container_gpu_memory_used_bytes"
	metricLimit   = "tessera_container_gpu_memory_limit_bytes"
	metricPeak    = "tessera_container_gpu_memory_peak_bytes"
	metricRefused = "tessera_container_gpu_allocations_refused_total"
	metricCompute = "tessera_container_gpu_compute_limit_ratio"
	metricBusy    = "tessera_container_gpu_busy_seconds_total"
	metricWaited  = "tessera_container_throttled_seconds_total"
)

// scrapeRows reads the monitor's /metrics and returns one row per
// container and GPU, sorted by namespace, pod, container and GPU.
func (s *scenario) scrapeRows(ctx context.Context) ([]MetricRow, error) {
	fams, err := scrape.Families(ctx, s.monitorURL)
	if err != nil {
		return nil, err
	}
	rows := map[[4]string]*MetricRow{}
	row := func(m *dto.Metric) *MetricRow {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		k := [4]string{l["namespace"], l["pod"], l["container"], l["gpu_uuid"]}
		if rows[k] == nil {
			rows[k] = &MetricRow{Namespace: k[0], Pod: k[1], Container: k[2], GPU: k[3]}
		}
		return rows[k]
	}
	for _, m := range fams[metricUsed].GetMetric() {
		row(m).UsedMiB = m.GetGauge().GetValue() / mib
	}
	for _, m := range fams[metricLimit].GetMetric() {
		row(m).CapMiB = m.GetGauge().GetValue() / mib
	}
	for _, m := range fams[metricPeak].GetMetric() {
		row(m).PeakMiB = m.GetGauge().GetValue() / mib
	}
	for _, m := range fams[metricRefused].GetMetric() {
		row(m).Refused = uint64(m.GetCounter().GetValue())
	}
	for _, m := range fams[metricCompute].GetMetric() {
		row(m).ComputeRatio = m.GetGauge().GetValue()
	}
	for _, m := range fams[metricBusy].GetMetric() {
		row(m).BusySeconds = m.GetCounter().GetValue()
	}
	for _, m := range fams[metricWaited].GetMetric() {
		row(m).ThrottledSeconds = m.GetCounter().GetValue()
	}
	out := make([]MetricRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Pod != b.Pod {
			return a.Pod < b.Pod
		}
		if a.Container != b.Container {
			return a.Container < b.Container
		}
		return a.GPU < b.GPU
	})
	return out, nil
}
