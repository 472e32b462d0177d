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
