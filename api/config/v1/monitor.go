package v1

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Enforcement policies of the node monitor.
const (
	// PolicyReport counts, logs and (with an API client) posts a Warning Event.
	PolicyReport = "report"
	// PolicyKill also sends SIGKILL to the offending processes once the
	// violation has lasted the grace period.
	PolicyKill = "kill"
)

// Enforcement tolerances. A CUDA context holds device memory the hook does
// not charge (unless the plugin's contextReserveMiB is set): the driver's
// per-context reserve plus the modules loaded into it, a few hundred MiB
// on datacenter GPUs (roughly 250-600 MiB with CUDA 12 and lazy loading,
// more with eager loading or large libraries: measure one idle context with
// nvidia-smi on your GPUs and driver). A hooked process holds its context
// before its first charge claims a slot, and a container at its cap holds its
// contexts on top; a tolerance below a context's size flags both, and under
// kill kills them.
const (
	// DefaultToleranceMiB covers one context on current GPUs.
	DefaultToleranceMiB = 512
	// MinKillToleranceMiB is the least tolerance policy kill accepts
	// without enforcement.allowLowTolerance: less than any CUDA 12 context.
	MinKillToleranceMiB = 256
)

// MonitorConfig is the node monitor's (cmd/vgpu-monitor) configuration file,
// `version: v1`, resolved like Config: defaults, then the file, then flags.
type MonitorConfig struct {
	Version string `json:"version"`
	// NodeName labels the per-GPU series; defaults to $NODE_NAME.
	NodeName string `json:"nodeName,omitempty"`
	// StateDir is the device plugin's state directory (shared volume).
	StateDir string `json:"stateDir"`
	// ProcRoot is the host's /proc; the monitor must run in the host pid
	// namespace to recognise container processes.
	ProcRoot string `json:"procRoot"`
	// PodResourcesSocket is kubelet's PodResources API socket.
	PodResourcesSocket string `json:"podResourcesSocket"`
	// ListenAddress serves /metrics, /healthz and /readyz.
	ListenAddress string `json:"listenAddress"`
	// IdentityInterval is how often PodResources is read.
	IdentityInterval Duration `json:"identityInterval"`
	// ReapInterval is how often dead processes' slots are reclaimed.
	ReapInterval Duration          `json:"reapInterval"`
	Enforcement  EnforcementConfig `json:"enforcement"`
	Health       HealthConfig      `json:"health"`
	Log          LogConfig         `json:"log"`
	// Balloon is the memory-balloon controller (docs/balloon.md).
	Balloon BalloonConfig `json:"balloon,omitempty"`
	// Containerd names the container and pod of a host process through
	// containerd's API (task PIDs and the CRI's io.kubernetes.* labels).
	Containerd ContainerdConfig `json:"containerd"`
	// Kubernetes is the optional API access for Events.
	Kubernetes KubernetesConfig `json:"kubernetes"`
	// Arbiter hands out the GPUs' compute time between gpu-core tenants
	// (docs/hook.md "Compute time slices").
	Arbiter ArbiterConfig `json:"arbiter"`
}

// BalloonConfig tunes memory balloons. Only containers whose pod opted in
// (tessera.io/balloon: "true") are ever lowered.
type BalloonConfig struct {
	// Enabled runs the controller (it needs the API server: pods' opt-in).
	Enabled bool `json:"enabled"`
	// Interval between passes; an owner waiting in the hook is served within one.
	Interval Duration `json:"interval"`
	// Window is how far back the observed peak that sets a floor looks.
	Window Duration `json:"window"`
	// Settle is how long usage must stay flat before a cap may be lowered.
	Settle Duration `json:"settle"`
	// MarginPercent of the ceiling is kept above the observed peak.
	MarginPercent int `json:"marginPercent"`
	// MinFloorMiB: no cap is lowered below it.
	MinFloorMiB int `json:"minFloorMiB"`
	// WaitMS is how long an owner's allocation waits in the hook for its memory
	// (written into the limits file; the hook accepts up to 60000).
	WaitMS int `json:"waitMs"`
}

// ContainerdConfig is the monitor's access to containerd.
type ContainerdConfig struct {
	// Socket is containerd's gRPC socket. Empty switches the lookup off;
	// a socket that does not exist when the monitor starts (another
	// runtime: CRI-O, or containerd elsewhere) switches it off with a log
	// line, leaving /proc/<pid>/cgroup paths as the only identity.
	Socket string `json:"socket"`
	// Namespace is the containerd namespace kubelet's containers live in
	// (the CRI plugin's "k8s.io").
	Namespace string `json:"namespace"`
}

// KubernetesConfig is the optional API server access of a node agent.
type KubernetesConfig struct {
	// Kubeconfig is a kubeconfig file; empty uses the in-cluster
	// configuration (service account) when the agent runs in a pod. With
	// neither, Events are off (metrics and log lines still say everything).
	Kubeconfig string `json:"kubeconfig,omitempty"`
}

// DefaultArbiterRealtimePriority is the arbiter's SCHED_FIFO priority by
// default: the lowest band, above every SCHED_OTHER process and below the
// kernel's own real-time threads and any latency-critical RT application.
const DefaultArbiterRealtimePriority = 5

// ArbiterConfig is the compute-share arbiter's control loop.
type ArbiterConfig struct {
	// Enabled: without the arbiter, hooks fall back to the static share
	// (hard: paced at it; guaranteed: unthrottled) and priorities are not
	// enforced.
	Enabled bool `json:"enabled"`
	// Tick is how often tenants' measured time and demand are read and
	// grants written.
	Tick Duration `json:"tick"`
	// HandOverPoll is how soon the loop steps again while a turn waits for
	// the previous holder's work to drain (0 < handOverPoll <= tick). The
	// GPU idles from the end of that work until a step sees it: at ticks
	// only, about half a tick per hand-over (40-100 a second). Equal to the
	// tick: steps at ticks only. Below it the loop wakes up to
	// tick/handOverPoll times as often while a hand-over drains (kernel
	// simulation: 1.5-5.7k steps a second against 1k at ticks only; a step
	// and its wake-up cost 40-75 us of CPU on a loaded 2-core VM).
	HandOverPoll Duration `json:"handOverPoll"`
	// Quantum is how long a tenant holds a GPU before the next in line.
	Quantum Duration `json:"quantum"`
	// IdleAfter: a tenant that neither launched nor waited to launch for
	// this long is idle (killed, stopped, or done) and frees its turn.
	IdleAfter Duration `json:"idleAfter"`
	// PriorityHold keeps lower priorities throttled this long after a
	// higher-priority tenant was last active.
	PriorityHold Duration `json:"priorityHold"`
	// PriorityFloorPercent is the share of the GPU (0..100) a throttled
	// lower-priority tenant keeps.
	PriorityFloorPercent int `json:"priorityFloorPercent"`
	// RealtimePriority runs the control loop on an OS thread of its own
	// under SCHED_FIFO at this priority (1..99; low is enough to run ahead
	// of every ordinary process), or at nice -10 where the kernel refuses
	// it; without CAP_SYS_NICE neither is granted and one log line says so.
	// A late tick is a turn that lasts as long. 0: an ordinary goroutine.
	RealtimePriority int `json:"realtimePriority"`
	// TurnGrace: each grant to a holder with others waiting carries a
	// deadline, the end of its turn as it stands plus this grace, after
	// which the hook stops it by itself until the arbiter writes again (a
	// late arbiter then costs idle GPU time instead of a wrong share).
	// 0: no deadlines.
	TurnGrace Duration `json:"turnGrace"`
	// Process runs the control loop in a process of its own, a re-exec of
	// the monitor (`vgpu-monitor arbiter`) that the monitor starts while it
	// holds the node lease, stops when it loses it, and restarts if it dies:
	// all of that process's threads run at RealtimePriority and it runs
	// without the garbage collector, whose stop-the-world would wait for the
	// monitor's ordinary (on a busy node, starved) threads. false: a
	// goroutine of the monitor, as before.
	Process bool `json:"process"`
	// MemoryLimitMiB bounds the arbiter process's Go memory (a soft limit,
	// debug.SetMemoryLimit): it allocates nothing per step, only when it
	// lists the state directory, so with the collector off this is when it
	// collects, and a leak cannot grow without bound. Only with Process.
	MemoryLimitMiB int `json:"memoryLimitMiB"`
}

// MinArbiterMemoryLimitMiB is the least arbiter.memoryLimitMiB: the Go
// runtime of the arbiter's process itself takes a few MiB.
const MinArbiterMemoryLimitMiB = 16

// MaxArbiterMemoryLimitMiB is the most arbiter.memoryLimitMiB (1 TiB): its
// bytes must fit the int64 the Go runtime takes.
const MaxArbiterMemoryLimitMiB = 1 << 20

// EnforcementConfig is the out-of-band check of the driver's per-process truth.
type EnforcementConfig struct {
	// Policy is "report" (default) or "kill".
	Policy string `json:"policy"`
	// Interval between checks.
	Interval Duration `json:"interval"`
	// Grace is how long a violation must last before it is acted on (a
	// process between creating its context and its first allocation has no
	// slot yet; a container's usage may pass its cap by a context briefly).
	Grace Duration `json:"grace"`
	// ToleranceMiB is added to every cap before comparing it with what the
	// driver says a container holds, and is what a process outside any
	// region may hold (contexts and modules, which the hook does not charge
	// unless the plugin's contextReserveMiB is set; a hooked process holds a
	// context before its first charge claims a slot). Default
	// DefaultToleranceMiB; policy kill refuses less than MinKillToleranceMiB
	// unless AllowLowTolerance is set.
	ToleranceMiB int `json:"toleranceMiB"`
	// AllowLowTolerance lets policy kill run with toleranceMiB below
	// MinKillToleranceMiB. Set it only where contexts never hold memory
	// outside the accounting (the plugin's contextReserveMiB charges them,
	// and every process charges before its context is past the grace), or
	// where killing a process that loads a model is acceptable.
	AllowLowTolerance bool `json:"allowLowTolerance,omitempty"`
	// Events posts a Warning Event on the pod when the in-cluster API
	// configuration is available.
	Events bool `json:"events"`
}

// DefaultMonitor returns the monitor configuration used when nothing is set.
func DefaultMonitor() *MonitorConfig {
	return &MonitorConfig{
		Version:            Version,
		NodeName:           os.Getenv("NODE_NAME"),
		StateDir:           "/var/lib/tessera",
		ProcRoot:           "/proc",
		PodResourcesSocket: "/var/lib/kubelet/pod-resources/kubelet.sock",
		ListenAddress:      ":9394",
		IdentityInterval:   Duration{10 * time.Second},
		ReapInterval:       Duration{time.Second},
		Enforcement: EnforcementConfig{
			Policy:       PolicyReport,
			Interval:     Duration{2 * time.Second},
			Grace:        Duration{30 * time.Second},
			ToleranceMiB: DefaultToleranceMiB,
			Events:       true,
		},
		Health: HealthConfig{Enabled: true, IgnoredXids: append([]uint64(nil), DefaultIgnoredXids...)},
		Log:    LogConfig{Level: "info", Format: "json"},
		Balloon: BalloonConfig{Interval: Duration{200 * time.Millisecond}, Window: Duration{30 * time.Minute},
			Settle: Duration{10 * time.Minute}, MarginPercent: 10, MinFloorMiB: 1024, WaitMS: 3000},
		Containerd: ContainerdConfig{Socket: "/run/containerd/containerd.sock", Namespace: "k8s.io"},
		Arbiter: ArbiterConfig{Enabled: true, Tick: Duration{time.Millisecond}, HandOverPoll: Duration{100 * time.Microsecond},
			Quantum:   Duration{10 * time.Millisecond},
			IdleAfter: Duration{5 * time.Millisecond}, PriorityHold: Duration{100 * time.Millisecond},
			RealtimePriority: DefaultArbiterRealtimePriority, TurnGrace: Duration{2 * time.Millisecond},
			Process: true, MemoryLimitMiB: 32},
	}
}

// LoadMonitor reads path over the defaults; empty returns the defaults.
func LoadMonitor(path string) (*MonitorConfig, error) {
	return loadOver(path, DefaultMonitor(), ParseMonitor)
}

// ParseMonitor decodes YAML into c, keeping c's values for absent fields.
// Unknown fields are errors that name the field.
func ParseMonitor(data []byte, c *MonitorConfig) error {
	return decodeVersioned(data, c)
}

// Validate checks every field and reports all problems, each with its field name.
func (c *MonitorConfig) Validate() error {
	var errs fieldErrors
	bad := errs.add
	errs.checkVersionAndNode(c.Version, c.NodeName)
	for field, p := range map[string]string{"stateDir": c.StateDir, "procRoot": c.ProcRoot, "podResourcesSocket": c.PodResourcesSocket} {
		if !filepath.IsAbs(p) {
			bad(field, "%q is not an absolute path", p)
		}
	}
	if c.Containerd.Socket != "" {
		if !filepath.IsAbs(c.Containerd.Socket) {
			bad("containerd.socket", "%q is not an absolute path", c.Containerd.Socket)
		}
		if c.Containerd.Namespace == "" {
			bad("containerd.namespace", "empty (kubelet's containers are in the CRI plugin's %q)", "k8s.io")
		}
	}
	if _, _, err := net.SplitHostPort(c.ListenAddress); err != nil {
		bad("listenAddress", "%q is not host:port", c.ListenAddress)
	}
	atLeast := func(field string, d, min time.Duration) {
		if d < min {
			bad(field, "%s below %s", d, min)
		}
	}
	atLeast("identityInterval", c.IdentityInterval.Duration, 100*time.Millisecond)
	atLeast("reapInterval", c.ReapInterval.Duration, 10*time.Millisecond)
	atLeast("enforcement.interval", c.Enforcement.Interval.Duration, 10*time.Millisecond)
	atLeast("arbiter.tick", c.Arbiter.Tick.Duration, 100*time.Microsecond)
	atLeast("arbiter.quantum", c.Arbiter.Quantum.Duration, c.Arbiter.Tick.Duration)
	if p := c.Arbiter.HandOverPoll.Duration; p <= 0 || p > c.Arbiter.Tick.Duration {
		bad("arbiter.handOverPoll", "%s outside (0, tick %s]", p, c.Arbiter.Tick.Duration)
	}
	atLeast("arbiter.idleAfter", c.Arbiter.IdleAfter.Duration, c.Arbiter.Tick.Duration)
	if c.Arbiter.PriorityHold.Duration < 0 {
		bad("arbiter.priorityHold", "negative %s", c.Arbiter.PriorityHold.Duration)
	}
	if c.Arbiter.RealtimePriority < 0 || c.Arbiter.RealtimePriority > 99 {
		bad("arbiter.realtimePriority", "%d outside 0..99", c.Arbiter.RealtimePriority)
	}
	if c.Arbiter.Process && c.Arbiter.MemoryLimitMiB < MinArbiterMemoryLimitMiB {
		bad("arbiter.memoryLimitMiB", "%d below %d", c.Arbiter.MemoryLimitMiB, MinArbiterMemoryLimitMiB)
	}
	if c.Arbiter.MemoryLimitMiB > MaxArbiterMemoryLimitMiB {
		bad("arbiter.memoryLimitMiB", "%d above %d", c.Arbiter.MemoryLimitMiB, MaxArbiterMemoryLimitMiB)
	}
	if c.Arbiter.TurnGrace.Duration < 0 {
		bad("arbiter.turnGrace", "negative %s", c.Arbiter.TurnGrace.Duration)
	}
	if c.Arbiter.PriorityFloorPercent < 0 || c.Arbiter.PriorityFloorPercent > 100 {
		bad("arbiter.priorityFloorPercent", "%d outside 0..100", c.Arbiter.PriorityFloorPercent)
	}
	if c.Enforcement.Grace.Duration < 0 {
		bad("enforcement.grace", "negative %s", c.Enforcement.Grace.Duration)
	}
	if c.Enforcement.Policy != PolicyReport && c.Enforcement.Policy != PolicyKill {
		bad("enforcement.policy", "%q (want %q or %q)", c.Enforcement.Policy, PolicyReport, PolicyKill)
	}
	const maxToleranceMiB = 1 << 30 // 1 PiB: past any GPU, and far from overflowing bytes
	if c.Enforcement.ToleranceMiB < 0 || c.Enforcement.ToleranceMiB > maxToleranceMiB {
		bad("enforcement.toleranceMiB", "%d outside 0..%d", c.Enforcement.ToleranceMiB, maxToleranceMiB)
	} else if c.Enforcement.Policy == PolicyKill && c.Enforcement.ToleranceMiB < MinKillToleranceMiB && !c.Enforcement.AllowLowTolerance {
		bad("enforcement.toleranceMiB", "%d is below %d MiB under policy kill: a CUDA context holds more before its first charge, so legitimate processes would be killed (raise it, or set enforcement.allowLowTolerance: true to accept that)",
			c.Enforcement.ToleranceMiB, MinKillToleranceMiB)
	}
	c.Health.check(&errs)
	c.Log.check(&errs)
	c.Balloon.check(&errs)
	return errors.Join(errs...)
}

func (b *BalloonConfig) check(errs *fieldErrors) {
	bad := errs.add
	if b.Interval.Duration < 10*time.Millisecond {
		bad("balloon.interval", "%s below 10ms", b.Interval.Duration)
	}
	if b.Window.Duration <= 0 {
		bad("balloon.window", "must be positive")
	}
	if b.Settle.Duration <= 0 || b.Settle.Duration > b.Window.Duration {
		bad("balloon.settle", "%s must be positive and at most balloon.window", b.Settle.Duration)
	}
	if b.MarginPercent < 0 || b.MarginPercent > 99 {
		bad("balloon.marginPercent", "%d outside 0..99", b.MarginPercent)
	}
	if b.MinFloorMiB < 0 || b.MinFloorMiB > 1<<30 {
		bad("balloon.minFloorMiB", "%d outside 0..%d", b.MinFloorMiB, 1<<30)
	}
	if b.WaitMS < 0 || b.WaitMS > 60000 {
		bad("balloon.waitMs", "%d outside 0..60000 (the hook's limit)", b.WaitMS)
	}
}
