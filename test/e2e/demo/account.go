// Package demo is `make demo`: the end-to-end scenario of a GPU node shared
// by two pods, told as a readable account. As root it runs on a real node
// (kubelet, containerd, the Helm-installed DaemonSet) through the RealNode
// interface; otherwise it runs the reduced form (Reduced): the real device
// plugin, hook, simulated GPU, node monitor and placement engine as
// processes and goroutines of one machine, with the demo playing kubelet.
// Either way the account ends with the scheduler simulator's openb result
// against the published FGD number.
package demo

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Account is what a run of the scenario showed. Every field is filled from
// what the components did, never from what the demo expected.
type Account struct {
	// Form is "real node" or "reduced"; Why says why the reduced form ran.
	Form, Why string
	Node      Node
	Pods      []*Pod
	// Enforced lists what tessera refused or reclaimed, one line each.
	Enforced []string
	Compute  []ComputeShare
	// Latency is the P0 pod's burst latency alone and beside a saturating
	// P3 pod on its GPU (nil when they got different GPUs).
	Latency *Latency
	Metrics []MetricRow
	// Deleted is what happened when a pod was deleted.
	Deleted []string
	OpenB   *OpenB
	// Timings are measured steps of the real node, one line each.
	Timings []string
}

// Node is the GPU node the pods ran on.
type Node struct {
	Name string
	GPUs []GPU
	// Where says what ran where: the components and their processes.
	Where []string
}

// GPU is one (simulated) GPU of the node.
type GPU struct {
	Index  int
	UUID   string
	Model  string
	Memory uint64 // bytes
}

// Pod is one user pod: what it asked for, where it went, what its
// container got and saw.
type Pod struct {
	Namespace, Name, Container string
	// Requests are its tessera resources, as in its spec ("gpu-mem: 8").
	Requests []string
	// GPU is the index and UUID of the GPU the scheduler assigned.
	GPUIndex int
	GPUUUID  string
	// Assignment is the tessera.io/assignment annotation the scheduler wrote.
	Assignment string
	// Devices counts the device IDs kubelet allocated per resource.
	Devices map[string]int
	// Env is the TESSERA_* environment the device plugin's Allocate gave
	// the container; Mounts the container paths of its mounts.
	Env, Mounts []string
	// Saw is what the program in the container saw (cuMemGetInfo), and
	// what its allocations returned, one line each.
	Saw []string
}

// ComputeShare is one container's part of a shared GPU's busy time,
// measured by the (simulated) device, against its gpu-core share.
type ComputeShare struct {
	Pod      string
	SharePct float64
	GotPct   float64
}

// Latency is a P0 pod's burst latency (median, 2 ms of kernels launched
// and synchronised) alone on its GPU and beside a saturating P3 pod.
type Latency struct {
	P0, P3            string
	AloneMs, BesideMs float64
	Bursts            int
}

// MetricRow is one container's series on one GPU, as scraped from the
// node monitor's /metrics.
type MetricRow struct {
	Namespace, Pod, Container, GPU string
	Used, Limit, Peak              uint64 // bytes
	Refused                        float64
	ComputeRatio                   float64 // gpu-core share, 0-1
}

// OpenB is the placement simulator's result on Alibaba's openb trace.
type OpenB struct {
	Trace   string
	Seeds   int
	Arrival float64 // percent of GPU capacity
	// Medians of unallocated GPU percent.
	FGD, Tessera float64
	// Published is the FGD paper's median; PublishedFrom names its file.
	Published     float64
	PublishedFrom string
	Took          string
}

const gib = 1 << 30

// GiB formats bytes in GiB.
func GiB(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/gib) }

// Print writes the account.
func (a *Account) Print(w io.Writer) {
	fmt.Fprintf(w, "\n== tessera demo (%s) ==\n", a.Form)
	if a.Why != "" {
		fmt.Fprintf(w, "%s\n", a.Why)
	}
	section(w, "The node")
	fmt.Fprintf(w, "  %s: %d simulated GPUs\n", a.Node.Name, len(a.Node.GPUs))
	for _, g := range a.Node.GPUs {
		if g.Memory > 0 {
			fmt.Fprintf(w, "    GPU %d  %s  %s  %s\n", g.Index, g.Model, GiB(g.Memory), g.UUID)
		} else {
			fmt.Fprintf(w, "    GPU %d  %s  %s\n", g.Index, g.Model, g.UUID)
		}
	}
	for _, l := range a.Node.Where {
		fmt.Fprintf(w, "  %s\n", l)
	}
	section(w, "What ran where")
	for _, p := range a.Pods {
		fmt.Fprintf(w, "  %s/%s (%s) -> %s GPU %d\n", p.Namespace, p.Name, strings.Join(p.Requests, ", "), a.Node.Name, p.GPUIndex)
		fmt.Fprintf(w, "    tessera.io/assignment: %s\n", p.Assignment)
		if len(p.Devices) > 0 {
			fmt.Fprintf(w, "    kubelet allocated %s\n", devices(p.Devices))
		}
		if len(p.Env) > 0 {
			fmt.Fprintf(w, "    Allocate: env %s\n", strings.Join(p.Env, " "))
			fmt.Fprintf(w, "              mounts %s\n", strings.Join(p.Mounts, " "))
		}
	}
	section(w, "What each container saw")
	for _, p := range a.Pods {
		for _, l := range p.Saw {
			fmt.Fprintf(w, "  %-8s %s\n", p.Name, l)
		}
	}
	section(w, "What was enforced")
	for _, l := range a.Enforced {
		fmt.Fprintf(w, "  %s\n", l)
	}
	if len(a.Compute) > 0 {
		fmt.Fprintf(w, "  compute on the shared GPU (device busy time, both saturating it):\n")
		for _, c := range a.Compute {
			fmt.Fprintf(w, "    %-8s share %3.0f %%  got %5.1f %%\n", c.Pod, c.SharePct, c.GotPct)
		}
	}
	if l := a.Latency; l != nil {
		fmt.Fprintf(w, "  priority: %s's bursts (2 ms of kernels, launch to sync, median of %d): alone %.1f ms, beside saturating %s %.1f ms\n",
			l.P0, l.Bursts, l.AloneMs, l.P3, l.BesideMs)
	}
	section(w, "Metrics (vgpu-monitor /metrics)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  namespace/pod/container\tGPU\tused\tcap\tpeak\trefused\tcompute")
	for _, m := range a.Metrics {
		fmt.Fprintf(tw, "  %s/%s/%s\t%s\t%s\t%s\t%s\t%.0f\t%.0f %%\n", m.Namespace, m.Pod, m.Container, shortUUID(m.GPU),
			GiB(m.Used), GiB(m.Limit), GiB(m.Peak), m.Refused, 100*m.ComputeRatio)
	}
	tw.Flush()
	if len(a.Deleted) > 0 {
		section(w, "A pod deleted")
		for _, l := range a.Deleted {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	if len(a.Timings) > 0 {
		section(w, "How long it took")
		for _, l := range a.Timings {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	if o := a.OpenB; o != nil {
		section(w, "Scheduler simulator on the openb trace")
		fmt.Fprintf(w, "  %s, %d seeds, pods arriving up to %.0f %% of GPU capacity (%s):\n", o.Trace, o.Seeds, o.Arrival, o.Took)
		fmt.Fprintf(w, "    unallocated GPU, median   fgd (ours) %.2f %%   tessera %.2f %%   published FGD %.2f %%\n",
			o.FGD, o.Tessera, o.Published)
		fmt.Fprintf(w, "    %s (%s)\n", o.comparison(), o.PublishedFrom)
	}
	fmt.Fprintln(w)
}

// comparison says how tessera's median stands against the published FGD's.
func (o *OpenB) comparison() string {
	switch d := o.Published - o.Tessera; {
	case d > 0:
		return fmt.Sprintf("tessera leaves %.2f pp less GPU unallocated than the published FGD", d)
	case d < 0:
		return fmt.Sprintf("tessera leaves %.2f pp MORE GPU unallocated than the published FGD", -d)
	}
	return "tessera leaves as much GPU unallocated as the published FGD"
}

func section(w io.Writer, title string) { fmt.Fprintf(w, "\n-- %s\n", title) }

func devices(d map[string]int) string {
	var parts []string
	for _, res := range []string{"tessera.io/gpu", "tessera.io/gpu-mem", "tessera.io/gpu-core"} {
		if n, ok := d[res]; ok {
			parts = append(parts, fmt.Sprintf("%d %s IDs", n, strings.TrimPrefix(res, "tessera.io/")))
		}
	}
	return strings.Join(parts, " + ")
}

// shortUUID keeps a UUID's first group: enough to tell a node's GPUs apart.
func shortUUID(u string) string {
	if i := strings.IndexByte(u, '-'); i >= 0 {
		if j := strings.IndexByte(u[i+1:], '-'); j >= 0 {
			return u[:i+1+j]
		}
	}
	return u
}
