// Package dynsim replays an openb pod trace in simulated time through the
// scheduling engine: pods arrive, wait in the priority queue, run for their
// recorded duration and leave; the cluster is contended by compressing the
// arrivals. It compares scheduling modes (fifo, priority without ageing,
// the full engine) by per-class queue wait, preemptions, drops and GPU
// allocation. See docs/scheduler.md, "Dynamic simulation".
package dynsim

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/placement/trace"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// Job is one pod of the replayed workload.
type Job struct {
	Name    string
	Request placement.Request
	Class   priority.Class
	Team    string
	Arrive  time.Duration // since the start of the simulation
	Run     time.Duration // how long it runs once placed
}

// GPUs is the job's GPU compute in GPUs (a 500-milli share is 0.5).
func (j *Job) GPUs() float64 { return float64(j.Request.NumGPU) * float64(j.Request.GPUMilli) / 1000 }

// WorkloadConfig turns a trace into jobs.
type WorkloadConfig struct {
	// Load is the offered GPU load as a multiple of the cluster's GPU
	// capacity: Σ GPUs × run time of the arrivals per unit of time, over
	// capacity. 1.5 asks for half again what the cluster has.
	Load float64
	// Horizon is how long pods arrive; the trace is replayed again and
	// again (compressed to the load) until then.
	Horizon time.Duration
	// MaxRun caps a pod's run time (a platform's maximum run time).
	MaxRun time.Duration
	// P0Share of the LS pods become P0 (realtime inference).
	P0Share float64
	// Teams is how many teams pods are spread over (by hash).
	Teams int
	Seed  uint64
}

// ClassOfQoS maps openb's qos column: LS (latency-sensitive) is online
// inference P1 (a seeded P0Share of it realtime P0), Burstable and
// Guaranteed are training P2, BE (best effort) is P3.
func ClassOfQoS(qos string, p0 bool) (priority.Class, error) {
	switch qos {
	case "LS":
		if p0 {
			return priority.P0, nil
		}
		return priority.P1, nil
	case "Burstable", "Guaranteed":
		return priority.P2, nil
	case "BE":
		return priority.P3, nil
	}
	return 0, fmt.Errorf("qos %q: want LS, Burstable, Guaranteed or BE", qos)
}

// RunTime is how long a trace pod runs: deletion − scheduled when it was
// scheduled; a pod that never ran in the trace (no scheduled_time) is given
// deletion − creation, the time its owner wanted it, since nothing better is
// known. At least one second, at most maxRun.
func RunTime(p *trace.Pod, maxRun time.Duration) (time.Duration, error) {
	var d int64
	switch {
	case p.Scheduled >= 0 && p.Deletion >= p.Scheduled:
		d = p.Deletion - p.Scheduled
	case p.Creation >= 0 && p.Deletion >= p.Creation:
		d = p.Deletion - p.Creation
	default:
		return 0, fmt.Errorf("pod %s: no run time: creation %d, scheduled %d, deletion %d", p.Name, p.Creation, p.Scheduled, p.Deletion)
	}
	return min(max(time.Duration(d)*time.Second, time.Second), maxRun), nil
}

// hash01 is a seeded hash of a name in [0, 1).
func hash01(seed uint64, salt, name string) float64 {
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(seed >> (8 * i))
	}
	h.Write(b[:])
	h.Write([]byte(salt))
	h.Write([]byte(name))
	return float64(h.Sum64()>>11) / (1 << 53)
}

// WorkloadInfo says how the trace was turned into jobs.
type WorkloadInfo struct {
	Compression  float64       // trace seconds per simulated second
	Period       time.Duration // one replay of the trace, compressed
	Replays      int
	WindowStart  int64 // trace time the replay starts from
	GPUSecondsPP float64
}

// BuildWorkload turns trace pods into jobs. Arrival: creation_time, shifted
// so the replay starts at the trace's 1st-percentile creation time (openb
// has a few pods spread over 110 days before the busy 35; they arrive at the
// start), then divided by the compression that makes the offered load
// Load × capacity; replays follow one another until Horizon.
func BuildWorkload(pods []trace.Pod, capacityMilli int64, cfg WorkloadConfig) ([]Job, WorkloadInfo, error) {
	switch {
	case len(pods) == 0:
		return nil, WorkloadInfo{}, errors.New("no pods")
	case cfg.Load <= 0 || cfg.Load > 100:
		return nil, WorkloadInfo{}, fmt.Errorf("load %g: want (0, 100]", cfg.Load)
	case cfg.Horizon <= 0 || cfg.MaxRun <= 0:
		return nil, WorkloadInfo{}, fmt.Errorf("horizon %v and max run %v must be positive", cfg.Horizon, cfg.MaxRun)
	case cfg.P0Share < 0 || cfg.P0Share > 1 || cfg.Teams < 1:
		return nil, WorkloadInfo{}, fmt.Errorf("p0 share %g must be in [0, 1], teams %d at least 1", cfg.P0Share, cfg.Teams)
	}
	type base struct {
		p     *trace.Pod
		class priority.Class
		run   time.Duration
	}
	var bases []base
	var work float64 // GPU-seconds per replay
	creations := make([]int64, 0, len(pods))
	for i := range pods {
		p := &pods[i]
		if p.Creation < 0 {
			return nil, WorkloadInfo{}, fmt.Errorf("pod %s: no creation_time", p.Name)
		}
		class, err := ClassOfQoS(p.QoS, hash01(cfg.Seed, "p0", p.Name) < cfg.P0Share)
		if err != nil {
			return nil, WorkloadInfo{}, fmt.Errorf("pod %s: %w", p.Name, err)
		}
		run, err := RunTime(p, cfg.MaxRun)
		if err != nil {
			return nil, WorkloadInfo{}, err
		}
		bases = append(bases, base{p, class, run})
		work += float64(p.NumGPU) * float64(p.GPUMilli) / 1000 * run.Seconds()
		creations = append(creations, p.Creation)
	}
	if work == 0 {
		return nil, WorkloadInfo{}, errors.New("the pods ask for no GPU work: load is undefined")
	}
	slices.Sort(creations)
	start, end := creations[len(creations)/100], creations[len(creations)-1]
	window := float64(max(end-start, 1))
	capacity := float64(capacityMilli) / 1000
	// Offered load = work / (window / k) / capacity  =>  k = load·capacity·window / work.
	k := cfg.Load * capacity * window / work
	info := WorkloadInfo{Compression: k, Period: time.Duration(window / k * float64(time.Second)), WindowStart: start, GPUSecondsPP: work}
	if info.Period < time.Second {
		return nil, info, fmt.Errorf("load %g compresses the trace to %v per replay: too short", cfg.Load, info.Period)
	}
	var jobs []Job
	for rep := 0; time.Duration(rep)*info.Period < cfg.Horizon; rep++ {
		for _, b := range bases {
			off := time.Duration(float64(max(b.p.Creation-start, 0)) / k * float64(time.Second))
			at := time.Duration(rep)*info.Period + off
			if at >= cfg.Horizon {
				continue
			}
			name := fmt.Sprintf("%s~%d", b.p.Name, rep)
			class := b.class
			if b.p.QoS == "LS" { // P0 is drawn per replayed pod, not per trace row
				class, _ = ClassOfQoS("LS", hash01(cfg.Seed, "p0", name) < cfg.P0Share)
			}
			jobs = append(jobs, Job{
				Name: name, Class: class, Arrive: at, Run: b.run,
				Team:    fmt.Sprintf("team-%d", int(hash01(cfg.Seed, "team", name)*float64(cfg.Teams))),
				Request: placement.Request{Name: name, CPUMilli: b.p.CPUMilli, MemMiB: b.p.MemMiB, NumGPU: b.p.NumGPU, GPUMilli: int32(b.p.GPUMilli), Models: b.p.GPUSpec},
			})
		}
		info.Replays = rep + 1
	}
	slices.SortStableFunc(jobs, func(a, b Job) int { return cmp.Compare(a.Arrive, b.Arrive) })
	return jobs, info, nil
}
