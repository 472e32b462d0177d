package gpunode

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText writes the report as a readable account: the node, the
// release, each container and what it saw, the checks, the metrics table
// and the timings.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Node %s (%s): %d simulated GPUs through CDI (%s)\n", r.Node.Name, r.Node.IP, len(r.Node.GPUs), r.Node.CDISpec)
	fmt.Fprintf(&b, "  allocatable: %v\n", r.Node.Allocatable)
	fmt.Fprintf(&b, "Helm release %s in %s (%s), images %s\n", r.Install.Release, r.Install.Namespace, r.Install.Chart, strings.Join(r.Install.Images, ", "))
	for _, p := range r.Install.Pods {
		fmt.Fprintf(&b, "  pod %s on %s: %s %v\n", p.Name, p.Node, p.Phase, p.Containers)
	}
	fmt.Fprintf(&b, "  scheduler leader: %s\n", r.Install.Leader)
	for _, wl := range r.Workloads {
		fmt.Fprintf(&b, "Pod %s/%s container %s (requests %v, scheduler %s) on %s, Running after %v\n",
			wl.Namespace, wl.Pod, wl.Container, wl.Requests, wl.SchedulerName, wl.Node, wl.Started.Round(time.Millisecond))
		fmt.Fprintf(&b, "  saw %d GPU(s), %s with %d MiB; held at most %d MiB; refused past the cap with %s; keeps %d MiB\n",
			wl.Devices, wl.GPU, wl.TotalMiB, wl.AllocatedMiB, wl.RefusedWith, wl.HoldingMiB)
	}
	b.WriteString("Checks:\n")
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "  %s %s: %s\n", mark, c.What, c.Detail)
	}
	b.WriteString("vgpu-monitor /metrics (per container):\n")
	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAMESPACE\tPOD\tCONTAINER\tGPU\tUSED MiB\tCAP MiB\tCOMPUTE")
	for _, m := range r.Metrics {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%.0f\t%.0f\t%.0f%%\n", m.Namespace, m.Pod, m.Container, m.GPU, m.UsedMiB, m.CapMiB, 100*m.ComputeRatio)
	}
	tw.Flush()
	b.WriteString("Timings:\n")
	for _, t := range r.Timings {
		fmt.Fprintf(&b, "  %-45s %v\n", t.Step, t.Took.Round(time.Millisecond))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
