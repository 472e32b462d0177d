package demo

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tessera-gpu/tessera/internal/placement/bench"
)

// publishedExcerpt is the FGD artifact's summary rows for the default
// trace, shipped beside it (internal/placement/testdata/openb/README.md).
const publishedExcerpt = "fgd_published_default.csv"

// OpenBOptions locate the simulator and the trace.
type OpenBOptions struct {
	// Scheduler is the cluster-scheduler binary.
	Scheduler string
	// Shipped is the repository's internal/placement/testdata/openb (node
	// list, default pod list, and the published FGD medians for it).
	Shipped string
	// OpenBDir, when it holds fgd_expected_results/, is the full published
	// summary, read instead of the shipped excerpt.
	OpenBDir string
	// Seeds is the simulator's --seeds (default 42-51, the paper's ten).
	Seeds string
}

// RunOpenB replays the openb default trace with our fgd and tessera at 100 %
// arrival (`cluster-scheduler simulate`, the FGD paper's protocol) and sets
// the published FGD median beside them.
func RunOpenB(ctx context.Context, o OpenBOptions) (*OpenB, error) {
	if o.Seeds == "" {
		o.Seeds = "42-51"
	}
	began := time.Now()
	cmd := exec.CommandContext(ctx, o.Scheduler, "simulate",
		"--nodes", filepath.Join(o.Shipped, "openb_node_list_gpu_node.csv"),
		"--pods", filepath.Join(o.Shipped, "openb_pod_list_default.csv"),
		"--policy", "fgd,tessera", "--seeds", o.Seeds, "--levels", "100", "--format", "csv")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("cluster-scheduler simulate: %w: %s", err, errOut.String())
	}
	rows, err := csv.NewReader(&out).ReadAll()
	if err != nil || len(rows) < 3 {
		return nil, fmt.Errorf("cluster-scheduler simulate: unreadable CSV (%v): %q", err, out.String())
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	res := &OpenB{Trace: "openb default (1,213 nodes, 6,212 GPUs, 8,152 pods)", Arrival: 100}
	for _, r := range rows[1:] {
		med, err := strconv.ParseFloat(r[col["unalloc_pct_median"]], 64)
		if err != nil {
			return nil, fmt.Errorf("cluster-scheduler simulate: median %q: %w", r[col["unalloc_pct_median"]], err)
		}
		res.Seeds, _ = strconv.Atoi(r[col["seeds"]])
		switch r[col["policy"]] {
		case "fgd":
			res.FGD = med
		case "tessera":
			res.Tessera = med
		}
	}
	res.Took = time.Since(began).Round(100 * time.Millisecond).String()
	res.PublishedFrom = filepath.Join(o.Shipped, publishedExcerpt)
	if full := filepath.Join(o.OpenBDir, "fgd_expected_results", "summary_unallocated_gpu_pct.csv"); o.OpenBDir != "" {
		if _, err := os.Stat(full); err == nil {
			res.PublishedFrom = full
		}
	}
	pub, err := bench.ReadPublished(res.PublishedFrom)
	if err != nil {
		return nil, err
	}
	var ok bool
	if res.Published, ok = pub.Median("default", "fgd", 100); !ok {
		return nil, fmt.Errorf("%s: no FGD median for the default trace at 100 %%", res.PublishedFrom)
	}
	return res, nil
}
