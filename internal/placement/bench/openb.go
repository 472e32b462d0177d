package bench

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// PublishedPolicy maps our policies to the FGD simulator's names for the
// ones that implement the same idea; others have no published counterpart.
var PublishedPolicy = map[string]string{"random": "01-Random", "bestfit": "05-BestFit", "fgd": "06-FGD"}

// Published holds the FGD artifact's median unallocated GPU % by
// workload, simulator policy name and arrival %.
type Published map[string]map[string]map[int]float64

// Median returns the published median for a variant (e.g. "default"), one
// of our policy names, and an arrival level.
func (p Published) Median(variant, policy string, arrivedPct int) (float64, bool) {
	name, ok := PublishedPolicy[policy]
	if !ok {
		return 0, false
	}
	v, ok := p["openb_pod_list_"+variant][name][arrivedPct]
	return v, ok
}

// ReadPublished reads fgd_expected_results/summary_unallocated_gpu_pct.csv.
func ReadPublished(path string) (Published, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%s:1: %w", path, err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	for _, need := range []string{"workload", "sc_policy", "arrived_pct_of_gpu_capacity", "unalloc_gpu_pct_median"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("%s:1: missing column %q", path, need)
		}
	}
	out := Published{}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		line, _ := r.FieldPos(0)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		arrived, err := strconv.Atoi(rec[col["arrived_pct_of_gpu_capacity"]])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: field arrived_pct_of_gpu_capacity: %w", path, line, err)
		}
		median, err := strconv.ParseFloat(rec[col["unalloc_gpu_pct_median"]], 64)
		if err != nil || median < 0 || median > 100 {
			return nil, fmt.Errorf("%s:%d: field unalloc_gpu_pct_median=%q is not a percentage", path, line, rec[col["unalloc_gpu_pct_median"]])
		}
		w, pol := rec[col["workload"]], rec[col["sc_policy"]]
		if out[w] == nil {
			out[w] = map[string]map[int]float64{}
		}
		if out[w][pol] == nil {
			out[w][pol] = map[int]float64{}
		}
		out[w][pol][arrived] = median
	}
}

// Variants lists the pod-list variants present in an openb directory, in
// name order ("default", "cpu050", ...).
func Variants(dir string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "openb_pod_list_*.csv"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range matches {
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m), "openb_pod_list_"), ".csv"))
	}
	return out, nil
}
