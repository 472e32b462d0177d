package placement

// sliverWaste is, for every free amount r of one GPU, what stays unused if
// the GPU is filled as tightly as the workload's common share sizes allow: a
// knapsack over the single-GPU share sizes that make up at least minShare of
// the share pods. A whole free GPU wastes nothing (whole-GPU pods use it).
func sliverWaste(w *Workload, minShare float64) []float64 {
	var shareFreq float64
	for _, cl := range w.Classes {
		if isShare(cl) {
			shareFreq += cl.Freq
		}
	}
	reach := make([]bool, 1001)
	reach[0] = true
	for _, cl := range w.Classes {
		if !isShare(cl) || cl.Freq < minShare*shareFreq {
			continue
		}
		for x := int(cl.GPUMilli); x <= 1000; x++ {
			reach[x] = reach[x] || reach[x-int(cl.GPUMilli)]
		}
	}
	out := make([]float64, 1001)
	fill := 0
	for r := range out {
		if reach[r] {
			fill = r
		}
		out[r] = float64(r - fill)
	}
	out[1000] = 0
	return out
}

func isShare(cl Class) bool { return cl.NumGPU == 1 && cl.GPUMilli < 1000 }

// modelPressure is, per model, the share of the workload's GPU demand that
// only a subset of models may serve (spread over the subset by capacity),
// divided by the model's share of GPU capacity. Above 1, pods restricted to
// the model alone would oversubscribe it.
func modelPressure(c *Cluster, w *Workload) []float64 {
	capacity := make([]float64, len(c.models))
	var total float64
	for i := range c.Nodes {
		capacity[c.modelOf[i]] += float64(len(c.Nodes[i].GPUs))
		total += float64(len(c.Nodes[i].GPUs))
	}
	demand := make([]float64, len(c.models))
	var all float64
	for _, cl := range w.Classes {
		g := cl.Freq * float64(cl.GPUMilli) * float64(cl.NumGPU)
		all += g
		if cl.AnyModel || cl.NumGPU == 0 {
			continue
		}
		var subset float64
		for m := range capacity {
			if cl.Models&(1<<m) != 0 {
				subset += capacity[m]
			}
		}
		for m := range capacity {
			if cl.Models&(1<<m) != 0 && subset > 0 {
				demand[m] += g * capacity[m] / subset
			}
		}
	}
	out := make([]float64, len(capacity))
	for m := range out {
		if capacity[m] > 0 && all > 0 {
			out[m] = (demand[m] / all) / (capacity[m] / total)
		}
	}
	return out
}

// cpuLoad returns the CPU the workload needs, when its GPU requests fill the
// cluster's GPUs, as a fraction of the cluster's CPU; and the CPU milli its
// GPU pods need per GPU milli.
func cpuLoad(c *Cluster, w *Workload) (load, rho float64) {
	var cpu, gpuPodCPU, gpu, capCPU, capGPU float64
	for _, cl := range w.Classes {
		cpu += cl.Freq * float64(cl.CPUMilli)
		if cl.NumGPU > 0 {
			gpuPodCPU += cl.Freq * float64(cl.CPUMilli)
			gpu += cl.Freq * float64(cl.GPUMilli) * float64(cl.NumGPU)
		}
	}
	for i := range c.Nodes {
		capCPU += float64(c.Nodes[i].CPU)
		capGPU += 1000 * float64(len(c.Nodes[i].GPUs))
	}
	if gpu == 0 || capCPU == 0 {
		return 0, 1
	}
	return cpu / gpu * capGPU / capCPU, gpuPodCPU / gpu
}

// strandWeight scales the CPU-stranding cost with CPU load: holding CPU back
// for GPUs pays while CPU is plentiful overall (load below 0.95) and mostly
// shifts the shortage once the workload needs all of it (load 1.05 and up).
// A quarter of it stays even then: without it the result depends on the
// tie-break order (cpu250 with ties in node-list order: 7.7 % unallocated
// instead of 6.5 %).
func strandWeight(load float64) float64 {
	return max(0.25, min(1, (1.05-load)/0.1))
}
