package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/tessera-gpu/tessera/internal/dynsim"
	"github.com/tessera-gpu/tessera/internal/engine"
	enginebench "github.com/tessera-gpu/tessera/internal/engine/bench"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/placement/bench"
	"github.com/tessera-gpu/tessera/internal/placement/sim"
)

// The node list and default pod list ship with the repository; the other
// variants are read from the openb directory when it is there.
const shippedOpenB = "internal/placement/testdata/openb"

func runBench(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("openb-dir", defaultOpenBDir(), "openb trace directory with the pod-list variants and fgd_expected_results/ ($OPENB_DIR)")
	shipped := fs.String("shipped", shippedOpenB, "directory with the shipped node list and default pod list")
	seeds := fs.String("seeds", "42-51", "seeds for the trace runs")
	heldout := fs.String("heldout-seeds", "52-61", "seeds never used while tuning tessera: fgd and tessera run on them too (empty: skip)")
	pols := fs.String("policies", strings.Join(placement.PolicyNames(), ","), "policies for the trace runs")
	variants := fs.String("variants", "all", "pod-list variants, comma-separated, or all")
	throughput := fs.Bool("throughput", true, "measure decisions/s, latency and memory on a synthetic cluster")
	nodes := fs.Int("nodes", 10000, "nodes of the synthetic cluster")
	dynamic := fs.Bool("dynamic", true, "run the dynamic simulation (simulate --mode dynamic, default options) on the shipped trace")
	quality := fs.Bool("quality", true, "run the openb placement-quality comparison")
	if err := fs.Parse(args); err != nil {
		return err
	}
	seedList, err := parseSeeds(*seeds)
	if err != nil {
		return err
	}
	var heldoutList []uint64
	if *heldout != "" {
		if heldoutList, err = parseSeeds(*heldout); err != nil {
			return err
		}
	}
	if *quality {
		if err := benchOpenB(stdout, stderr, *dir, *shipped, *variants, strings.Split(*pols, ","), seedList, heldoutList); err != nil {
			return err
		}
	}
	if *throughput {
		if err := benchThroughput(stdout, *shipped, *nodes); err != nil {
			return err
		}
	}
	if *dynamic {
		return runDynamic(stdout, filepath.Join(*shipped, "openb_node_list_gpu_node.csv"), filepath.Join(*shipped, "openb_pod_list_default.csv"), dynsim.DefaultOptions(), true)
	}
	return nil
}

func defaultOpenBDir() string {
	if d := os.Getenv("OPENB_DIR"); d != "" {
		return d
	}
	return "../shared/traces/openb"
}

func benchOpenB(stdout, stderr io.Writer, dir, shipped, which string, policies []string, seeds, heldout []uint64) error {
	nodesCSV := filepath.Join(shipped, "openb_node_list_gpu_node.csv")
	variants := []string{"default"}
	var published bench.Published
	if _, err := os.Stat(dir); err != nil {
		fmt.Fprintf(stderr, "bench: openb directory %s is absent (set OPENB_DIR): only the shipped default trace runs, without published numbers\n", dir)
	} else {
		if variants, err = bench.Variants(dir); err != nil {
			return err
		}
		if published, err = bench.ReadPublished(filepath.Join(dir, "fgd_expected_results", "summary_unallocated_gpu_pct.csv")); err != nil {
			return err
		}
	}
	if which != "all" {
		variants = strings.Split(which, ",")
	}
	for _, v := range variants {
		podsCSV := filepath.Join(dir, "openb_pod_list_"+v+".csv")
		if v == "default" {
			podsCSV = filepath.Join(shipped, "openb_pod_list_default.csv")
		}
		t, err := sim.Load(nodesCSV, podsCSV)
		if err != nil {
			return err
		}
		for _, p := range policies {
			runs, err := sim.SimulateSeeds(t, sim.Config{Policy: p, Tune: 1.3, ShuffleNodes: true}, seeds)
			if err != nil {
				return err
			}
			ours := sim.Summarise(runs, []float64{100})[0].Median
			name := "sched.openb." + v + "." + p
			fmt.Fprintf(stdout, "BENCH %s.unalloc_pct %.3f pct\n", name, ours)
			if pub, ok := published.Median(v, p, 100); ok {
				fmt.Fprintf(stdout, "BENCH %s.published_unalloc_pct %.3f pct\n", name, pub)
			}
			if fgd, ok := published.Median(v, "fgd", 100); ok && p == "tessera" {
				fmt.Fprintf(stdout, "BENCH %s.minus_published_fgd_pp %.3f pp\n", name, ours-fgd)
			}
		}
		if len(heldout) > 0 {
			if err := benchHeldOut(stdout, t, "sched.openb."+v, heldout); err != nil {
				return err
			}
		}
	}
	return nil
}

// benchHeldOut compares tessera with our fgd on seeds that played no part in
// choosing tessera's weights, so a margin that only fits the tuning seeds shows.
func benchHeldOut(stdout io.Writer, t sim.Trace, prefix string, seeds []uint64) error {
	median := map[string]float64{}
	for _, p := range []string{"fgd", "tessera"} {
		runs, err := sim.SimulateSeeds(t, sim.Config{Policy: p, Tune: 1.3, ShuffleNodes: true}, seeds)
		if err != nil {
			return err
		}
		median[p] = sim.Summarise(runs, []float64{100})[0].Median
		fmt.Fprintf(stdout, "BENCH %s.%s.heldout_unalloc_pct %.3f pct\n", prefix, p, median[p])
	}
	fmt.Fprintf(stdout, "BENCH %s.tessera.heldout_minus_fgd_pp %.3f pp\n", prefix, median["tessera"]-median["fgd"])
	return nil
}

// benchThroughput runs on one core, as the target is stated.
func benchThroughput(stdout io.Writer, shipped string, nodes int) error {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	t, err := sim.Load(filepath.Join(shipped, "openb_node_list_gpu_node.csv"), filepath.Join(shipped, "openb_pod_list_default.csv"))
	if err != nil {
		return err
	}
	syn := bench.Synthetic{Nodes: nodes, GPUs: 8, Models: 2, CPU: 128000, MemMiB: 1 << 20}
	pods := bench.Unconstrained(t.Pods)
	if err := measure(stdout, fmt.Sprintf("nodes%d", nodes), syn.Specs(), pods, 1.0); err != nil {
		return err
	}
	if err := measure(stdout, "openb_cluster", t.Nodes, t.Pods, 1.3); err != nil {
		return err
	}
	return measureCycle(stdout, fmt.Sprintf("nodes%d", nodes), syn.Specs(), pods)
}

// measureCycle is the scheduling engine's full cycle (pop, admit, fit,
// place or fail, requeue) with 10,000 pods pending on the filled cluster.
func measureCycle(stdout io.Writer, tag string, specs []partition.NodeSpec, pods []placement.Request) error {
	for _, run := range []struct {
		suffix string
		cfg    engine.Config
	}{{"", enginebench.CycleConfig()}, {".with_preemption", enginebench.FullConfig()}} {
		res, err := enginebench.RunCycle(enginebench.CycleSetup{Nodes: specs, Pods: pods, Pending: 10000, Rounds: 5, FreedPerRound: 500, Engine: run.cfg, Seed: 42})
		if err != nil {
			return err
		}
		name := tag + run.suffix
		fmt.Fprintf(stdout, "BENCH sched.cycle_per_s.%s %.0f pods/s\n", name, res.PerSecond())
		fmt.Fprintf(stdout, "BENCH sched.cycle_per_cpu_s.%s %.0f pods/cpu-s\n", name, res.PerCPUSecond())
		fmt.Fprintf(stdout, "BENCH sched.cycle_attempts.%s %d pods\n", name, res.Attempts)
		fmt.Fprintf(stdout, "BENCH sched.cycle_placed.%s %d pods\n", name, res.Placed)
		fmt.Fprintf(stdout, "BENCH sched.cycle_preempted.%s %d pods\n", name, res.Preempted)
	}
	return nil
}

// measure prints throughput, latency and memory of tessera with the index,
// the same with a full scan (first decisions only), and whether the two
// ever decide differently.
func measure(stdout io.Writer, tag string, specs []partition.NodeSpec, pods []placement.Request, fill float64) error {
	idx, err := bench.RunThroughput(specs, pods, "tessera", false, fill, 42, 0)
	if err != nil {
		return err
	}
	const scanDecisions = 500
	scan, err := bench.RunThroughput(specs, pods, "tessera", true, fill, 42, scanDecisions)
	if err != nil {
		return err
	}
	n, differ, err := bench.CompareIndexScan(specs, pods, "tessera", 42, fill, 2000)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "BENCH sched.decisions_per_s.%s %.0f decisions/s\n", tag, idx.PerSecond())
	fmt.Fprintf(stdout, "BENCH sched.decision_p50_us.%s %.1f us\n", tag, us(idx.P50))
	fmt.Fprintf(stdout, "BENCH sched.decision_p99_us.%s %.1f us\n", tag, us(idx.P99))
	fmt.Fprintf(stdout, "BENCH sched.decision_max_us.%s %.1f us\n", tag, us(idx.Max))
	fmt.Fprintf(stdout, "BENCH sched.decisions.%s %d decisions\n", tag, idx.Decisions)
	fmt.Fprintf(stdout, "BENCH sched.engine_state_mib.%s %.1f MiB\n", tag, float64(idx.StateBytes)/(1<<20))
	fmt.Fprintf(stdout, "BENCH sched.index_shapes.%s %d shapes\n", tag, idx.Shapes)
	fmt.Fprintf(stdout, "BENCH sched.%s.tessera.unalloc_pct %.3f pct\n", tag, idx.UnallocPct)
	fmt.Fprintf(stdout, "BENCH sched.decisions_per_s.%s.scan %.0f decisions/s\n", tag, scan.PerSecond())
	fmt.Fprintf(stdout, "BENCH sched.index_speedup.%s %.1f x\n", tag, idx.PerSecond()/scan.PerSecond())
	fmt.Fprintf(stdout, "BENCH sched.index_vs_scan_differing.%s %d of_%d_decisions\n", tag, differ, n)
	return nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
