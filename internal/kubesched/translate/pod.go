package translate

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/engine"
	"github.com/tessera-gpu/tessera/internal/gang"
	"github.com/tessera-gpu/tessera/internal/kubesched/nodefit"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// Extended resources of the device plugin (internal/deviceplugin/resource).
const (
	ResourceGPU    corev1.ResourceName = "tessera.io/gpu"
	ResourceMemory corev1.ResourceName = "tessera.io/gpu-mem"
	ResourceCore   corev1.ResourceName = "tessera.io/gpu-core"
	// ResourceMIGPrefix + profile is a fixed MIG device of that profile
	// (tessera.io/mig-3g.20gb).
	ResourceMIGPrefix = "tessera.io/mig-"
)

// Pod annotations the scheduler reads besides the engine's own
// (tessera.io/priority, tessera.io/pod-group, tessera.io/min-member).
const (
	// QueueAnnotation names the quota queue (team) a pod is charged to;
	// without it the configuration's defaultQueue.
	QueueAnnotation = "tessera.io/queue"
	// ModelsAnnotation restricts a pod to GPU models, comma separated.
	ModelsAnnotation = "tessera.io/gpu-models"
)

// Key is how the scheduler names a pod: namespace/name.
func Key(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// Shape is what the device plugin hands one pod: per container that
// requests tessera resources, a count of GPUs with a compute share and a
// memory cap on each (or MIG devices). The engine's request follows from
// it, and so does the assignment.
type Shape struct {
	// Containers request tessera resources, in the kubelet's order (init
	// containers, then app containers); empty for a pod without GPUs.
	Containers []ContainerShape
}

// ContainerShape is one container's tessera request.
type ContainerShape struct {
	Name string
	// Init is a regular init container: it runs alone before the app
	// containers, on GPUs the app containers use after it (as
	// kube-scheduler counts it: the pod needs the larger of the two).
	// A sidecar (restartPolicy Always) runs beside them and counts as one.
	Init bool
	GPUs int
	// CorePercent and MemoryMiB are per GPU as requested (0: not requested).
	CorePercent uint32
	MemoryMiB   uint64
	// MIGProfile and MIGs: the container asks for MIGs fixed MIG devices
	// of MIGProfile instead of GPU shares (GPUs is then 0).
	MIGProfile string
	MIGs       int
}

// whole reports whether the container takes its GPUs whole: several GPUs,
// all of one's compute, or a slot count without a share.
func (c ContainerShape) whole() bool {
	return c.GPUs > 1 || c.CorePercent == 100 || (c.CorePercent == 0 && c.MemoryMiB == 0)
}

// milli is the container's compute per GPU in the engine's units (a
// memory-only share has no compute guarantee: 1 milli, so memory alone
// decides).
func (c ContainerShape) milli() int32 {
	switch {
	case c.whole():
		return partition.MilliPerGPU
	case c.CorePercent > 0:
		return int32(c.CorePercent) * partition.MilliPerGPU / 100
	}
	return 1
}

// gpuNeed is what some containers need at once: GPUs, compute and memory
// on each.
type gpuNeed struct {
	gpus   int
	milli  int32
	memMiB uint64
}

// PodRequest reads a pod's tessera resources and CPU/memory into an
// engine request. memUnitMiB is the device plugin's memoryUnit.
//
// Semantics (docs/scheduler.md): gpu-mem/gpu-core without gpu is one GPU;
// gpu: N alone is taken as N whole GPUs (the scheduler guarantees what it
// places, so an unshared slot count is a whole GPU each); gpu-mem without
// gpu-core has no compute guarantee; a multi-GPU container takes whole
// GPUs (gpu-core: 100×N), as the engine places them. Several app
// containers each get their own slice: whole-GPU containers GPUs of their
// own, fractional containers together one GPU (their shares add up, at
// most one GPU); with both, that shared GPU is taken whole. An init
// container runs before them on GPUs of theirs, so the pod asks for the
// larger of the two, as kube-scheduler counts init containers.
func PodRequest(p *corev1.Pod, memUnitMiB uint64) (placement.Request, Shape, error) {
	req := placement.Request{Name: Key(p)}
	var sh Shape
	add := func(c corev1.Container, init bool) error {
		if !hasTessera(c.Resources) {
			return nil
		}
		cs, err := containerShape(p, c, memUnitMiB)
		if err != nil {
			return err
		}
		cs.Init = init
		sh.Containers = append(sh.Containers, cs)
		return nil
	}
	for _, c := range p.Spec.InitContainers {
		sidecar := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		if err := add(c, !sidecar); err != nil {
			return req, sh, err
		}
	}
	for _, c := range p.Spec.Containers {
		if err := add(c, false); err != nil {
			return req, sh, err
		}
	}
	req.CPUMilli, req.MemMiB = cpuMem(p)
	req.NodeConstraint = nodefit.Key(p)
	if err := sh.fill(p, &req); err != nil {
		return req, sh, err
	}
	if m := strings.TrimSpace(p.Annotations[ModelsAnnotation]); m != "" {
		for _, s := range strings.Split(m, ",") {
			if s = strings.TrimSpace(s); s != "" {
				req.Models = append(req.Models, s)
			}
		}
	}
	if err := req.Validate(); err != nil {
		return req, sh, fmt.Errorf("pod %s: %w", Key(p), err)
	}
	return req, sh, nil
}

// fill sets the request's GPUs or MIG devices from the containers'.
func (sh Shape) fill(p *corev1.Pod, req *placement.Request) error {
	for _, c := range sh.Containers {
		if c.MIGs > 0 {
			if len(sh.Containers) > 1 {
				return fmt.Errorf("pod %s: container %s asks for MIG devices beside other containers with tessera resources; MIG devices go to one container per pod", Key(p), c.Name)
			}
			req.NumMIG, req.MIGProfile = c.MIGs, c.MIGProfile
			return nil
		}
	}
	need, err := sh.appNeed(p)
	if err != nil {
		return err
	}
	for _, c := range sh.Containers {
		if c.Init {
			need.gpus = max(need.gpus, c.GPUs)
			need.milli = max(need.milli, c.milli())
			need.memMiB = max(need.memMiB, c.MemoryMiB)
		}
	}
	if need.gpus > 1 {
		need.milli = partition.MilliPerGPU // the engine places several GPUs whole
	}
	req.NumGPU, req.GPUMilli, req.GPUMemMiB = need.gpus, need.milli, int32(min(need.memMiB, 1<<30))
	return nil
}

// appNeed is what the app containers (and sidecars) need together.
func (sh Shape) appNeed(p *corev1.Pod) (gpuNeed, error) {
	var whole, shared gpuNeed
	var sharing []string
	for _, c := range sh.Containers {
		switch {
		case c.Init:
		case c.whole():
			whole.gpus += c.GPUs
			whole.memMiB = max(whole.memMiB, c.MemoryMiB)
		default:
			shared.gpus = 1
			shared.milli += c.milli()
			shared.memMiB += c.MemoryMiB
			sharing = append(sharing, c.Name)
		}
	}
	if shared.milli > partition.MilliPerGPU {
		return gpuNeed{}, fmt.Errorf("pod %s: containers %s share one GPU and ask for %d%% of its compute together; fractional containers of a pod share one GPU, at most 100%%", Key(p), strings.Join(sharing, ", "), shared.milli/10)
	}
	switch {
	case whole.gpus == 0:
		return shared, nil
	case shared.gpus == 0:
		whole.milli = partition.MilliPerGPU
		return whole, nil
	}
	return gpuNeed{gpus: whole.gpus + 1, milli: partition.MilliPerGPU, memMiB: max(whole.memMiB, shared.memMiB)}, nil
}

func hasTessera(r corev1.ResourceRequirements) bool {
	for _, n := range []corev1.ResourceName{ResourceGPU, ResourceMemory, ResourceCore} {
		if _, ok := quantity(r, n); ok {
			return true
		}
	}
	return len(migResources(r)) > 0
}

// migResources are the tessera.io/mig-<profile> names a container requests
// or limits, sorted.
func migResources(r corev1.ResourceRequirements) []corev1.ResourceName {
	var out []corev1.ResourceName
	for _, l := range []corev1.ResourceList{r.Requests, r.Limits} {
		for n := range l {
			if strings.HasPrefix(string(n), ResourceMIGPrefix) && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}

// migShape reads a container's one tessera.io/mig-<profile> count. MIG
// devices are whole devices: a container asks for them or for GPU
// shares, not both, and for one profile.
func migShape(p *corev1.Pod, c corev1.Container, sh ContainerShape) (ContainerShape, error) {
	names := migResources(c.Resources)
	if len(names) > 1 {
		return sh, fmt.Errorf("pod %s: container %s: %s and %s: one MIG profile per container", Key(p), c.Name, names[0], names[1])
	}
	for _, n := range []corev1.ResourceName{ResourceGPU, ResourceMemory, ResourceCore} {
		if _, ok := quantity(c.Resources, n); ok {
			return sh, fmt.Errorf("pod %s: container %s: %s with %s: a container asks for MIG devices or GPU shares, not both", Key(p), c.Name, names[0], n)
		}
	}
	profile := strings.TrimPrefix(string(names[0]), ResourceMIGPrefix)
	if err := partition.CheckMIGProfile(profile); err != nil {
		return sh, fmt.Errorf("pod %s: container %s: %s: %w", Key(p), c.Name, names[0], err)
	}
	q, _ := quantity(c.Resources, names[0])
	v, exact := q.AsInt64()
	if !exact || v <= 0 || v > partition.MaxMIGDevices {
		return sh, fmt.Errorf("pod %s: container %s: %s: %s is not a whole number in 1..%d", Key(p), c.Name, names[0], q.String(), partition.MaxMIGDevices)
	}
	sh.MIGProfile, sh.MIGs = profile, int(v)
	return sh, nil
}

// quantity is an extended resource's request (or its limit: extended
// resources may name only the limit, which then is the request).
func quantity(r corev1.ResourceRequirements, n corev1.ResourceName) (resource.Quantity, bool) {
	if q, ok := r.Requests[n]; ok {
		return q, true
	}
	q, ok := r.Limits[n]
	return q, ok
}

func containerShape(p *corev1.Pod, c corev1.Container, memUnitMiB uint64) (ContainerShape, error) {
	sh := ContainerShape{Name: c.Name}
	if len(migResources(c.Resources)) > 0 {
		return migShape(p, c, sh)
	}
	count := func(n corev1.ResourceName, max int64) (int64, bool, error) {
		q, ok := quantity(c.Resources, n)
		if !ok {
			return 0, false, nil
		}
		v, exact := q.AsInt64()
		if !exact || v <= 0 || v > max {
			return 0, true, fmt.Errorf("pod %s: container %s: %s: %s is not a whole number in 1..%d", Key(p), c.Name, n, q.String(), max)
		}
		return v, true, nil
	}
	gpus, hasGPU, err := count(ResourceGPU, 64)
	if err != nil {
		return sh, err
	}
	core, hasCore, err := count(ResourceCore, 6400)
	if err != nil {
		return sh, err
	}
	mem, hasMem, err := count(ResourceMemory, 1<<20)
	if err != nil {
		return sh, err
	}
	if !hasGPU {
		gpus = 1
	}
	sh.GPUs = int(gpus)
	if hasCore {
		if core%gpus != 0 || core/gpus > 100 {
			return sh, fmt.Errorf("pod %s: container %s: %s: %d over %d GPUs is not an even share of at most 100 each", Key(p), c.Name, ResourceCore, core, gpus)
		}
		sh.CorePercent = uint32(core / gpus)
		if gpus > 1 && sh.CorePercent != 100 {
			return sh, fmt.Errorf("pod %s: container %s: %s: %d over %d GPUs: a multi-GPU container takes whole GPUs (100 each)", Key(p), c.Name, ResourceCore, core, gpus)
		}
	}
	if hasMem {
		sh.MemoryMiB = (uint64(mem)*memUnitMiB + uint64(gpus) - 1) / uint64(gpus)
	}
	return sh, nil
}

// cpuMem is the pod's effective CPU (milli) and memory (MiB) request, as
// kube-scheduler computes it: app containers summed, each init container
// alone if larger, plus overhead.
func cpuMem(p *corev1.Pod) (int64, int64) {
	var cpu, mem int64
	for _, c := range p.Spec.Containers {
		cpu += c.Resources.Requests.Cpu().MilliValue()
		mem += c.Resources.Requests.Memory().Value()
	}
	for _, c := range p.Spec.InitContainers {
		cpu = max(cpu, c.Resources.Requests.Cpu().MilliValue())
		mem = max(mem, c.Resources.Requests.Memory().Value())
	}
	cpu += p.Spec.Overhead.Cpu().MilliValue()
	mem += p.Spec.Overhead.Memory().Value()
	return cpu, (mem + 1<<20 - 1) >> 20
}

// EnginePod builds the engine's pod: request, class from the priority
// table (annotation, else PriorityClass value), queue, gang, checkpoint
// interval, deadline, the class's defaults (preemptible, minimum run time,
// maximum wait, deadline unless the pod has its own).
func EnginePod(p *corev1.Pod, cfg *schedv1.Config, memUnitMiB uint64) (*engine.Pod, Shape, error) {
	req, sh, err := PodRequest(p, memUnitMiB)
	if err != nil {
		return nil, sh, err
	}
	ann, hasAnn := p.Annotations[schedv1.PriorityAnnotation]
	var value int32
	if p.Spec.Priority != nil {
		value = *p.Spec.Priority
	}
	cl, err := cfg.Priority.ClassOf(ann, hasAnn, value, p.Spec.Priority != nil)
	if err != nil {
		return nil, sh, fmt.Errorf("pod %s: %w", Key(p), err)
	}
	class, err := priority.ParseClass(string(cl))
	if err != nil {
		return nil, sh, fmt.Errorf("pod %s: %w", Key(p), err)
	}
	ep := &engine.Pod{Key: Key(p), Request: req, Class: class, Team: p.Annotations[QueueAnnotation], Submitted: p.CreationTimestamp.Time}
	spec, ok, err := gang.FromAnnotations(p.Annotations)
	if err != nil {
		return nil, sh, fmt.Errorf("pod %s: %w", Key(p), err)
	}
	if ok {
		spec.Name = GroupKey(p.Namespace, spec.Name)
		ep.Gang = &spec
	}
	if v, ok := p.Annotations[CheckpointAnnotation]; ok {
		if ep.CheckpointInterval, err = CheckpointInterval(v); err != nil {
			return nil, sh, fmt.Errorf("pod %s: %w", Key(p), err)
		}
	}
	if v, ok := p.Annotations[DeadlineAnnotation]; ok {
		if ep.Deadline, err = Deadline(v, p.CreationTimestamp.Time); err != nil {
			return nil, sh, fmt.Errorf("pod %s: %w", Key(p), err)
		}
	}
	engine.PodDefaults(cfg, ep)
	return ep, sh, nil
}

// GroupKey is the engine's name of the pod group a pod of namespace ns
// names in tessera.io/pod-group: groups are namespaced, as pods are, so two
// teams' "workers" groups are not one group.
func GroupKey(ns, group string) string { return ns + "/" + group }

// GroupName is the tessera.io/pod-group value of an engine group name (what
// users wrote, for messages).
func GroupName(key string) string {
	if _, name, ok := strings.Cut(key, "/"); ok {
		return name
	}
	return key
}
