package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/placement/sim"
)

func runSimulate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodes := fs.String("nodes", "", "node list CSV (openb format)")
	pods := fs.String("pods", "", "pod list CSV (openb format)")
	policy := fs.String("policy", "tessera", "placement policies, comma-separated, or all: "+strings.Join(placement.PolicyNames(), ", "))
	levels := fs.String("levels", "90,95,100,110,120,130", "arrival levels to report, in % of GPU capacity")
	seeds := fs.String("seeds", "42-51", "seeds: a range a-b or a comma list")
	tune := fs.Float64("tune", 1.3, "inflate the pods to this multiple of GPU capacity (0: replay as is)")
	coverage := fs.Float64("coverage", 0.95, "share of pods the fragmentation target workload covers")
	format := fs.String("format", "table", "output: table or csv")
	out := fs.String("out", "", "directory for one per-pod CSV per run")
	order := fs.String("node-order", "shuffled", "order that breaks score ties: shuffled (one random order per seed, as the published simulator behaves) or file (the node list's order)")
	scan := fs.Bool("scan", false, "score every node for every pod instead of using the score index")
	mode := fs.String("mode", "fgd", "fgd (the FGD paper's protocol: pods only arrive) or dynamic (pods arrive, wait, run and leave; compares scheduling modes)")
	dynamic := dynamicFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nodes == "" || *pods == "" {
		return errors.New("--nodes and --pods are required")
	}
	switch *mode {
	case "dynamic":
		o, err := dynamic()
		if err != nil {
			return err
		}
		o.Policy = *policy
		if *format != "table" && *format != "bench" {
			return fmt.Errorf("--format %q: dynamic mode writes table or bench", *format)
		}
		return runDynamic(stdout, *nodes, *pods, o, *format == "bench")
	case "fgd":
	default:
		return fmt.Errorf("--mode %q: want fgd or dynamic", *mode)
	}
	if *order != "shuffled" && *order != "file" {
		return fmt.Errorf("--node-order %q: want shuffled or file", *order)
	}
	if *format != "table" && *format != "csv" {
		return fmt.Errorf("--format %q: want table or csv", *format)
	}
	if *tune < 0 || *tune > 100 || *coverage <= 0 || *coverage > 1 {
		return errors.New("--tune must be in 0..100 and --coverage in (0, 1]")
	}
	seedList, err := parseSeeds(*seeds)
	if err != nil {
		return err
	}
	levelList, err := parseLevels(*levels)
	if err != nil {
		return err
	}
	policyList := strings.Split(*policy, ",")
	if *policy == "all" {
		policyList = placement.PolicyNames()
	}
	t, err := sim.Load(*nodes, *pods)
	if err != nil {
		return err
	}
	var summaries []sim.Summary
	for _, p := range policyList {
		cfg := sim.Config{Policy: p, Tune: *tune, Coverage: *coverage, Scan: *scan, ShuffleNodes: *order == "shuffled"}
		runs, err := sim.SimulateSeeds(t, cfg, seedList)
		if err != nil {
			return err
		}
		if *out != "" {
			if err := writeRuns(*out, runs); err != nil {
				return err
			}
		}
		summaries = append(summaries, sim.Summary{Policy: p, Rows: sim.Summarise(runs, levelList)})
	}
	if *format == "csv" {
		return sim.WriteCSV(stdout, summaries)
	}
	sim.WriteTable(stdout, summaries)
	return nil
}

// parseLevels reads "90,100,130".
func parseLevels(s string) ([]float64, error) {
	var out []float64
	for _, part := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil || v <= 0 || v > 1000 {
			return nil, fmt.Errorf("--levels %q: %q is not a percentage of capacity", s, part)
		}
		out = append(out, v)
	}
	return out, nil
}

func writeRuns(dir string, runs []*sim.Run) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, r := range runs {
		path := filepath.Join(dir, fmt.Sprintf("%s-seed%d.csv", r.Config.Policy, r.Config.Seed))
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		werr := sim.WriteSteps(f, r)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return fmt.Errorf("%s: %w", path, werr)
		}
	}
	return nil
}

// parseSeeds reads "42-51" or "1,2,7".
func parseSeeds(s string) ([]uint64, error) {
	if lo, hi, ok := strings.Cut(s, "-"); ok {
		a, err1 := strconv.ParseUint(lo, 10, 64)
		b, err2 := strconv.ParseUint(hi, 10, 64)
		if err1 != nil || err2 != nil || b < a || b-a > 10000 {
			return nil, fmt.Errorf("--seeds %q: want a range like 42-51", s)
		}
		var out []uint64
		for v := a; v <= b; v++ {
			out = append(out, v)
		}
		return out, nil
	}
	var out []uint64
	for _, part := range strings.Split(s, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(part), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--seeds %q: %q is not a seed", s, part)
		}
		out = append(out, v)
	}
	return out, nil
}
