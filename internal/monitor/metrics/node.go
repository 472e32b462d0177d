package metrics

import (
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// Node reports the monitor's node-wide state: whether it holds the node
// lease (the one monitor that reaps and enforces), and the free space of the
// state directory's filesystem, which every region and limits file lives on.
type Node struct {
	Name     string
	StateDir string
	Log      *slog.Logger
	// Held says whether this monitor holds the node lease (nil: it does).
	Held func() bool
	// MinFree is the space a new container's files need (a region and a
	// limits file): below it the device plugin cannot give a container its
	// accounting, so the monitor says so.
	MinFree uint64
	// WriteErrors counts failed writes of the monitor's own files, by file.
	WriteErrors *prometheus.CounterVec

	mu   sync.Mutex
	full bool
}

// NewNode creates the node collector and its write error counter.
func NewNode(name, stateDir string, log *slog.Logger) *Node {
	return &Node{Name: name, StateDir: stateDir, Log: log,
		WriteErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tessera_monitor_state_write_errors_total",
			ConstLabels: prometheus.Labels{"node": name},
			Help:        "Failed writes of the monitor's own files in the state directory (a full filesystem), by file; nothing already written is lost."},
			[]string{"file"})}
}

var (
	leaseHeldDesc = prometheus.NewDesc("tessera_monitor_lease_held",
		"1 when this monitor holds the node lease (reaps, enforces, posts Events), 0 on standby (another monitor on the node holds it: metrics only).",
		[]string{"node"}, nil)
	stateFreeDesc = prometheus.NewDesc("tessera_monitor_state_dir_free_bytes",
		"Space left for unprivileged writers on the state directory's filesystem (statfs f_bavail).",
		[]string{"node"}, nil)
)

// Describe implements prometheus.Collector.
func (n *Node) Describe(ch chan<- *prometheus.Desc) {
	ch <- leaseHeldDesc
	ch <- stateFreeDesc
	n.WriteErrors.Describe(ch)
}

// Collect implements prometheus.Collector.
func (n *Node) Collect(ch chan<- prometheus.Metric) {
	held := 1.0
	if n.Held != nil && !n.Held() {
		held = 0
	}
	ch <- prometheus.MustNewConstMetric(leaseHeldDesc, prometheus.GaugeValue, held, n.Name)
	if free, err := n.Check(); err == nil {
		ch <- prometheus.MustNewConstMetric(stateFreeDesc, prometheus.GaugeValue, float64(free), n.Name)
	}
	n.WriteErrors.Collect(ch)
}

// Check reads the state directory's free space and logs when it falls
// below MinFree, and when it recovers (once per change, not per call).
func (n *Node) Check() (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(n.StateDir, &st); err != nil {
		return 0, err
	}
	free := st.Bavail * uint64(st.Bsize)
	n.mu.Lock()
	defer n.mu.Unlock()
	switch full := free < n.MinFree; {
	case full && !n.full:
		n.Log.Error("state directory filesystem full: new containers cannot get a region or limits file; running ones keep their accounting",
			"dir", n.StateDir, "freeBytes", free, "needBytes", n.MinFree)
	case !full && n.full:
		n.Log.Info("state directory filesystem has space again", "dir", n.StateDir, "freeBytes", free)
	}
	n.full = free < n.MinFree
	return free, nil
}
