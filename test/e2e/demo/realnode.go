package demo

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/tessera-gpu/tessera/test/e2e/gpunode"
)

// GPUNode is the real-node scenario of package gpunode (kubelet,
// containerd, the chart installed with Helm, a simulated 4-GPU H200 driver
// through CDI) as a RealNode. The program must have called gpunode.Main.
type GPUNode struct {
	Options gpunode.Options
}

// Unavailable says why the real node cannot start here ("" when it can).
func (GPUNode) Unavailable() string { return gpunode.Unavailable() }

// Run runs the scenario, narrating each step to progress. On a failure
// the account of what ran so far comes back with the error.
func (g GPUNode) Run(ctx context.Context, progress io.Writer) (*Account, error) {
	opts := g.Options
	opts.Logf = func(format string, args ...any) {
		fmt.Fprintf(progress, "demo: %s\n", strings.TrimRight(fmt.Sprintf(format, args...), "\n"))
	}
	rep, err := gpunode.Run(ctx, opts)
	if rep == nil {
		return nil, err
	}
	return FromReport(rep), err
}

// FromReport tells a real-node report as an account.
func FromReport(r *gpunode.Report) *Account {
	a := &Account{Form: "real node", Node: Node{Name: r.Node.Name}}
	for i, u := range r.Node.GPUs {
		a.Node.GPUs = append(a.Node.GPUs, GPU{Index: i, UUID: u, Model: "simulated H200 (CDI)"})
	}
	a.Node.Where = append(a.Node.Where,
		fmt.Sprintf("node %s (%s): kubelet and containerd with runc in a network namespace of their own; the simulated driver through the CDI spec %s",
			r.Node.Name, r.Node.IP, r.Node.CDISpec),
		fmt.Sprintf("allocatable: %s", resourceList(r.Node.Allocatable)),
		fmt.Sprintf("Helm release %s of %s in namespace %s; images %s", r.Install.Release, r.Install.Chart, r.Install.Namespace,
			strings.Join(r.Install.Images, ", ")))
	for _, p := range r.Install.Pods {
		a.Node.Where = append(a.Node.Where, fmt.Sprintf("  pod %s on %s: %s (%s)", p.Name, p.Node, p.Phase, strings.Join(p.Containers, ", ")))
	}
	if r.Install.Leader != "" {
		a.Node.Where = append(a.Node.Where, "tessera-scheduler leader: "+r.Install.Leader)
	}
	for _, w := range r.Workloads {
		p := &Pod{Namespace: w.Namespace, Name: w.Pod, Container: w.Container, GPUUUID: w.GPU, GPUIndex: -1,
			Assignment: fmt.Sprintf("(bound by %s to %s; Running after %s)", w.SchedulerName, w.Node, w.Started.Round(time.Millisecond))}
		for i, u := range r.Node.GPUs {
			if u == w.GPU {
				p.GPUIndex = i
			}
		}
		var keys []string
		for k := range w.Requests {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p.Requests = append(p.Requests, strings.TrimPrefix(k, "tessera.io/")+": "+w.Requests[k])
		}
		p.Saw = append(p.Saw, fmt.Sprintf("%d GPU(s): %s with %d MiB; held at most %d MiB; past the cap: %s", w.Devices, w.GPU,
			w.TotalMiB, w.AllocatedMiB, w.RefusedWith))
		p.Saw = append(p.Saw, w.Output...)
		a.Pods = append(a.Pods, p)
	}
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		a.Enforced = append(a.Enforced, fmt.Sprintf("%s %s: %s", mark, c.What, c.Detail))
	}
	for _, m := range r.Metrics {
		a.Metrics = append(a.Metrics, MetricRow{Namespace: m.Namespace, Pod: m.Pod, Container: m.Container, GPU: m.GPU,
			Used: uint64(m.UsedMiB) << 20, Limit: uint64(m.CapMiB) << 20, Peak: uint64(m.PeakMiB) << 20, Refused: float64(m.Refused),
			ComputeRatio: m.ComputeRatio})
	}
	for _, t := range r.Timings {
		a.Timings = append(a.Timings, fmt.Sprintf("%-45s %s", t.Step, t.Took.Round(time.Millisecond)))
	}
	return a
}

func resourceList(m map[string]string) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
