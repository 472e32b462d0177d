package balloon

import "time"

// History is one container's usage on one GPU over the policy window, as the node
// agent samples it. It keeps only what the window needs.
type History struct {
	samples []sample
	first   time.Time
}

type sample struct {
	at    time.Time
	usage uint64
}

// Observe records usage at t (samples arrive in time order; an older one is
// dropped) and forgets samples older than window before t.
func (h *History) Observe(t time.Time, usage uint64, window time.Duration) {
	if n := len(h.samples); n > 0 && t.Before(h.samples[n-1].at) {
		return
	}
	if h.first.IsZero() {
		h.first = t
	}
	h.samples = append(h.samples, sample{t, usage})
	cut := 0
	for cut < len(h.samples)-1 && t.Sub(h.samples[cut].at) > window {
		cut++
	}
	h.samples = append(h.samples[:0], h.samples[cut:]...)
}

// Peak is the highest usage over the window that ends at now.
func (h *History) Peak(now time.Time, window time.Duration) uint64 {
	var p uint64
	for _, s := range h.samples {
		if now.Sub(s.at) <= window {
			p = max(p, s.usage)
		}
	}
	return p
}

// Settled says whether the container has been watched for settle and its usage has
// not risen by more than rise over that time.
func (h *History) Settled(now time.Time, settle time.Duration, rise uint64) bool {
	if h.first.IsZero() || now.Sub(h.first) < settle {
		return false
	}
	var lo, hi uint64
	lo = ^uint64(0)
	for _, s := range h.samples {
		if now.Sub(s.at) <= settle {
			lo, hi = min(lo, s.usage), max(hi, s.usage)
		}
	}
	return lo == ^uint64(0) || hi-lo <= rise
}

// Since is when the container was first observed (zero if never).
func (h *History) Since() time.Time { return h.first }
