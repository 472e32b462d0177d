package dynsim

import (
	"testing"
	"time"
)

// TestQuantileNearestRank: the nearest-rank p-th percentile of n sorted
// values is the ⌈p·n⌉-th. Rounding p·n instead reports a smaller value
// whenever its fraction is under one half (p99 of 60 waits is the largest,
// not the 59th).
func TestQuantileNearestRank(t *testing.T) {
	seq := func(n int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = time.Duration(i+1) * time.Second
		}
		return out
	}
	for _, tc := range []struct {
		n    int
		q    float64
		want int // rank, 1-based
	}{
		{1, 0.99, 1}, {10, 0.5, 5}, {11, 0.5, 6}, {60, 0.99, 60}, {100, 0.99, 99},
		{101, 0.99, 100}, {250, 0.99, 248}, {3, 0.5, 2}, {40, 0.99, 40},
	} {
		if got := quantile(seq(tc.n), tc.q); got != time.Duration(tc.want)*time.Second {
			t.Errorf("quantile(1..%d, %v) = %v, want %ds", tc.n, tc.q, got, tc.want)
		}
	}
	if got := quantile(nil, 0.99); got != 0 {
		t.Errorf("quantile of none = %v, want 0", got)
	}
}
