// Package preferred answers kubelet's GetPreferredAllocation.
//
// It first finds the container kubelet is admitting: the first container,
// in admission order, of a pending pod on this node that requests this
// resource in this size and holds none of it yet. If the cluster scheduler
// assigned that container GPUs (annotation tessera.io/assignment), the
// answer comes from those GPUs. Otherwise the container's other tessera
// resources pin it to their GPUs, and failing that a local policy places it
// (binpack or spread; multi-GPU `gpu` requests by go-gpuallocator's
// NVLink-aware best-effort policy). A `mig-<profile>` request is answered
// with the MIG devices the assignment's containers[].mig names (mig.go),
// else by the local policy.
package preferred

import (
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/NVIDIA/go-gpuallocator/gpuallocator"
	corev1 "k8s.io/api/core/v1"

	annotations "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/ledger"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/pods"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
)

// Warner reports a problem with a pod to its owner (a Kubernetes event).
type Warner func(pod *corev1.Pod, reason, message string)

// Chooser picks preferred device IDs.
type Chooser struct {
	Manager *resource.Manager
	Pods    pods.Source
	Ledger  *ledger.Ledger
	Policy  string
	// Topology is go-gpuallocator's view of the GPUs; nil disables
	// NVLink-aware multi-GPU choice.
	Topology gpuallocator.DeviceList
	Log      *slog.Logger
	Warn     Warner
	// AllowGPUSpill lets gpu-mem and gpu-core answers lie on more GPUs
	// than the container requested (config allowGPUSpill).
	AllowGPUSpill bool
	// AwaitPod is how long to wait for the informer to deliver the pod
	// kubelet is admitting when no pending container matches a request.
	AwaitPod time.Duration
}

// Candidate is the container a request is believed to serve.
type Candidate struct {
	Pod       *corev1.Pod
	Ref       ledger.ContainerRef
	Container *corev1.Container
}

// Preferred returns size IDs out of available, including mustInclude.
func (c *Chooser) Preferred(res string, available, mustInclude []string, size int) []string {
	kind, ok := resource.KindOf(res)
	if !ok || size <= 0 {
		return nil
	}
	pool := c.pool(res, available)
	must := c.Manager.Known(res, mustInclude)
	cand := c.Candidate(res, size)
	ids := c.choose(res, kind, cand, pool, must, size)
	if limit := c.spanLimit(kind, cand); limit > 0 && len(resource.GPUsOf(ids)) > limit {
		// Kubelet fills a short answer with any free IDs, and Allocate
		// refuses them with the reason; proposing the spread would hide it.
		c.Log.Info("request fits on no GPU the container may use; proposing nothing", "resource", res, "size", size, "gpus", limit)
		ids = nil
	}
	ids = keepMust(ids, must, size)
	if cand != nil && len(ids) > 0 {
		c.Ledger.Propose(res, cand.Ref, len(ids))
	}
	return ids
}

// keepMust puts every mustInclude ID first in the answer and fills it up
// with the chosen ones: the API requires them (kubelet allocates them in
// any case; they are devices it hands on from an init container), even
// where the container's assignment names other GPUs.
func keepMust(ids []string, must []resource.ID, size int) []string {
	if len(must) == 0 {
		return ids
	}
	out := make([]string, 0, size)
	in := map[string]bool{}
	for _, m := range must {
		if k := m.String(); !in[k] {
			in[k] = true
			out = append(out, k)
		}
	}
	for _, id := range ids {
		if len(out) >= size {
			break
		}
		if !in[id] {
			in[id] = true
			out = append(out, id)
		}
	}
	return out
}

func (c *Chooser) choose(res string, kind resource.Kind, cand *Candidate, pool *pool, must []resource.ID, size int) []string {
	if cand != nil && kind == resource.KindMIG {
		return c.chooseMIG(res, cand, pool, must, size)
	}
	if cand != nil {
		log := c.Log.With("pod", cand.Ref.Namespace+"/"+cand.Ref.Pod, "container", cand.Ref.Container, "resource", res, "size", size)
		if ids, used, err := c.fromAssignment(cand, kind, pool.clone(), must, size); used {
			if err == nil {
				log.Debug("preferred allocation from assignment", "ids", len(ids))
				return ids
			}
			log.Warn("assignment unusable, placing locally", "err", err)
			c.warn(cand.Pod, "TesseraAssignmentUnusable", fmt.Sprintf("container %s, %s: %v; placed by the node's local policy", cand.Ref.Container, res, err))
		}
		if ids := c.withContainer(cand, res, kind, pool, must, size); len(ids) == size {
			log.Debug("preferred allocation follows the container's GPUs", "gpus", resource.GPUsOf(ids))
			return ids
		}
		log.Debug("preferred allocation by local policy", "held", c.siblingGPUs(cand.Ref, res), "available", len(pool.order))
	}
	return pickLocal(kind, pool, must, size, c.Policy, c.Topology)
}

// spanLimit is how many GPUs a gpu-mem or gpu-core answer may lie on: the
// container's tessera.io/gpu request, or one GPU without it or when the
// container is not known. 0 means any number.
func (c *Chooser) spanLimit(kind resource.Kind, cand *Candidate) int {
	if c.AllowGPUSpill || (kind != resource.KindMem && kind != resource.KindCore) {
		return 0
	}
	if cand == nil {
		return 1
	}
	return max(1, int(pods.Request(cand.Container, resource.GPU)))
}

func (c *Chooser) warn(p *corev1.Pod, reason, msg string) {
	if c.Warn != nil {
		c.Warn(p, reason, msg)
	}
}

// withContainer places a request without assignment so that all tessera
// resources of one container land on the same GPUs: on the GPUs it already
// holds, or, for its first resource, on GPUs where its other resources fit
// too (N GPUs with the amounts split evenly for `gpu: N`). nil when that is
// impossible.
func (c *Chooser) withContainer(cand *Candidate, res string, kind resource.Kind, pool *pool, must []resource.ID, size int) []string {
	span := max(1, int(pods.Request(cand.Container, resource.GPU)))
	held := c.siblingGPUs(cand.Ref, res)
	switch {
	case kind == resource.KindSlot && len(held) > 0:
		gpus := chooseGPUs(pool, held, size, c.Policy, c.Topology)
		return takeEven(pool.only(gpus), gpus, size, must)
	case len(held) > 0:
		return takeEven(pool.only(held), held, size, must)
	}
	room := c.roomFor(cand, res, pool, span)
	if kind == resource.KindSlot || span == 1 {
		if reuse := reusedUpTo(cand, res, size); kind != resource.KindSlot && reuse > size {
			if wide := room.atLeast(reuse); len(wide.order) > 0 {
				room = wide
			}
		}
		return pickLocal(kind, room, must, size, c.Policy, c.Topology)
	}
	gpus := chooseGPUs(room.atLeast((size+span-1)/span), gpuSet(must), span, c.Policy, c.Topology)
	return takeEven(pool.only(gpus), gpus, size, must)
}

// reusedUpTo is how many IDs of res the GPU of an init container's IDs
// should have free: kubelet hands a regular init container's IDs on to the
// pod's later containers (as mustInclude), so the largest later request of
// res must fit beside them, or a single-GPU container would be spread over
// two GPUs and refused. size for any other container, sidecars included.
func reusedUpTo(cand *Candidate, res string, size int) int {
	for i, ic := range cand.Pod.Spec.InitContainers {
		if ic.Name != cand.Ref.Container {
			continue
		}
		if ic.RestartPolicy != nil && *ic.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			return size // a sidecar keeps its IDs for itself
		}
		need := size
		for _, later := range pods.Containers(cand.Pod)[i+1:] {
			need = max(need, int(pods.Request(&later, res)))
		}
		return need
	}
	return size
}

// roomFor restricts the pool to GPUs where the container's other tessera
// resources would still fit (for an init container, as much as the later
// containers it hands them on to need: reusedUpTo), judged by what the
// ledger knows is allocated.
func (c *Chooser) roomFor(cand *Candidate, res string, p *pool, span int) *pool {
	need := map[string]int{} // other resource → IDs needed per GPU
	for _, r := range []string{resource.GPU, resource.Memory, resource.Core} {
		if q := int(pods.Request(cand.Container, r)); r != res && q > 0 {
			need[r] = (reusedUpTo(cand, r, q) + span - 1) / span
			if r == resource.GPU {
				need[r] = 1
			}
		}
	}
	if len(need) == 0 {
		return p
	}
	used := map[string]map[string]int{} // resource → GPU → IDs held
	// Count each ID once: kubelet hands a regular init container's IDs on
	// to an app container, and the ledger keeps both.
	seen := map[string]bool{}
	for _, byRes := range c.Ledger.Snapshot() {
		for r, keys := range byRes {
			if need[r] == 0 {
				continue
			}
			if used[r] == nil {
				used[r] = map[string]int{}
			}
			for _, id := range c.Manager.Known(r, keys) {
				if k := id.String(); !seen[k] {
					seen[k] = true
					used[r][id.GPU]++
				}
			}
		}
	}
	var keep []string
	for _, g := range p.order {
		fits := true
		for r, n := range need {
			fits = fits && c.Manager.Capacity(r, g)-used[r][g] >= n
		}
		if fits {
			keep = append(keep, g)
		}
	}
	return p.only(keep)
}

// Candidate finds the container kubelet is most likely allocating.
// Kubelet and the plugin's informer watch the API server separately, so
// kubelet may ask before the informer has delivered the pod: without a
// match, the informer is polled for up to AwaitPod.
func (c *Chooser) Candidate(res string, size int) *Candidate {
	if c.Pods == nil {
		return nil
	}
	deadline := time.Now().Add(c.AwaitPod)
	for {
		if cand := c.candidate(res, size); cand != nil || !time.Now().Before(deadline) {
			return cand
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *Chooser) candidate(res string, size int) *Candidate {
	for _, p := range c.Pods.Pending() {
		cs := pods.Containers(p)
		for _, ctr := range cs[c.allocatedUpTo(p, cs):] {
			if pods.Request(&ctr, res) != int64(size) {
				continue
			}
			ref := containerRef(p, ctr.Name)
			if c.Ledger.Has(ref, res) {
				continue
			}
			return &Candidate{Pod: p, Ref: ref, Container: &ctr}
		}
	}
	return nil
}

// allocatedUpTo returns how many of the pod's containers (in allocation
// order) kubelet has certainly allocated: all before the last one the
// ledger knows holds devices, because kubelet allocates a pod's
// containers one after the other. This covers regular init containers,
// which kubelet's PodResources never lists, so a read-back drops them
// from the ledger while the pod is still Pending.
func (c *Chooser) allocatedUpTo(p *corev1.Pod, cs []corev1.Container) int {
	for i := len(cs) - 1; i >= 0; i-- {
		if len(c.Ledger.Get(containerRef(p, cs[i].Name))) > 0 {
			return i
		}
	}
	return 0
}

func containerRef(p *corev1.Pod, container string) ledger.ContainerRef {
	return ledger.ContainerRef{PodUID: string(p.UID), Namespace: p.Namespace, Pod: p.Name, Container: container}
}

// assignedContainer is cand's entry in its pod's tessera.io/assignment;
// found=false when the pod has no assignment, and an error when the
// assignment is unreadable or has no entry for the container.
func assignedContainer(cand *Candidate) (ca *annotations.ContainerAssignment, found bool, err error) {
	raw, ok := cand.Pod.Annotations[annotations.AssignmentKey]
	if !ok {
		return nil, false, nil
	}
	a, err := annotations.ParseAssignment(raw)
	if err != nil {
		return nil, true, err
	}
	if ca = a.Container(cand.Ref.Container); ca == nil {
		return nil, true, fmt.Errorf("%s has no entry for container %q", annotations.AssignmentKey, cand.Ref.Container)
	}
	return ca, true, nil
}

// fromAssignment returns used=false when the pod has no assignment for the
// container, and an error when it has one that cannot be honoured.
func (c *Chooser) fromAssignment(cand *Candidate, kind resource.Kind, pool *pool, must []resource.ID, size int) ([]string, bool, error) {
	ca, ok, err := assignedContainer(cand)
	if !ok || err != nil {
		return nil, ok, err
	}
	want, err := c.wantedUnits(kind, ca)
	if err != nil {
		return nil, true, err
	}
	total := 0
	for _, n := range want {
		total += n
	}
	if total != size {
		return nil, true, fmt.Errorf("assignment gives %d units but the container requests %d", total, size)
	}
	var ids []string
	for _, g := range ca.GPUs {
		n := want[g.UUID]
		if n == 0 {
			continue
		}
		got := pool.take(g.UUID, n, must)
		if len(got) < n {
			return nil, true, fmt.Errorf("assigned GPU %s has %d free units, %d needed", g.UUID, len(got), n)
		}
		ids = append(ids, got...)
	}
	return ids, true, nil
}

// wantedUnits converts an assignment into units of kind per GPU.
func (c *Chooser) wantedUnits(kind resource.Kind, ca *annotations.ContainerAssignment) (map[string]int, error) {
	want := map[string]int{}
	unitMiB := c.Manager.Options().MemoryUnit >> 20
	for _, g := range ca.GPUs {
		if c.Manager.GPU(g.UUID) == nil {
			return nil, fmt.Errorf("assignment names GPU %s, which this node does not have", g.UUID)
		}
		switch kind {
		case resource.KindSlot:
			want[g.UUID] = 1
		case resource.KindMem:
			want[g.UUID] = int((g.MemoryMiB + unitMiB - 1) / unitMiB)
		case resource.KindCore:
			want[g.UUID] = int(g.CorePercent)
		}
	}
	return want, nil
}

// siblingGPUs are the GPUs ref already holds through its other tessera resources.
func (c *Chooser) siblingGPUs(ref ledger.ContainerRef, res string) []string {
	var keys []string
	for r, ids := range c.Ledger.Get(ref) {
		if r != res && !strings.HasPrefix(r, resource.MIGPrefix) {
			keys = append(keys, ids...)
		}
	}
	return resource.GPUsOf(keys)
}

// pool builds the free IDs per GPU from kubelet's available list.
func (c *Chooser) pool(res string, available []string) *pool {
	p := &pool{free: map[string][]resource.ID{}}
	seen := map[resource.ID]bool{} // a repeated ID is offered once
	for _, id := range c.Manager.Known(res, available) {
		if seen[id] {
			continue
		}
		seen[id] = true
		if _, ok := p.free[id.GPU]; !ok {
			p.order = append(p.order, id.GPU)
		}
		p.free[id.GPU] = append(p.free[id.GPU], id)
	}
	idx := func(u string) int { return c.Manager.GPU(u).Index }
	sort.Slice(p.order, func(a, b int) bool { return idx(p.order[a]) < idx(p.order[b]) })
	for _, ids := range p.free {
		sort.Slice(ids, func(a, b int) bool { return ids[a].N < ids[b].N || ids[a].N == ids[b].N && ids[a].MIG < ids[b].MIG })
	}
	return p
}
