package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tessera-gpu/tessera/internal/region"
)

// WaitHistogram is tessera_balloon_owner_wait_seconds: the hook counts each
// ended wait in the lane of its duration (tessera_abi.h, wait_hist), so the
// histogram is made of those counts as they are, not re-observed: its buckets
// are the hook's lane bounds, its sum the waits' total time.
type WaitHistogram struct {
	desc *prometheus.Desc

	mu      sync.Mutex
	lanes   [region.BalloonWaitLanes]uint64
	count   uint64
	seconds float64
}

// NewWaitHistogram describes the series with the node's constant labels.
func NewWaitHistogram(labels prometheus.Labels) *WaitHistogram {
	return &WaitHistogram{desc: prometheus.NewDesc("tessera_balloon_owner_wait_seconds",
		"How long owner allocations waited in the hook for reclaimed memory, per wait (the hook's histogram lanes; buckets are its lane bounds).",
		nil, labels)}
}

// Add counts ended waits per lane and the seconds they took in all.
func (h *WaitHistogram) Add(lanes [region.BalloonWaitLanes]uint64, seconds float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, n := range lanes {
		h.lanes[k] += n
		h.count += n
	}
	h.seconds += seconds
}

// Count is how many waits were added.
func (h *WaitHistogram) Count() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}

// Describe implements prometheus.Collector.
func (h *WaitHistogram) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

// Collect implements prometheus.Collector: cumulative buckets at the lane bounds
// (the last lane is only in the count, as +Inf).
func (h *WaitHistogram) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	defer h.mu.Unlock()
	buckets := make(map[float64]uint64, len(region.BalloonWaitBoundsUs))
	var cum uint64
	for k, us := range region.BalloonWaitBoundsUs {
		cum += h.lanes[k]
		buckets[float64(us)/1e6] = cum
	}
	ch <- prometheus.MustNewConstHistogram(h.desc, h.count, h.seconds, buckets)
}
