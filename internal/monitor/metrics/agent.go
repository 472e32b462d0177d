package metrics

import "github.com/prometheus/client_golang/prometheus"

// Agent holds the monitor's own counters; they live in the process (a restart
// starts them at zero, as Prometheus counters may), while per-container totals
// that must survive a restart are kept in the regions.
type Agent struct {
	ReapedSlots    prometheus.Counter
	ReapedBytes    prometheus.Counter
	Bypass         *prometheus.CounterVec // kind: no_region, over_cap
	Kills          prometheus.Counter
	Spared         *prometheus.CounterVec // reason: enforce.Spare*
	Skipped        *prometheus.CounterVec // reason: accounting.Skip* ; file
	IdentityErrors prometheus.Counter
}

// NewAgent creates the counters and registers them on reg.
func NewAgent(reg prometheus.Registerer, node string) *Agent {
	cl := prometheus.Labels{"node": node}
	a := &Agent{
		ReapedSlots: prometheus.NewCounter(prometheus.CounterOpts{Name: "tessera_monitor_reaped_slots_total", ConstLabels: cl,
			Help: "Region slots of dead processes this monitor cleared."}),
		ReapedBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "tessera_monitor_reaped_bytes_total", ConstLabels: cl,
			Help: "Bytes this monitor gave back to containers from dead processes' slots."}),
		Bypass: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tessera_monitor_bypass_detections_total", ConstLabels: cl,
			Help: "Violations found by comparing the driver's per-process memory with the regions, by kind (no_region: a process on a tessera GPU outside any region; over_cap: a container holding more than its cap)."}, []string{"kind"}),
		Kills: prometheus.NewCounter(prometheus.CounterOpts{Name: "tessera_monitor_enforcement_kills_total", ConstLabels: cl,
			Help: "Processes killed under the kill policy."}),
		Spared: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tessera_monitor_enforcement_spared_total", ConstLabels: cl,
			Help: "Processes the kill policy named but did not kill, by reason (not_in_pod: its cgroup is outside kubelet's kubepods hierarchy, e.g. a host daemon; not_in_proc: not visible in the monitor's /proc)."}, []string{"reason"}),
		Skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tessera_monitor_regions_skipped_total", ConstLabels: cl,
			Help: "State files not used because they are truncated, foreign (wrong magic), of another ABI version, corrupt or unreadable; counted at every read."}, []string{"reason", "file"}),
		IdentityErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "tessera_monitor_podresources_errors_total", ConstLabels: cl,
			Help: "Failed reads of kubelet's PodResources API."}),
	}
	if reg != nil {
		reg.MustRegister(a.ReapedSlots, a.ReapedBytes, a.Bypass, a.Kills, a.Spared, a.Skipped, a.IdentityErrors)
	}
	return a
}

// Balloon holds the balloon controller's series (docs/balloon.md).
type Balloon struct {
	Reclaimable *prometheus.GaugeVec // gpu
	Lent        *prometheus.GaugeVec // gpu
	Inflations  prometheus.Counter
	Deflations  prometheus.Counter
	Evictions   prometheus.Counter
	OwnerWait   *WaitHistogram
	OwnerOOMs   prometheus.Counter
}

// NewBalloon creates the balloon series and registers them on reg.
func NewBalloon(reg prometheus.Registerer, node string) *Balloon {
	cl := prometheus.Labels{"node": node}
	b := &Balloon{
		Reclaimable: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tessera_balloon_reclaimable_bytes", ConstLabels: cl,
			Help: "Memory of settled opted-in containers above their floors that is not lent yet, per GPU."}, []string{"gpu"}),
		Lent: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tessera_balloon_lent_bytes", ConstLabels: cl,
			Help: "Memory taken from owners (ceilings minus lowered caps), per GPU."}, []string{"gpu"}),
		Inflations: prometheus.NewCounter(prometheus.CounterOpts{Name: "tessera_balloon_inflations_total", ConstLabels: cl,
			Help: "Caps of opted-in containers lowered to their floors."}),
		Deflations: prometheus.NewCounter(prometheus.CounterOpts{Name: "tessera_balloon_deflations_total", ConstLabels: cl,
			Help: "Lowered caps raised back to their ceilings."}),
		Evictions: prometheus.NewCounter(prometheus.CounterOpts{Name: "tessera_balloon_evictions_total", ConstLabels: cl,
			Help: "Borrowers evicted so that owners get their memory back."}),
		OwnerWait: NewWaitHistogram(cl),
		OwnerOOMs: prometheus.NewCounter(prometheus.CounterOpts{Name: "tessera_balloon_owner_ooms_total", ConstLabels: cl,
			Help: "Owner waits that ended in CUDA_ERROR_OUT_OF_MEMORY because the memory did not come back in time."}),
	}
	if reg != nil {
		reg.MustRegister(b.Reclaimable, b.Lent, b.Inflations, b.Deflations, b.Evictions, b.OwnerWait, b.OwnerOOMs)
	}
	return b
}
