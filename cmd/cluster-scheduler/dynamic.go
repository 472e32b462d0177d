package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/tessera-gpu/tessera/internal/dynsim"
	"github.com/tessera-gpu/tessera/internal/placement/sim"
	"github.com/tessera-gpu/tessera/internal/placement/trace"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// dynamicFlags registers the flags of `simulate --mode dynamic` on fs.
func dynamicFlags(fs *flag.FlagSet) func() (dynsim.Options, error) {
	d := dynsim.DefaultOptions()
	load := fs.Float64("load", d.Workload.Load, "dynamic: offered GPU load as a multiple of capacity")
	horizon := fs.Duration("horizon", d.Workload.Horizon, "dynamic: how long pods arrive (simulated)")
	maxRun := fs.Duration("max-run", d.Workload.MaxRun, "dynamic: cap on a pod's run time")
	p0 := fs.Float64("p0-share", d.Workload.P0Share, "dynamic: share of LS pods that are P0")
	teams := fs.Int("teams", d.Workload.Teams, "dynamic: teams pods are spread over by hash")
	seed := fs.Uint64("seed", d.Workload.Seed, "dynamic: seed of the P0 and team draws")
	modes := fs.String("modes", strings.Join(d.Modes, ","), "dynamic: modes to compare: "+strings.Join(dynsim.ModeNames, ", "))
	tick := fs.Duration("tick", d.Tick, "dynamic: interval between scheduling cycles")
	drain := fs.Duration("drain", d.Drain, "dynamic: simulated time allowed after the last arrival")
	warmup := fs.Duration("warmup", d.Warmup, "dynamic: arrivals before this are simulated but not reported")
	age := fs.Duration("age-step", d.AgeStep, "dynamic (full): wait that gains one priority class")
	ceiling := fs.String("age-ceiling", d.AgeCeiling.String(), "dynamic (full): the most urgent class ageing reaches")
	join := fs.String("age-join", d.AgeJoin.String(), "dynamic (full): where an aged pod queues in the class it reached: submission, reach (behind that class's earlier pods) or ahead (ahead of every pod that did not age into it)")
	ageClasses := fs.String("age-classes", "", "dynamic (full): the classes that age, e.g. P3 (default: all)")
	protect := fs.Bool("protect-aged", d.ProtectAged, "dynamic (full): a pod started while aged runs at the class it reached (only more urgent classes may preempt it)")
	podLog := fs.String("pod-log", "", "dynamic: write one CSV row per reported pod (arrival, first start, wait, evictions by class, reservation) to PREFIX.<mode>.csv")
	shares := fs.String("team-quota", "", "dynamic: the teams' guaranteed shares of GPU compute, e.g. 0.4,0.3,0.2,0.1 (default: equal)")
	deadlines := fs.String("deadline", "", "dynamic: per-class deadlines, e.g. P1=1h,P3=12h (pods still pending then are dropped)")
	balloons := fs.Bool("balloons", d.Balloons, "dynamic: also compare memory balloons off vs on (docs/balloon.md)")
	optIn := fs.Float64("balloon-opt-in", d.Balloon.OptIn, "dynamic: share of pods that opt in to balloons")
	grace := fs.Duration("balloon-grace", d.Balloon.Grace, "dynamic: a borrower's termination grace period")
	computeBound := fs.Bool("balloon-compute", d.Balloon.ComputeBound, "dynamic: balloons also need the borrower's compute share free on the GPU, as the engine places them (default); false: memory only, an upper bound")
	return func() (dynsim.Options, error) {
		o := d
		o.Balloons, o.Balloon.OptIn, o.Balloon.Grace, o.Balloon.ComputeBound = *balloons, *optIn, *grace, *computeBound
		o.Workload.Load, o.Workload.Horizon, o.Workload.MaxRun = *load, *horizon, *maxRun
		o.Workload.P0Share, o.Workload.Teams, o.Workload.Seed = *p0, *teams, *seed
		o.Modes = strings.Split(*modes, ",")
		o.Tick, o.Drain, o.AgeStep, o.Warmup = *tick, *drain, *age, *warmup
		c, err := priority.ParseClass(*ceiling)
		if err != nil {
			return o, fmt.Errorf("--age-ceiling: %w", err)
		}
		o.AgeCeiling = c
		if o.AgeJoin, err = priority.ParseJoin(*join); err != nil {
			return o, fmt.Errorf("--age-join: %w", err)
		}
		o.ProtectAged = *protect
		o.PodLog = *podLog
		if *ageClasses != "" {
			for _, part := range strings.Split(*ageClasses, ",") {
				k, err := priority.ParseClass(strings.TrimSpace(part))
				if err != nil {
					return o, fmt.Errorf("--age-classes %q: %w", *ageClasses, err)
				}
				o.AgeClasses = append(o.AgeClasses, k)
			}
		}
		if *shares != "" {
			for _, part := range strings.Split(*shares, ",") {
				v, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
				if err != nil || v < 0 || v > 1 {
					return o, fmt.Errorf("--team-quota %q: %q is not a share in [0, 1]", *shares, part)
				}
				o.TeamShares = append(o.TeamShares, v)
			}
		}
		if *deadlines != "" {
			for _, part := range strings.Split(*deadlines, ",") {
				k, v, ok := strings.Cut(part, "=")
				c, err := priority.ParseClass(k)
				dl, derr := time.ParseDuration(v)
				if !ok || err != nil || derr != nil || dl <= 0 {
					return o, fmt.Errorf("--deadline %q: want CLASS=DURATION pairs like P3=12h", part)
				}
				o.Deadline[c] = dl
			}
		}
		if o.Tick <= 0 || o.Drain < 0 || o.AgeStep < 0 || o.Warmup < 0 || o.Warmup >= o.Workload.Horizon {
			return o, errors.New("--tick must be positive, --drain, --age-step and --warmup not negative, --warmup below --horizon")
		}
		return o, nil
	}
}

// runDynamic is `simulate --mode dynamic`: every mode on one workload, a
// table (or BENCH lines), and an error if any pod was preempted inside its
// minimum run time.
func runDynamic(stdout io.Writer, nodesCSV, podsCSV string, o dynsim.Options, bench bool) error {
	nodes, err := trace.ReadNodesFile(nodesCSV)
	if err != nil {
		return err
	}
	pods, err := trace.ReadPodsFile(podsCSV)
	if err != nil {
		return err
	}
	start := time.Now()
	results, info, err := dynsim.Compare(sim.FromTrace(nodes, nil).Nodes, pods, o)
	if err != nil {
		return err
	}
	if bench {
		for _, r := range results {
			dynsim.WriteBench(stdout, r)
		}
		fmt.Fprintf(stdout, "BENCH sched.dynamic.run_s %.1f s\n", time.Since(start).Seconds())
	} else {
		fmt.Fprintf(stdout, "load %.2f: trace compressed %.0f×, one replay %v, %d replays over %v (first %v not reported); run times capped at %v\n",
			o.Workload.Load, info.Compression, info.Period.Round(time.Second), info.Replays, o.Workload.Horizon, o.Warmup, o.Workload.MaxRun)
		dynsim.WriteTable(stdout, results)
	}
	if o.Balloons {
		b, err := dynsim.CompareBalloonsOn(sim.FromTrace(nodes, nil).Nodes, pods, o)
		if err != nil {
			return fmt.Errorf("balloon comparison: %w", err)
		}
		if bench {
			dynsim.WriteBalloonBench(stdout, b)
		} else {
			dynsim.WriteBalloonTable(stdout, b)
		}
		if b[0].PromiseBreaches+b[1].PromiseBreaches > 0 {
			return fmt.Errorf("balloon comparison: a GPU was promised beyond its memory %d times", b[0].PromiseBreaches+b[1].PromiseBreaches)
		}
	}
	for _, r := range results {
		if v := r.MinRunViolations(); v > 0 {
			return fmt.Errorf("mode %s: %d pods preempted inside their minimum run time", r.Mode, v)
		}
	}
	return nil
}
