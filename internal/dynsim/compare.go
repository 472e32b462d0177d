package dynsim

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement/trace"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// Options is a comparison of modes on one workload.
type Options struct {
	Workload WorkloadConfig
	Modes    []string
	Tick     time.Duration
	Drain    time.Duration
	// Warmup: pods arriving before it are simulated but not reported, and
	// allocation is averaged from it to the horizon (the cluster starts
	// empty; a contended steady state takes about a run time to build).
	Warmup  time.Duration
	AgeStep time.Duration
	// AgeCeiling is the most urgent class ageing reaches (full mode).
	AgeCeiling priority.Class
	// AgeJoin is where an aged pod queues in the class it reached (full
	// mode; DefaultOptions: priority.JoinAtReach).
	AgeJoin priority.Join
	// AgeClasses are the classes that age (full mode); empty: all.
	AgeClasses []priority.Class
	// ProtectAged (full mode): pods started while aged run at the class
	// they reached (engine.Config.ProtectAged).
	ProtectAged bool
	Deadline    [priority.NumClasses]time.Duration
	Policy      string
	// TeamShares are the teams' guaranteed shares of GPU compute (team-0
	// first); empty: equal shares of the whole cluster.
	TeamShares []float64
	// Balloons adds the memory-balloon comparison (balloons off vs on) on the
	// same workload, configured by Balloon.
	Balloons bool
	Balloon  BalloonConfig
	// PodLog, when not empty, is a path prefix: each mode writes its pod
	// log (Config.PodLog) to PodLog.<mode>.csv.
	PodLog string
}

// DefaultOptions: load 1.5 for 4 hours of arrivals of which the first hour
// warms up, run times capped at 6 hours, 2 % of LS pods P0, 4 teams, a
// cycle every 10 s, 12 h to drain, ageing one class per 30 min.
func DefaultOptions() Options {
	return Options{
		Workload: WorkloadConfig{Load: 1.5, Horizon: 4 * time.Hour, MaxRun: 6 * time.Hour, P0Share: 0.02, Teams: 4, Seed: 42},
		Modes:    ModeNames, Tick: 10 * time.Second, Drain: 12 * time.Hour, Warmup: time.Hour, AgeStep: 30 * time.Minute, AgeCeiling: priority.P2, AgeJoin: priority.JoinAtReach, Policy: "tessera",
		Balloons: true, Balloon: DefaultBalloonConfig(),
	}
}

// Compare builds the workload once and simulates every mode on it, the
// modes in parallel (each is deterministic; results come back in mode
// order).
func Compare(nodes []partition.NodeSpec, pods []trace.Pod, o Options) ([]*Result, WorkloadInfo, error) {
	var capacity int64
	for _, n := range nodes {
		capacity += int64(n.GPUs) * partition.MilliPerGPU
	}
	jobs, info, err := BuildWorkload(pods, capacity, o.Workload)
	if err != nil {
		return nil, info, err
	}
	modes := make([]Mode, len(o.Modes))
	for i, name := range o.Modes {
		ageing := priority.Ageing{Step: o.AgeStep, Ceiling: o.AgeCeiling, Join: o.AgeJoin}
		for c := range ageing.Skip {
			ageing.Skip[c] = len(o.AgeClasses) > 0 && !slices.Contains(o.AgeClasses, priority.Class(c))
		}
		if modes[i], err = Modes(name, ageing); err != nil {
			return nil, info, err
		}
		if name == "full" {
			modes[i].Engine.ProtectAged = o.ProtectAged
		}
	}
	teams := make([]TeamQuota, o.Workload.Teams)
	for i := range teams {
		teams[i] = TeamQuota{Name: fmt.Sprintf("team-%d", i), Share: 1 / float64(len(teams))}
		if len(o.TeamShares) > 0 {
			if len(o.TeamShares) != len(teams) {
				return nil, info, fmt.Errorf("%d team shares for %d teams", len(o.TeamShares), len(teams))
			}
			teams[i].Share = o.TeamShares[i]
		}
	}
	results := make([]*Result, len(modes))
	errs := make([]error, len(modes))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i := range modes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			cfg := Config{Mode: modes[i], Tick: o.Tick, Drain: o.Drain, Warmup: o.Warmup, Teams: teams, Deadline: o.Deadline, Policy: o.Policy}
			if o.PodLog != "" {
				f, err := os.Create(o.PodLog + "." + modes[i].Name + ".csv")
				if err != nil {
					errs[i] = fmt.Errorf("pod log: %w", err)
					return
				}
				defer func() {
					if err := f.Close(); err != nil && errs[i] == nil {
						errs[i] = fmt.Errorf("pod log: %w", err)
					}
				}()
				cfg.PodLog = f
			}
			results[i], errs[i] = Simulate(nodes, jobs, o.Workload.Horizon, cfg)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, info, err
		}
	}
	return results, info, nil
}

// CompareBalloonsOn builds the workload as Compare does and runs the balloon
// comparison on it.
func CompareBalloonsOn(nodes []partition.NodeSpec, pods []trace.Pod, o Options) ([2]BalloonResult, error) {
	var capacity int64
	for _, n := range nodes {
		capacity += int64(n.GPUs) * partition.MilliPerGPU
	}
	jobs, _, err := BuildWorkload(pods, capacity, o.Workload)
	if err != nil {
		return [2]BalloonResult{}, err
	}
	return CompareBalloons(nodes, jobs, o.Warmup, o.Workload.Horizon, o.Drain, o.Balloon)
}
