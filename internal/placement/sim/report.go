package sim

import (
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
)

// Levels are the arrival levels the paper reports, in % of GPU capacity.
var Levels = []float64{90, 95, 100, 110, 120, 130}

// At is the step in effect when arrived GPU requests reach pct % of
// capacity: the last step whose arrivals do not pass it. Before the first
// step nothing is allocated.
func (r *Run) At(pct float64) Step {
	limit := pct / 100 * float64(r.CapacityMilli)
	i, _ := slices.BinarySearchFunc(r.Steps, limit, func(s Step, l float64) int {
		if float64(s.ArrivedMilli) <= l {
			return -1
		}
		return 1
	})
	if i == 0 {
		return Step{}
	}
	return r.Steps[i-1]
}

// UnallocPct is 100 − allocated/capacity at an arrival level.
func (r *Run) UnallocPct(pct float64) float64 {
	return 100 - 100*float64(r.At(pct).AllocatedMilli)/float64(r.CapacityMilli)
}

// FragPct is the fragmentation as % of capacity at an arrival level.
func (r *Run) FragPct(pct float64) float64 {
	return 100 * r.At(pct).FragMilli / float64(r.CapacityMilli)
}

// Row summarises one arrival level over several seeds.
type Row struct {
	ArrivedPct             float64
	Median, Mean, Min, Max float64 // unallocated GPU %
	FragMedian             float64 // fragmentation, % of capacity
	Seeds                  int
}

// Summarise reduces runs (one per seed) to a row per level.
func Summarise(runs []*Run, levels []float64) []Row {
	var rows []Row
	for _, l := range levels {
		var u, f []float64
		for _, r := range runs {
			u = append(u, r.UnallocPct(l))
			f = append(f, r.FragPct(l))
		}
		row := Row{ArrivedPct: l, Median: median(u), FragMedian: median(f), Seeds: len(runs)}
		row.Min, row.Max = slices.Min(u), slices.Max(u)
		for _, v := range u {
			row.Mean += v / float64(len(u))
		}
		rows = append(rows, row)
	}
	return rows
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Summary is one policy's rows.
type Summary struct {
	Policy string
	Rows   []Row
}

// WriteTable prints summaries for a person, one block per policy.
func WriteTable(w io.Writer, summaries []Summary) {
	for i, s := range summaries {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "policy %s, %d seeds\n", s.Policy, s.Rows[0].Seeds)
		fmt.Fprintf(w, "%-11s %-8s %-8s %-8s %-8s %-8s\n", "arrived_%", "unalloc%", "mean", "min", "max", "frag%")
		for _, r := range s.Rows {
			fmt.Fprintf(w, "%-11.0f %-8.2f %-8.2f %-8.2f %-8.2f %-8.2f\n", r.ArrivedPct, r.Median, r.Mean, r.Min, r.Max, r.FragMedian)
		}
	}
}

// WriteCSV prints summaries as one CSV with a header.
func WriteCSV(w io.Writer, summaries []Summary) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"policy", "arrived_pct", "unalloc_pct_median", "unalloc_pct_mean", "unalloc_pct_min", "unalloc_pct_max", "frag_pct_median", "seeds"})
	for _, s := range summaries {
		for _, r := range s.Rows {
			cw.Write([]string{s.Policy, f(r.ArrivedPct), f(r.Median), f(r.Mean), f(r.Min), f(r.Max), f(r.FragMedian), strconv.Itoa(r.Seeds)})
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteSteps prints one run's steps as CSV, one row per pod.
func WriteSteps(w io.Writer, r *Run) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"pod", "arrived_milli", "allocated_milli", "frag_milli", "placed", "arrived_pct", "unalloc_pct"})
	for i, s := range r.Steps {
		cw.Write([]string{strconv.Itoa(i), strconv.FormatInt(s.ArrivedMilli, 10), strconv.FormatInt(s.AllocatedMilli, 10),
			strconv.FormatFloat(s.FragMilli, 'f', 1, 64), strconv.FormatBool(s.Placed),
			f(100 * float64(s.ArrivedMilli) / float64(r.CapacityMilli)),
			f(100 - 100*float64(s.AllocatedMilli)/float64(r.CapacityMilli))})
	}
	cw.Flush()
	return cw.Error()
}

func f(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
