// Package metrics is the scheduler process's Prometheus instrumentation,
// on its own registry (served on --metrics-bind-address with /healthz and
// /readyz). Gauges that describe the cluster (pending pods, GPU memory and
// compute allocated and promised, fragmentation) are set from a snapshot
// the scheduling loop takes; counters and histograms are updated as things
// happen.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

const ns = "tessera_scheduler"

// Metrics holds every series.
type Metrics struct {
	Registry *prometheus.Registry

	Pending          *prometheus.GaugeVec     // class, queue
	QueueWait        *prometheus.HistogramVec // class
	AttemptLatency   prometheus.Histogram
	CycleLatency     prometheus.Histogram
	BindLatency      prometheus.Histogram
	PodSchedulingE2E prometheus.Histogram
	Binds            prometheus.Counter
	BindErrors       *prometheus.CounterVec // reason
	Preemptions      prometheus.Counter     // victims evicted
	EvictionsBlocked prometheus.Counter     // 429 from a PodDisruptionBudget, or another refusal
	BalloonBorrowers prometheus.Counter     // pods bound on reclaimed memory
	BalloonReclaims  prometheus.Counter     // borrowers evicted for their owners
	Unschedulable    prometheus.Counter

	NodeAllocatedMemMiB  *prometheus.GaugeVec // node
	NodeAllocatedMilli   *prometheus.GaugeVec // node
	NodePromisedMemMiB   *prometheus.GaugeVec // node
	NodePromisedMilli    *prometheus.GaugeVec // node
	QueueAllocatedMemMiB *prometheus.GaugeVec // queue
	QueueAllocatedMilli  *prometheus.GaugeVec // queue
	QueuePromisedMemMiB  *prometheus.GaugeVec // queue
	QueuePromisedMilli   *prometheus.GaugeVec // queue
	Fragmentation        prometheus.Gauge

	ConfigReloads     *prometheus.CounterVec // result: ok | error
	ConfigLastGood    prometheus.Gauge       // 1 when the last ConfigMap read was used
	Leader            prometheus.Gauge
	InvalidPods       prometheus.Counter
	InvalidNodes      prometheus.Gauge
	EngineRebuilds    prometheus.Counter
	OversubscribedFix prometheus.Counter
}

// New registers every series on a fresh registry (with the Go and process
// collectors).
func New() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := func(c prometheus.Collector) { r.MustRegister(c) }
	m := &Metrics{Registry: r}
	latency := prometheus.ExponentialBuckets(0.0001, 2, 18) // 100 µs .. 13 s
	wait := prometheus.ExponentialBuckets(0.1, 2, 20)       // 100 ms .. 14 h
	m.Pending = gaugeVec(f, "pending_pods", "Pods waiting to be scheduled, by priority class and quota queue.", "class", "queue")
	m.QueueWait = histVec(f, "queue_wait_seconds", "Time from a pod's creation to its placement, by class.", wait, "class")
	m.AttemptLatency = hist(f, "scheduling_attempt_duration_seconds", "Engine time per pod tried in a scheduling cycle (cycle time / pods tried).", latency)
	m.CycleLatency = hist(f, "cycle_duration_seconds", "Duration of one scheduling cycle over the queue.", latency)
	m.BindLatency = hist(f, "bind_duration_seconds", "Duration of one bind call, retries included.", latency)
	m.PodSchedulingE2E = hist(f, "pod_scheduling_duration_seconds", "Time from a pod's creation to its successful bind.", latency)
	m.Binds = counter(f, "binds_total", "Pods bound.")
	m.BindErrors = counterVec(f, "bind_errors_total", "Binds that failed, by reason (conflict, gone, error); each was rolled back.", "reason")
	m.Preemptions = counter(f, "preemption_victims_total", "Pods evicted to make room for more urgent ones.")
	m.EvictionsBlocked = counter(f, "evictions_blocked_total", "Evictions the API server refused (a PodDisruptionBudget answers 429); the preemption was rolled back.")
	m.BalloonBorrowers = counter(f, "balloon_borrowers_total", "Pods bound on GPU memory reclaimed from opted-in owners (tessera.io/borrowed).")
	m.BalloonReclaims = counter(f, "balloon_reclaims_total", "Borrowers evicted because an owner wanted its memory back.")
	m.Unschedulable = counter(f, "unschedulable_reports_total", "FailedScheduling events posted.")
	m.NodeAllocatedMemMiB = gaugeVec(f, "node_gpu_memory_allocated_mib", "GPU memory held by bound pods, per node.", "node")
	m.NodeAllocatedMilli = gaugeVec(f, "node_gpu_compute_allocated_milli", "GPU compute (1000 = one GPU) held by bound pods, per node.", "node")
	m.NodePromisedMemMiB = gaugeVec(f, "node_gpu_memory_promised_mib", "GPU memory promised to pods not bound yet (bind in flight, or nominated and waiting for victims), per node.", "node")
	m.NodePromisedMilli = gaugeVec(f, "node_gpu_compute_promised_milli", "GPU compute promised to pods not bound yet, per node.", "node")
	m.QueueAllocatedMemMiB = gaugeVec(f, "queue_gpu_memory_allocated_mib", "GPU memory held by bound pods, per quota queue.", "queue")
	m.QueueAllocatedMilli = gaugeVec(f, "queue_gpu_compute_allocated_milli", "GPU compute held by bound pods, per quota queue.", "queue")
	m.QueuePromisedMemMiB = gaugeVec(f, "queue_gpu_memory_promised_mib", "GPU memory promised to pods not bound yet, per quota queue.", "queue")
	m.QueuePromisedMilli = gaugeVec(f, "queue_gpu_compute_promised_milli", "GPU compute promised to pods not bound yet, per quota queue.", "queue")
	m.Fragmentation = gauge(f, "fragmentation_milli", "Cluster GPU fragmentation in milli-GPUs (the placement engine's measure, against whole, half and quarter GPUs alike).")
	m.ConfigReloads = counterVec(f, "config_reloads_total", "Reads of the queue ConfigMap, by result (ok, error); an error keeps the last good configuration.", "result")
	m.ConfigLastGood = gauge(f, "config_last_reload_successful", "1 when the last queue ConfigMap read was valid and is in use, 0 when the scheduler runs on an older one.")
	m.Leader = gauge(f, "leader", "1 while this replica holds the Lease and schedules.")
	m.InvalidPods = counter(f, "invalid_pods_total", "Pods refused for bad input (resources, annotations); each got a Warning event.")
	m.InvalidNodes = gauge(f, "invalid_nodes", "Nodes whose tessera.io/node-gpus inventory is unusable; nothing is placed on them.")
	m.EngineRebuilds = counter(f, "engine_rebuilds_total", "Times the engine was rebuilt from the API server's state (start, leadership, inventory change, new queue configuration).")
	m.OversubscribedFix = counter(f, "conflicting_placements_total", "Bound pods whose recorded GPUs do not fit beside the others on their node (a lying inventory or a double booking by another writer); the node is cordoned for tessera.")
	return m
}

func gauge(f func(prometheus.Collector), name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help})
	f(g)
	return g
}

func gaugeVec(f func(prometheus.Collector), name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, labels)
	f(g)
	return g
}

func counter(f func(prometheus.Collector), name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help})
	f(c)
	return c
}

func counterVec(f func(prometheus.Collector), name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
	f(c)
	return c
}

func hist(f func(prometheus.Collector), name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: name, Help: help, Buckets: buckets})
	f(h)
	return h
}

func histVec(f func(prometheus.Collector), name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: name, Help: help, Buckets: buckets}, labels)
	f(h)
	return h
}
