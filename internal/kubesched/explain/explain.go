// Package explain words why a pod fits on no node the way kube-scheduler
// does, so operators read tessera's FailedScheduling events as they read
// kube-scheduler's: "0/20 nodes are available: 12 Insufficient
// tessera.io/gpu-mem, 8 Insufficient cpu." Each node contributes every
// reason it fails (as kube-scheduler's NodeResourcesFit lists every
// insufficient resource); reasons are counted over nodes and the
// "<count> <reason>" strings sorted, as kube-scheduler sorts them.
package explain

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
)

// Reasons a node gives.
const (
	Cordoned        = "node(s) had conflicting GPU placements (tessera places nothing there until they are consistent)"
	NoInventory     = "node(s) had an unusable tessera.io/node-gpus inventory"
	ModelMismatch   = "node(s) didn't match the pod's GPU models"
	InsufficientCPU = "Insufficient cpu"
	InsufficientMem = "Insufficient memory"
	TooFewGPUs      = "node(s) had fewer GPUs than requested"
	GPUTooSmall     = "node(s) had no GPU with as much memory as requested"
	InsufficientGPU = "Insufficient tessera.io/gpu"
	InsufficientCor = "Insufficient tessera.io/gpu-core"
	InsufficientMib = "Insufficient tessera.io/gpu-mem"
	NoIsland        = "node(s) had no NVLink island with enough free GPUs"
)

// Node is one node as the explanation sees it.
type Node struct {
	State *partition.Node
	// Unusable is set for a node whose inventory could not be read (it is
	// counted, never placed on).
	Unusable bool
	Cordoned bool
	// Refused is why the node refuses the pod apart from capacity
	// (internal/kubesched/nodefit: cordon, taints, node selector and
	// affinity), in kube-scheduler's words; "" when it does not.
	Refused string
	// VolumesRefused are why the node refuses the pod by its
	// PersistentVolumeClaims (internal/kubesched/volumes), in kube-scheduler's
	// words; kube-scheduler's VolumeBinding filter runs after the resource
	// fit and before the inter-pod filters, so they count only on a node
	// with room.
	VolumesRefused []string
	// PodsRefused is why the node refuses the pod because of the pods
	// placed around it (internal/kubesched/interpod: topology spread,
	// inter-pod affinity and anti-affinity); kube-scheduler runs those
	// filters after the resource fit, so it counts only on a node with
	// room.
	PodsRefused string
}

// Message is the FailedScheduling text for a request over nodes (plus
// extra nodes known to the API server but not to the engine).
func Message(nodes []Node, r *placement.Request) string {
	counts := map[string]int{}
	for i := range nodes {
		for _, why := range nodeReasons(&nodes[i], r) {
			counts[why]++
		}
	}
	return Format(len(nodes), counts)
}

// Format words counts of reasons over total nodes.
func Format(total int, counts map[string]int) string {
	reasons := make([]string, 0, len(counts))
	for why, n := range counts {
		reasons = append(reasons, fmt.Sprintf("%d %s", n, why))
	}
	sort.Strings(reasons) // as kube-scheduler's FitError: by the whole "<count> <reason>" text
	if len(reasons) == 0 {
		return fmt.Sprintf("0/%d nodes are available.", total)
	}
	return fmt.Sprintf("0/%d nodes are available: %s.", total, strings.Join(reasons, ", "))
}

// nodeReasons lists why r does not fit on n; empty when it fits as far
// as totals go (then placement's finer rules — islands — or the queue and
// quota decided). The pods around a node are its reason only when it has
// room, as in kube-scheduler's filter order.
func nodeReasons(n *Node, r *placement.Request) []string {
	out := capacityReasons(n, r)
	if len(out) == 0 && len(n.VolumesRefused) > 0 {
		return n.VolumesRefused
	}
	if len(out) == 0 && n.PodsRefused != "" {
		return []string{n.PodsRefused}
	}
	return out
}

func capacityReasons(n *Node, r *placement.Request) []string {
	switch {
	case n.Unusable:
		return []string{NoInventory}
	case n.Refused != "":
		return []string{n.Refused}
	case n.Cordoned:
		return []string{Cordoned}
	}
	s := n.State
	var out []string
	if len(r.Models) > 0 && !contains(r.Models, s.Model) {
		return []string{ModelMismatch}
	}
	if r.CPUMilli > s.FreeCPU {
		out = append(out, InsufficientCPU)
	}
	if r.MemMiB > s.FreeMemMiB {
		out = append(out, InsufficientMem)
	}
	if r.NumGPU == 0 {
		return out
	}
	if len(s.GPUs) < r.NumGPU {
		return append(out, TooFewGPUs)
	}
	if len(s.GPUs) > 0 && r.GPUMemMiB > s.GPUs[0].MemMiB {
		return append(out, GPUTooSmall)
	}
	fitBoth, fitCore, fitMem := 0, 0, 0
	for _, g := range s.GPUs {
		core, mem := g.FreeMilli >= r.GPUMilli && g.MIG == nil, g.FreeMemMiB >= r.GPUMemMiB && g.MIG == nil
		if core {
			fitCore++
		}
		if mem {
			fitMem++
		}
		if core && mem {
			fitBoth++
		}
	}
	if fitBoth >= r.NumGPU {
		if r.NumGPU > 1 && r.SameIsland {
			out = append(out, NoIsland)
		}
		return out
	}
	switch {
	case r.GPUMilli == partition.MilliPerGPU && r.GPUMemMiB == 0:
		out = append(out, InsufficientGPU)
	case fitCore < r.NumGPU && fitMem < r.NumGPU:
		out = append(out, InsufficientCor, InsufficientMib)
	case fitCore < r.NumGPU:
		out = append(out, InsufficientCor)
	case fitMem < r.NumGPU:
		out = append(out, InsufficientMib)
	default: // enough of each, never on the same GPUs
		out = append(out, InsufficientCor, InsufficientMib)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
