package scrape

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
)

const exposition = `# HELP lat Latency.
# TYPE lat histogram
lat_bucket{queue="a",le="0.001"} 10
lat_bucket{queue="a",le="0.01"} 90
lat_bucket{queue="a",le="0.1"} 100
lat_bucket{queue="a",le="+Inf"} 100
lat_sum{queue="a"} 0.9
lat_count{queue="a"} 100
lat_bucket{queue="b",le="0.001"} 0
lat_bucket{queue="b",le="0.01"} 0
lat_bucket{queue="b",le="0.1"} 90
lat_bucket{queue="b",le="+Inf"} 100
lat_sum{queue="b"} 9
lat_count{queue="b"} 100
# TYPE up gauge
up 1
`

func serve(t *testing.T, body string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestHistogramQuantiles(t *testing.T) {
	fams, err := Families(context.Background(), serve(t, exposition))
	if err != nil {
		t.Fatal(err)
	}
	h, err := Histogram(fams, "lat")
	if err != nil {
		t.Fatal(err)
	}
	if h.GetSampleCount() != 200 {
		t.Fatalf("count %d, want 200 (both series)", h.GetSampleCount())
	}
	for _, c := range []struct{ q, want float64 }{
		{0.05, 0.001},                        // rank 10 = the first bucket's top
		{0.25, 0.001 + 0.009*40/80},          // rank 50 in (0.001, 0.01]: 10 below, 80 inside
		{0.5, 0.01 + 0.09*(100-90)/(190-90)}, // rank 100 in (0.01, 0.1]
		{0.99, 0.1},                          // rank 198 in +Inf: the highest finite bound
	} {
		if got := Quantile(c.q, h); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("q%.2f = %g, want %g", c.q, got, c.want)
		}
	}
	if _, err := Histogram(fams, "up"); err == nil {
		t.Error("a gauge read as a histogram")
	}
	if _, err := Histogram(fams, "absent"); err == nil {
		t.Error("an absent metric read")
	}
}

func TestEmptyHistogramHasNoQuantile(t *testing.T) {
	fams, err := Families(context.Background(), serve(t, "# TYPE lat histogram\nlat_bucket{le=\"+Inf\"} 0\nlat_sum 0\nlat_count 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := Histogram(fams, "lat")
	if err != nil {
		t.Fatal(err)
	}
	if q := Quantile(0.99, h); !math.IsNaN(q) {
		t.Fatalf("p99 of nothing = %g", q)
	}
}

func TestSumAddsScrapesOfSeveralProcesses(t *testing.T) {
	fams, err := Families(context.Background(), serve(t, exposition))
	if err != nil {
		t.Fatal(err)
	}
	both, err := Histogram(fams, "lat")
	if err != nil {
		t.Fatal(err)
	}
	twice := Sum(both, both)
	if twice.GetSampleCount() != 400 || twice.GetSampleSum() != 2*both.GetSampleSum() {
		t.Fatalf("sum of two scrapes: count %d sum %g, want 400 and %g", twice.GetSampleCount(), twice.GetSampleSum(), 2*both.GetSampleSum())
	}
	// The same distribution twice over has the same quantiles.
	for _, q := range []float64{0.25, 0.5, 0.99} {
		if a, b := Quantile(q, both), Quantile(q, twice); math.Abs(a-b) > 1e-12 {
			t.Errorf("q%.2f: %g of one scrape, %g of two", q, a, b)
		}
	}
	if n := Sum().GetSampleCount(); n != 0 {
		t.Errorf("sum of nothing has %d samples", n)
	}
}
