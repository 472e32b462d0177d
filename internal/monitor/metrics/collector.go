// Package metrics exports the node's GPU accounting to Prometheus. The
// collector reads everything at scrape time (state directories, NVML), so there
// is no goroutine or cached series per container: a container's series exist
// exactly while PodResources lists it and its files read.
package metrics

import (
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tessera-gpu/tessera/internal/monitor/accounting"
	"github.com/tessera-gpu/tessera/internal/monitor/gpus"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
)

// GPUSource is what the collector needs of the physical GPUs (gpus.Node).
type GPUSource interface {
	Devices() []gpus.Device
	Sample(gpus.Device) gpus.Sample
	Healthy(uuid string) bool
	Xids(uuid string) map[uint64]uint64
}

// Collector is a prometheus.Collector over the node's state.
type Collector struct {
	Node   string
	Reader *accounting.Reader
	Owner  func(key string) (identity.Owner, bool)
	GPUs   GPUSource // nil: no per-GPU series (NVML unavailable)
	// Processes maps host pids of hooked processes to their state
	// directory key (the reaper's last pass); nil: no per-container
	// utilisation.
	Processes func() map[uint32]string
}

var (
	// gpu_index and model are on the per-GPU series (tessera_gpu_info):
	// repeating them on 800 container-GPU series costs a fifth of a scrape.
	containerGPULabels = []string{"namespace", "pod", "container", "gpu_uuid", "node"}
	containerLabels    = []string{"namespace", "pod", "container", "node"}
	gpuLabels          = []string{"gpu_uuid", "gpu_index", "model", "node"}

	descUsed = prometheus.NewDesc("tessera_container_gpu_memory_used_bytes",
		"Device memory the container's processes hold on the GPU, as the hook charged it (region).", containerGPULabels, nil)
	descLimit = prometheus.NewDesc("tessera_container_gpu_memory_limit_bytes",
		"The container's memory cap on the GPU (limits file); absent when uncapped.", containerGPULabels, nil)
	descPeak = prometheus.NewDesc("tessera_container_gpu_memory_peak_bytes",
		"Highest total usage the container reached on the GPU since its region was created.", containerGPULabels, nil)
	descRefused = prometheus.NewDesc("tessera_container_gpu_allocations_refused_total",
		"Allocations the hook refused because they would pass the cap.", containerGPULabels, nil)
	descCore = prometheus.NewDesc("tessera_container_gpu_compute_limit_ratio",
		"The container's compute share of the GPU (core-limits file, 0..1); absent when uncapped.", containerGPULabels, nil)
	descPriority = prometheus.NewDesc("tessera_container_gpu_priority",
		"The container's compute priority on the GPU, 0 (highest) .. 3 (limits files).", containerGPULabels, nil)
	descHard = prometheus.NewDesc("tessera_container_gpu_compute_hard",
		"1 when the container's compute share is hard (never more, even on an idle GPU), 0 when guaranteed.", containerGPULabels, nil)
	descBusy = prometheus.NewDesc("tessera_container_gpu_busy_seconds_total",
		"GPU time of the container's kernels and graphs, measured by its hooks with events (core region).", containerGPULabels, nil)
	descThrottled = prometheus.NewDesc("tessera_container_throttled_seconds_total",
		"Wall time the container's launches waited for its compute grant (share or priority), summed over its threads.", containerGPULabels, nil)
	descProcs = prometheus.NewDesc("tessera_container_gpu_processes",
		"Processes of the container holding memory on the GPU (region slots with bytes on it).", containerGPULabels, nil)
	descCUtil = prometheus.NewDesc("tessera_container_gpu_utilization_ratio",
		"Sum of the container's hooked processes' SM utilisation on the GPU since the previous scrape (NVML process utilisation), 0..1 per GPU.", containerGPULabels, nil)
	descSlots = prometheus.NewDesc("tessera_container_processes",
		"Region slots in use: the container's processes that use CUDA through the hook.", containerLabels, nil)
	descCReaped = prometheus.NewDesc("tessera_container_reaped_processes_total",
		"Dead processes of the container whose slots were cleared (by the hook or this monitor).", containerLabels, nil)
	descCReapedBytes = prometheus.NewDesc("tessera_container_reaped_bytes_total",
		"Bytes given back to the container from dead processes' slots.", containerLabels, nil)

	descGPUInfo = prometheus.NewDesc("tessera_gpu_info",
		"1 for each GPU; join on gpu_uuid for gpu_index and model.", gpuLabels, nil)
	descGPUTotal = prometheus.NewDesc("tessera_gpu_memory_total_bytes", "GPU memory (NVML).", gpuLabels, nil)
	descGPUUsed  = prometheus.NewDesc("tessera_gpu_memory_used_bytes", "GPU memory in use by anyone (NVML).", gpuLabels, nil)
	descPromised = prometheus.NewDesc("tessera_gpu_memory_promised_bytes",
		"Sum of the memory caps of the containers on the GPU.", gpuLabels, nil)
	descUtil = prometheus.NewDesc("tessera_gpu_utilization_ratio",
		"Fraction of the time since the previous scrape a kernel ran on the GPU (NVML).", gpuLabels, nil)
	descTenants = prometheus.NewDesc("tessera_gpu_tenants", "Containers with a tessera share of the GPU.", gpuLabels, nil)
	descHealthy = prometheus.NewDesc("tessera_gpu_healthy",
		"1 unless a critical Xid or double-bit ECC event made the GPU unhealthy.", gpuLabels, nil)
	descXid = prometheus.NewDesc("tessera_gpu_xid_errors_total", "Xid events NVML reported for the GPU, by Xid.",
		append(append([]string(nil), gpuLabels...), "xid"), nil)
	descGPUProcs = prometheus.NewDesc("tessera_gpu_processes", "Compute processes the driver lists on the GPU (NVML).", gpuLabels, nil)

	descRegions = prometheus.NewDesc("tessera_monitor_allocations",
		"State directories read in this scrape, by whether PodResources names their container.", []string{"owned", "node"}, nil)
	descScrape = prometheus.NewDesc("tessera_monitor_scrape_duration_seconds",
		"Time this scrape spent reading the state directories and NVML.", []string{"node"}, nil)
)

// Describe sends every descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUsed, descLimit, descPeak, descRefused, descCore, descPriority, descProcs, descHard, descBusy, descThrottled,
		descSlots, descCReaped, descCReapedBytes, descGPUTotal, descGPUUsed, descPromised, descUtil, descTenants,
		descHealthy, descXid, descGPUProcs, descRegions, descScrape, descGPUInfo, descCUtil} {
		ch <- d
	}
}

type share struct {
	owner identity.Owner
	gpu   accounting.GPU
	procs int
}

// Collect reads the state and sends the series.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	start := time.Now()
	var devs []gpus.Device
	if c.GPUs != nil {
		devs = c.GPUs.Devices()
	}
	samples := make(map[string]gpus.Sample, len(devs))
	for _, d := range devs {
		samples[d.UUID] = c.GPUs.Sample(d)
	}
	util := c.containerUtil(samples)
	allocs, _ := c.Reader.ReadAll()
	shares, owned, unowned := c.shares(allocs, ch)
	keyOf := map[identity.Owner]string{}
	for _, a := range allocs {
		if o, ok := c.Owner(a.Entry.Key); ok && a.Entry.Kind == "mem" {
			keyOf[o] = a.Entry.Key
		}
	}
	ch <- prometheus.MustNewConstMetric(descRegions, prometheus.GaugeValue, float64(owned), "true", c.Node)
	ch <- prometheus.MustNewConstMetric(descRegions, prometheus.GaugeValue, float64(unowned), "false", c.Node)
	promised := map[string]uint64{}
	tenants := map[string]map[identity.Owner]bool{}
	for _, s := range shares {
		ls := newLabelSet(containerGPULabels, []string{s.owner.Namespace, s.owner.Pod, s.owner.Container, s.gpu.UUID, c.Node})
		emit := func(d *prometheus.Desc, kind prometheus.ValueType, v float64) {
			ch <- sample{desc: d, kind: kind, value: v, labels: ls}
		}
		if tenants[s.gpu.UUID] == nil {
			tenants[s.gpu.UUID] = map[identity.Owner]bool{}
		}
		tenants[s.gpu.UUID][s.owner] = true
		if s.gpu.HasMemory {
			emit(descUsed, prometheus.GaugeValue, float64(s.gpu.UsedBytes))
			emit(descPeak, prometheus.GaugeValue, float64(s.gpu.PeakBytes))
			emit(descRefused, prometheus.CounterValue, float64(s.gpu.Refused))
			emit(descProcs, prometheus.GaugeValue, float64(s.procs))
			if smp, ok := samples[s.gpu.UUID]; ok && smp.SMUtilOK && c.Processes != nil {
				pct := min(util[utilKey{keyOf[s.owner], s.gpu.UUID}], 100)
				emit(descCUtil, prometheus.GaugeValue, float64(pct)/100)
			}
			if s.gpu.MemLimitBytes > 0 {
				emit(descLimit, prometheus.GaugeValue, float64(s.gpu.MemLimitBytes))
				promised[s.gpu.UUID] += s.gpu.MemLimitBytes
			}
		}
		if s.gpu.HasCore && s.gpu.CoreLimitPct > 0 {
			emit(descCore, prometheus.GaugeValue, float64(s.gpu.CoreLimitPct)/100)
			hard := 0.0
			if s.gpu.Hard {
				hard = 1
			}
			emit(descHard, prometheus.GaugeValue, hard)
		}
		if s.gpu.HasCompute {
			emit(descBusy, prometheus.CounterValue, float64(s.gpu.BusyNs)/1e9)
			emit(descThrottled, prometheus.CounterValue, float64(s.gpu.ThrottledNs)/1e9)
		}
		emit(descPriority, prometheus.GaugeValue, float64(s.gpu.Priority))
	}
	for _, d := range devs {
		c.collectGPU(ch, d, samples[d.UUID], promised[d.UUID], len(tenants[d.UUID]))
	}
	ch <- prometheus.MustNewConstMetric(descScrape, prometheus.GaugeValue, time.Since(start).Seconds(), c.Node)
}

// shares merges each owner's memory and compute allocations per GPU and sends
// the per-container series that are not per GPU.
func (c *Collector) shares(allocs []accounting.Allocation, ch chan<- prometheus.Metric) (out []*share, owned, unowned int) {
	type key struct {
		owner identity.Owner
		uuid  string
	}
	byKey := map[key]*share{}
	for _, a := range allocs {
		owner, ok := c.Owner(a.Entry.Key)
		if !ok {
			unowned++
			continue
		}
		owned++
		if a.Entry.Kind == "mem" {
			lv := []string{owner.Namespace, owner.Pod, owner.Container, c.Node}
			ch <- prometheus.MustNewConstMetric(descSlots, prometheus.GaugeValue, float64(len(a.Procs)), lv...)
			ch <- prometheus.MustNewConstMetric(descCReaped, prometheus.CounterValue, float64(a.ReapedProcs), lv...)
			ch <- prometheus.MustNewConstMetric(descCReapedBytes, prometheus.CounterValue, float64(a.ReapedBytes), lv...)
		}
		for i, g := range a.GPUs {
			k := key{owner, g.UUID}
			s := byKey[k]
			if s == nil {
				s = &share{owner: owner, gpu: accounting.GPU{UUID: g.UUID}}
				byKey[k] = s
				out = append(out, s)
			}
			merge(&s.gpu, g)
			for _, p := range a.Procs {
				if i < len(p.UsedBytes) && p.UsedBytes[i] > 0 {
					s.procs++
				}
			}
		}
	}
	// Emitted in the order the registry sorts them into (label values in
	// label-name order: container, gpu_uuid, namespace, node, pod), its
	// sort then finds them sorted: a fifth of a scrape otherwise.
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		switch {
		case a.owner.Container != b.owner.Container:
			return a.owner.Container < b.owner.Container
		case a.gpu.UUID != b.gpu.UUID:
			return a.gpu.UUID < b.gpu.UUID
		case a.owner.Namespace != b.owner.Namespace:
			return a.owner.Namespace < b.owner.Namespace
		}
		return a.owner.Pod < b.owner.Pod
	})
	return out, owned, unowned
}

func merge(dst *accounting.GPU, g accounting.GPU) {
	if g.HasMemory {
		dst.HasMemory = true
		dst.MemLimitBytes, dst.UsedBytes, dst.PeakBytes, dst.Refused = g.MemLimitBytes, g.UsedBytes, g.PeakBytes, g.Refused
	}
	if g.HasCore {
		dst.HasCore = true
		dst.CoreLimitPct, dst.Hard = g.CoreLimitPct, g.Hard
		dst.HasCompute, dst.BusyNs, dst.ThrottledNs = g.HasCompute, g.BusyNs, g.ThrottledNs
	}
	dst.Priority = max(dst.Priority, g.Priority)
}

type utilKey struct{ key, gpu string }

// containerUtil sums NVML's per-process SM utilisation per state directory
// and GPU, for the processes the reaper knows as slot owners.
func (c *Collector) containerUtil(samples map[string]gpus.Sample) map[utilKey]uint32 {
	out := map[utilKey]uint32{}
	if c.Processes == nil {
		return out
	}
	owners := c.Processes()
	for uuid, s := range samples {
		for pid, pct := range s.SMUtil {
			if key, ok := owners[pid]; ok {
				out[utilKey{key, uuid}] += pct
			}
		}
	}
	return out
}

func (c *Collector) collectGPU(ch chan<- prometheus.Metric, d gpus.Device, s gpus.Sample, promised uint64, tenants int) {
	lv := []string{d.UUID, strconv.Itoa(d.Index), d.Model, c.Node}
	ch <- prometheus.MustNewConstMetric(descGPUInfo, prometheus.GaugeValue, 1, lv...)
	if s.MemOK {
		ch <- prometheus.MustNewConstMetric(descGPUTotal, prometheus.GaugeValue, float64(s.MemTotal), lv...)
		ch <- prometheus.MustNewConstMetric(descGPUUsed, prometheus.GaugeValue, float64(s.MemUsed), lv...)
	}
	if s.UtilOK {
		ch <- prometheus.MustNewConstMetric(descUtil, prometheus.GaugeValue, float64(s.UtilPct)/100, lv...)
	}
	if s.ProcessesOK {
		ch <- prometheus.MustNewConstMetric(descGPUProcs, prometheus.GaugeValue, float64(len(s.Processes)), lv...)
	}
	ch <- prometheus.MustNewConstMetric(descPromised, prometheus.GaugeValue, float64(promised), lv...)
	ch <- prometheus.MustNewConstMetric(descTenants, prometheus.GaugeValue, float64(tenants), lv...)
	healthy := 0.0
	if c.GPUs.Healthy(d.UUID) {
		healthy = 1
	}
	ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, healthy, lv...)
	for xid, n := range c.GPUs.Xids(d.UUID) {
		ch <- prometheus.MustNewConstMetric(descXid, prometheus.CounterValue, float64(n), append(lv, strconv.FormatUint(xid, 10))...)
	}
}
