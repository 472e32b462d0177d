package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// Options locate the built parts of the reduced form.
type Options struct {
	// LibDir holds libtessera-hook.so and fakegpu/ (make build's lib/).
	LibDir string
	// Cudash is the CUDA test shell (make build/hook/cudash); Monitor the
	// vgpu-monitor binary (make build's bin/).
	Cudash, Monitor string
	// ComputeWindow is how long the compute shares are measured (default 2s).
	ComputeWindow time.Duration
	// Progress receives one line per step as it starts.
	Progress io.Writer
}

// Reduced runs the scenario without root: the device plugin daemon in this
// process on a simulated 4-GPU H200 node (the demo plays kubelet over its
// gRPC sockets, and serves kubelet's PodResources API), tessera's placement
// engine deciding the pods' GPUs, each container's program as a process
// under the hook on the simulated driver, and the vgpu-monitor binary over
// the state directory. Everything it started is stopped before it returns.
func Reduced(ctx context.Context, o Options) (*Account, error) {
	if o.ComputeWindow == 0 {
		o.ComputeWindow = 2 * time.Second
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	for _, f := range []string{filepath.Join(o.LibDir, "libtessera-hook.so"), filepath.Join(o.LibDir, "fakegpu", "libcuda.so.1"), o.Cudash, o.Monitor} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("reduced form needs %s (make build): %w", f, err)
		}
	}
	dir, err := os.MkdirTemp("", "tessera-demo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	r := &run{o: o, dir: dir, acc: &Account{Form: "reduced"}}
	defer r.cleanup()
	if err := r.scenario(ctx); err != nil {
		return nil, err
	}
	return r.acc, nil
}

// run is one reduced-form run and what it started.
type run struct {
	o     Options
	dir   string
	acc   *Account
	node  *simNode
	mon   *monitor
	pods  []*runPod
	start time.Time
}

// runPod is one admitted pod and its container's process.
type runPod struct {
	pod     *corev1.Pod
	acc     *Pod
	devices map[string][]string
	ctr     *container
	capB    uint64
}

func (r *run) step(format string, args ...any) {
	fmt.Fprintf(r.o.Progress, "demo: [%5.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

func (r *run) cleanup() {
	for _, p := range r.pods {
		if p.ctr != nil {
			p.ctr.Kill()
		}
	}
	if r.mon != nil {
		r.mon.stop()
	}
	if r.node != nil {
		r.node.podRes.close()
		r.node.stop()
	}
}

func (r *run) scenario(ctx context.Context) error {
	r.start = time.Now()
	r.step("starting the device plugin on a simulated %d-GPU H200 node", gpuCount)
	n, err := startNode(ctx, r.dir, r.o.LibDir)
	if err != nil {
		return err
	}
	r.node = n
	r.step("starting vgpu-monitor over the node's state directory")
	if r.mon, err = startMonitor(ctx, r.o.Monitor, n); err != nil {
		return err
	}
	inv, err := n.inventory(time.Second)
	if err != nil {
		return err
	}
	r.acc.Node = Node{Name: nodeName, Where: []string{
		"device plugin: the real daemon (internal/deviceplugin/daemon) in the demo process, registered with the demo's kubelet socket",
		"kubelet: played by the demo (ListAndWatch, GetPreferredAllocation, Allocate over the plugin's gRPC sockets; PodResources served on a unix socket)",
		"tessera-scheduler: the placement engine (policy tessera) over the node's tessera.io/node-gpus inventory",
		fmt.Sprintf("vgpu-monitor: %s, pid %d, on %s", r.o.Monitor, r.mon.proc.PID, strings.TrimPrefix(r.mon.url, "http://")),
		"containers: one process each (cudash) under LD_PRELOAD of the hook, on the simulated driver (lib/fakegpu)",
	}}
	for _, g := range inv.GPUs {
		r.acc.Node.GPUs = append(r.acc.Node.GPUs, GPU{Index: g.Index, UUID: g.UUID, Model: g.Model, Memory: g.MemoryMiB << 20})
	}
	sched, err := newScheduler(n)
	if err != nil {
		return err
	}
	for _, spec := range PodSpecs {
		if err := r.admit(ctx, sched, spec); err != nil {
			return err
		}
	}
	if err := r.memory(); err != nil {
		return err
	}
	if err := r.compute(); err != nil {
		return err
	}
	if err := r.priority(ctx, sched); err != nil {
		return err
	}
	if err := r.metrics(ctx); err != nil {
		return err
	}
	return r.deletePod(ctx, r.pods[0])
}

// admit schedules one pod, binds it, plays kubelet's admission (preferred
// allocation and Allocate for each resource), and starts its container.
func (r *run) admit(ctx context.Context, sched *scheduler, spec string) error {
	p, err := ParsePod(spec)
	if err != nil {
		return err
	}
	if len(p.Spec.Containers) != 1 {
		return fmt.Errorf("pod %s: the demo runs one container per pod", p.Name)
	}
	a, idx, err := sched.place(p)
	if err != nil {
		return err
	}
	uuid := r.acc.Node.GPUs[idx].UUID
	r.step("%s/%s: tessera-scheduler chose GPU %d; kubelet admits it", p.Namespace, p.Name, idx)
	// The scheduler's bind: the node and the assignment, in one write.
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[annv1.AssignmentKey] = a
	p.Spec.NodeName = nodeName
	p.UID = types.UID("uid-" + p.Namespace + "-" + p.Name)
	p.CreationTimestamp = metav1.Now()
	p.Status.Phase = corev1.PodPending
	if err := r.node.client.CreatePod(p); err != nil {
		return err
	}
	c := p.Spec.Containers[0]
	rp := &runPod{pod: p, devices: map[string][]string{}, acc: &Pod{Namespace: p.Namespace, Name: p.Name, Container: c.Name,
		GPUIndex: idx, GPUUUID: uuid, Assignment: a, Devices: map[string]int{}}}
	var names []string
	for res := range c.Resources.Limits {
		names = append(names, string(res))
	}
	sort.Strings(names)
	var resps []*pluginapi.ContainerAllocateResponse
	for _, res := range names {
		q := c.Resources.Limits[corev1.ResourceName(res)]
		rp.acc.Requests = append(rp.acc.Requests, fmt.Sprintf("%s: %s", strings.TrimPrefix(res, "tessera.io/"), q.String()))
		ids, resp, err := r.node.admit(ctx, res, int(q.Value()))
		if err != nil {
			return fmt.Errorf("pod %s: %w", p.Name, err)
		}
		rp.devices[res] = ids
		rp.acc.Devices[res] = len(ids)
		resps = append(resps, resp)
		if res == "tessera.io/gpu-mem" {
			rp.capB = uint64(len(ids)) * r.node.plugin.Config.MemoryUnitBytes()
		}
	}
	r.node.podRes.add(p.Namespace, p.Name, c.Name, rp.devices)
	env, shown, mounts := containerEnv(r.node, resps)
	rp.acc.Env, rp.acc.Mounts = shown, mounts
	if rp.ctr, err = startContainer(r.o.Cudash, p.Name, env, uuid); err != nil {
		return err
	}
	r.pods = append(r.pods, rp)
	r.acc.Pods = append(r.acc.Pods, rp.acc)
	return nil
}

// memory: each container looks at its GPU and allocates up to its cap and
// past it.
func (r *run) memory() error {
	r.step("the containers allocate GPU memory up to their caps and past them")
	for _, p := range r.pods {
		free, total, err := p.ctr.memInfo()
		if err != nil {
			return err
		}
		phys := r.acc.Node.GPUs[p.acc.GPUIndex].Memory
		p.acc.Saw = append(p.acc.Saw, fmt.Sprintf("%d CUDA device(s); cuMemGetInfo: total %s, free %s (the GPU has %s)", p.ctr.devices, GiB(total), GiB(free), GiB(phys)))
		half := p.capB / 2
		for _, b := range []uint64{half, p.capB - half, gib} {
			result, said, err := p.ctr.alloc(b)
			if err != nil {
				return err
			}
			p.acc.Saw = append(p.acc.Saw, said)
			if result != "CUDA_SUCCESS" {
				r.acc.Enforced = append(r.acc.Enforced, fmt.Sprintf("%s/%s: a %s allocation past its %s cap -> %s from the hook (nothing allocated)",
					p.acc.Namespace, p.acc.Name, GiB(b), GiB(p.capB), result))
			}
		}
	}
	return nil
}

// compute: both containers saturate the GPU they share with 1 ms kernels;
// the simulated device's own per-process busy time gives their parts.
func (r *run) compute() error {
	shared := map[int][]*runPod{}
	for _, p := range r.pods {
		shared[p.acc.GPUIndex] = append(shared[p.acc.GPUIndex], p)
	}
	var group []*runPod
	gpuIdx := 0
	for i, g := range shared {
		if len(g) > len(group) {
			group, gpuIdx = g, i
		}
	}
	if len(group) < 2 {
		r.acc.Enforced = append(r.acc.Enforced, "the pods got different GPUs: no compute was shared")
		return nil
	}
	r.step("the containers on GPU %d run kernels for %s; the device measures each one's busy time", gpuIdx, r.o.ComputeWindow)
	for _, p := range group {
		// Far more work than the window: both stay busy throughout.
		if err := p.ctr.Send("launch 1000000 1000000"); err != nil {
			return err
		}
	}
	state := filepath.Join(r.dir, "fakegpu.state")
	time.Sleep(500 * time.Millisecond)
	a, err := busy(state, gpuIdx)
	if err != nil {
		return err
	}
	time.Sleep(r.o.ComputeWindow)
	b, err := busy(state, gpuIdx)
	if err != nil {
		return err
	}
	var total float64
	got := make([]float64, len(group))
	for i, p := range group {
		got[i] = float64(b[p.ctr.Pid()] - min(a[p.ctr.Pid()], b[p.ctr.Pid()]))
		total += got[i]
	}
	if total == 0 {
		return errors.New("the shared GPU ran no kernel in the window")
	}
	for i, p := range group {
		share := 0.0
		if q, ok := p.pod.Spec.Containers[0].Resources.Limits["tessera.io/gpu-core"]; ok {
			share = float64(q.Value())
		}
		r.acc.Compute = append(r.acc.Compute, ComputeShare{Pod: p.acc.Name, SharePct: share, GotPct: 100 * got[i] / total})
	}
	return nil
}

// priority: a P0 pod's short bursts, timed alone on its GPU and then beside
// a P3 pod that saturates the GPU; the arbiter holds P3 back while P0 works.
func (r *run) priority(ctx context.Context, sched *scheduler) error {
	for _, spec := range PrioritySpecs {
		if err := r.admit(ctx, sched, spec); err != nil {
			return err
		}
	}
	p0, p3 := r.pods[len(r.pods)-2], r.pods[len(r.pods)-1]
	if p0.acc.GPUIndex != p3.acc.GPUIndex {
		r.acc.Enforced = append(r.acc.Enforced, "the P0 and P3 pods got different GPUs: no priority to show")
		return nil
	}
	const bursts = 15
	r.step("%s alone on GPU %d: %d bursts of 2 ms", p0.acc.Name, p0.acc.GPUIndex, bursts)
	alone, err := burstLatency(p0.ctr, bursts)
	if err != nil {
		return err
	}
	r.step("%s beside %s, which saturates GPU %d", p0.acc.Name, p3.acc.Name, p0.acc.GPUIndex)
	if err := p3.ctr.Send("launch 1000000 1000000"); err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	beside, err := burstLatency(p0.ctr, bursts)
	if err != nil {
		return err
	}
	r.acc.Latency = &Latency{P0: p0.acc.Name, P3: p3.acc.Name, AloneMs: alone, BesideMs: beside, Bursts: bursts - 1}
	return nil
}

// burstLatency is the median time of n bursts (two 1 ms kernels, then a
// synchronise), the first left out (it loads the module), in ms.
func burstLatency(c *container, n int) (float64, error) {
	var ms []float64
	for i := range n {
		began := time.Now()
		if _, err := c.Must("launch 2 1000000"); err != nil {
			return 0, err
		}
		if _, err := c.Must("sync"); err != nil {
			return 0, err
		}
		if i > 0 {
			ms = append(ms, float64(time.Since(began).Microseconds())/1000)
		}
		time.Sleep(20 * time.Millisecond)
	}
	sort.Float64s(ms)
	return ms[len(ms)/2], nil
}

// busy is each process's kernel time on device dev so far.
func busy(state string, dev int) (map[int]uint64, error) {
	st, err := fakegpu.ReadState(state)
	if err != nil {
		return nil, fmt.Errorf("simulated GPU state: %w", err)
	}
	out := map[int]uint64{}
	for _, p := range st.Processes {
		out[p.Pid] += p.RunNs[dev]
	}
	return out, nil
}

// metrics scrapes the monitor until it lists every pod's container.
func (r *run) metrics(ctx context.Context) error {
	r.step("scraping vgpu-monitor's /metrics")
	deadline := time.Now().Add(patience)
	for {
		rows, fams, err := r.mon.rows(ctx)
		if err != nil {
			return err
		}
		if len(rows) >= len(r.pods) {
			r.acc.Metrics = rows
			if used, ok := gpuUsed(fams, r.pods[0].acc.GPUUUID); ok {
				line, err := gpuHolds(r.pods[0].acc.GPUIndex, used, r.capsOn(r.pods[0].acc.GPUUUID))
				r.acc.Enforced = append(r.acc.Enforced, line)
				return err
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("vgpu-monitor lists %d of %d containers after %s: %s", len(rows), len(r.pods), patience, logTail(r.mon.proc.LogPath))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// capsOn is the sum of the memory caps of the pods on GPU uuid.
func (r *run) capsOn(uuid string) uint64 {
	var sum uint64
	for _, p := range r.pods {
		if p.acc.GPUUUID == uuid {
			sum += p.capB
		}
	}
	return sum
}

// gpuHolds says what a GPU holds (NVML, below the hook) against what its
// containers' caps allow; more than that is the demo's failure.
func gpuHolds(idx int, used, caps uint64) (string, error) {
	if used > caps {
		line := fmt.Sprintf("GPU %d holds %s in all (NVML, below the hook): MORE than the %s its containers' caps allow", idx, GiB(used), GiB(caps))
		return line, errors.New(line)
	}
	return fmt.Sprintf("GPU %d holds %s in all (NVML, below the hook), within the %s its containers' caps allow", idx, GiB(used), GiB(caps)), nil
}

// deletePod kills a pod's process and removes the pod, as kubelet would,
// and watches its series and memory go.
func (r *run) deletePod(ctx context.Context, p *runPod) error {
	r.step("deleting %s/%s", p.acc.Namespace, p.acc.Name)
	held := p.capB
	began := time.Now()
	p.ctr.Kill()
	if err := r.node.podRes.remove(p.acc.Namespace, p.acc.Name); err != nil {
		return err
	}
	if err := r.node.client.DeletePod(p.acc.Namespace, p.acc.Name); err != nil {
		return err
	}
	r.node.release(p.devices)
	deadline := time.Now().Add(patience)
	for {
		rows, fams, err := r.mon.rows(ctx)
		if err != nil {
			return err
		}
		listed := false
		for _, row := range rows {
			listed = listed || (row.Namespace == p.acc.Namespace && row.Pod == p.acc.Name)
		}
		used, _ := gpuUsed(fams, p.acc.GPUUUID)
		if !listed && used+held <= r.usedBefore(p) {
			r.acc.Deleted = append(r.acc.Deleted,
				fmt.Sprintf("%s/%s: its process was killed (SIGKILL) holding %s; kubelet no longer lists the pod", p.acc.Namespace, p.acc.Name, GiB(held)),
				fmt.Sprintf("its series left /metrics and GPU %d fell to %s in use (NVML) within %s", p.acc.GPUIndex, GiB(used),
					time.Since(began).Round(10*time.Millisecond)))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after deleting %s: still listed %v, GPU memory in use %s", p.acc.Name, listed, GiB(used))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// usedBefore is the GPU's memory in use before p was deleted, from the
// last scrape's rows of the pods on its GPU.
func (r *run) usedBefore(p *runPod) uint64 {
	var sum uint64
	for _, m := range r.acc.Metrics {
		if m.GPU == p.acc.GPUUUID {
			sum += m.Used
		}
	}
	return sum
}
