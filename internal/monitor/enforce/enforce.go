// Package enforce is the node's out-of-band check on the cooperative hook. The
// hook only charges what passes through it; a container can strip LD_PRELOAD,
// link CUDA statically, or write its own region. The driver cannot be fooled
// that way: NVML lists every process with memory on a GPU and what it holds.
// The enforcer compares the two and acts on the difference:
//
//   - no_region: a process on a tessera-managed GPU that no region accounts
//     for (not in any slot, not in the cgroup of a process that is) and that
//     holds more than the tolerance (a hooked process holds a context before
//     its first charge claims a slot);
//   - over_cap: a container whose processes, summed as the driver counts
//     them, hold more than its cap (plus a tolerance) on a GPU.
//
// A violation must last the grace period. Then the policy applies: report
// (counter, log, Event on the pod when an API client is set) or kill
// (SIGKILL through a pidfd, after checking the start time, so a reused pid is
// never hit). Kill ends only processes whose cgroup places them in a
// Kubernetes pod: a host daemon with memory on a managed GPU (Xorg, DCGM,
// nvidia-persistenced) is reported, never killed.
package enforce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/hostproc"
	"github.com/tessera-gpu/tessera/internal/monitor/accounting"
	"github.com/tessera-gpu/tessera/internal/monitor/gpus"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
)

// Violation kinds (the "kind" label of the detection counter).
const (
	KindNoRegion = "no_region"
	KindOverCap  = "over_cap"
	// KindContested: a process the slots of containers in different pods
	// name, holding more than the tolerance. One slot is forged; which is
	// unknown, so it is reported and never killed.
	KindContested = "contested"
)

// Reasons a process the kill policy names is not killed.
const (
	// SpareNotInPod: its cgroup is not in the kubepods hierarchy (a host
	// daemon, or a path this monitor cannot place).
	SpareNotInPod = "not_in_pod"
	// SpareNotInProc: not in this monitor's /proc (another pid namespace).
	SpareNotInProc = "not_in_proc"
)

// GPUs is what the enforcer needs of NVML (gpus.Node).
type GPUs interface {
	Devices() []gpus.Device
	Processes(gpus.Device) ([]gpus.Process, error)
}

// Violation is one finding.
type Violation struct {
	Kind      string
	GPU       string
	Key       string         // the state directory (over_cap)
	Owner     identity.Owner // when PodResources names it
	Processes []hostproc.Process
	// Bypassing are the processes no slot accounts for (over_cap: those
	// of the container outside the hook). The kill policy ends these, or
	// all Processes when the hook accounts for every one (a forged region).
	Bypassing []hostproc.Process
	UsedBytes uint64   // as the driver counts it
	CapBytes  uint64   // over_cap: the cap
	Claimants []string // contested: the keys whose slots name the process
}

func (v Violation) id() string {
	if v.Kind == KindOverCap {
		return v.Kind + "/" + v.Key + "/" + v.GPU
	}
	return fmt.Sprintf("%s/%d/%d/%s", v.Kind, v.Processes[0].PID, v.Processes[0].StartTime, v.GPU)
}

func (v Violation) String() string {
	pids := make([]string, len(v.Processes))
	for i, p := range v.Processes {
		pids[i] = strconv.FormatUint(uint64(p.PID), 10)
	}
	if v.Kind == KindContested {
		return fmt.Sprintf("process %s (cgroup %s) holds %d bytes on tessera GPU %s and is named by the slots of containers in different pods (%s); not counted against either",
			strings.Join(pids, ","), v.Processes[0].Cgroup, v.UsedBytes, v.GPU, strings.Join(v.Claimants, ","))
	}
	if v.Kind == KindOverCap {
		return fmt.Sprintf("container %s holds %d bytes on GPU %s as the driver counts it, over its cap of %d (processes %s)",
			v.Owner, v.UsedBytes, v.GPU, v.CapBytes, strings.Join(pids, ","))
	}
	return fmt.Sprintf("process %s (cgroup %s) holds %d bytes on tessera GPU %s without a region (hook bypassed)",
		strings.Join(pids, ","), v.Processes[0].Cgroup, v.UsedBytes, v.GPU)
}

// Enforcer runs the check.
type Enforcer struct {
	Config   configv1.EnforcementConfig
	ProcRoot string
	Reader   *accounting.Reader
	GPUs     GPUs
	Owner    func(key string) (identity.Owner, bool)
	Log      *slog.Logger
	// OnDetect sees each violation once, when it has lasted the grace period.
	OnDetect func(Violation)
	// OnKill sees each process killed.
	OnKill func(hostproc.Process)
	// OnSpare sees each process the kill policy named but did not kill,
	// with the reason (SpareNotInPod, SpareNotInProc).
	OnSpare func(p hostproc.Process, reason string)
	// Killable says whether a process may be killed; nil is InPod of its
	// cgroup. Tests whose processes stand for a pod's set it.
	Killable func(hostproc.Process) bool
	// Event posts a Warning Event on a pod (nil: none).
	Event func(ctx context.Context, owner identity.Owner, reason, message string)
	// ProcessOwner names the Kubernetes container of a host process from
	// the runtime (containerd's task PIDs and CRI labels); nil or not
	// found: the process is judged by its cgroup path alone.
	ProcessOwner func(ctx context.Context, pid uint32) (identity.Owner, bool)
	// Active says whether this monitor is the node's acting one (the
	// node lock: during a rollout with surge two run at once, and only
	// one may report, post Events and kill). Nil: always.
	Active func() bool

	since map[string]time.Time // violation id → first seen
	acted map[string]bool
}

// Run checks every interval until ctx ends.
func (e *Enforcer) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if e.Active != nil && !e.Active() {
			// Standby: the acting monitor checks. Forget what was
			// seen, so a takeover starts the grace period afresh
			// instead of acting at once on stale sightings.
			e.since, e.acted = nil, nil
		} else if err := e.Once(ctx); err != nil {
			e.Log.Warn("enforcement check failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once checks the node and applies the policy to violations past their grace.
func (e *Enforcer) Once(ctx context.Context) error {
	found, err := e.Check() // with an error, still the violations of the GPUs it could read
	if e.since == nil {
		e.since, e.acted = map[string]time.Time{}, map[string]bool{}
	}
	now := time.Now()
	seen := map[string]bool{}
	for _, v := range found {
		id := v.id()
		seen[id] = true
		first, ok := e.since[id]
		if !ok {
			e.since[id] = now
			first = now
		}
		if now.Sub(first) < e.Config.Grace.Duration || e.acted[id] {
			continue
		}
		e.acted[id] = true
		e.act(ctx, v)
	}
	for id := range e.since {
		if !seen[id] {
			delete(e.since, id)
			delete(e.acted, id)
		}
	}
	return err
}

// Event reasons, one per kind of finding and one for a kill.
const (
	ReasonNoRegion  = "TesseraGPUMemoryWithoutRegion"
	ReasonOverCap   = "TesseraGPUMemoryOverCap"
	ReasonContested = "TesseraGPUProcessContested"
	ReasonKilled    = "TesseraGPUProcessKilled"
)

// EventReason is the Event reason of a violation kind.
func EventReason(kind string) string {
	switch kind {
	case KindNoRegion:
		return ReasonNoRegion
	case KindOverCap:
		return ReasonOverCap
	default:
		return ReasonContested
	}
}

// ownerOf names the container of a violation: PodResources' owner of the
// state directory (over_cap), else the runtime's owner of its first process.
func (e *Enforcer) ownerOf(ctx context.Context, v Violation) identity.Owner {
	if v.Owner != (identity.Owner{}) || e.ProcessOwner == nil || len(v.Processes) == 0 {
		return v.Owner
	}
	o, _ := e.ProcessOwner(ctx, v.Processes[0].PID)
	return o
}

func (e *Enforcer) act(ctx context.Context, v Violation) {
	v.Owner = e.ownerOf(ctx, v)
	if e.OnDetect != nil {
		e.OnDetect(v)
	}
	e.Log.Warn("GPU memory used outside the accounting", "kind", v.Kind, "gpu", v.GPU, "policy", e.Config.Policy,
		"container", v.Owner.String(), "detail", v.String())
	if e.Event != nil && v.Owner != (identity.Owner{}) {
		e.Event(ctx, v.Owner, EventReason(v.Kind), v.String()+"; policy "+e.Config.Policy)
	}
	if e.Config.Policy != configv1.PolicyKill || v.Kind == KindContested {
		return // a contested process may be a victim of a forged slot
	}
	victims := v.Bypassing
	if len(victims) == 0 {
		victims = v.Processes
	}
	for _, p := range victims {
		if p.StartTime == 0 {
			// Not in our /proc (another pid namespace?): its identity
			// cannot be checked, so it is not killed.
			e.Log.Warn("not killing a process this monitor cannot see in /proc", "pid", p.PID)
			e.spare(p, SpareNotInProc)
			continue
		}
		owner, known := e.runtimeOwner(ctx, p)
		if !known && !e.killable(p) {
			// A host daemon holding memory on a shared GPU is the
			// operator's to stop; killing Xorg or DCGM is no remedy.
			e.Log.Warn("not killing a process outside any Kubernetes pod", "pid", p.PID, "cgroup", p.Cgroup, "kind", v.Kind)
			e.spare(p, SpareNotInPod)
			continue
		}
		if err := Kill(e.ProcRoot, p); err != nil {
			e.Log.Warn("kill failed", "pid", p.PID, "err", err)
			continue
		}
		if owner == (identity.Owner{}) {
			owner = v.Owner
		}
		e.Log.Warn("killed a process that used GPU memory outside its accounting", "pid", p.PID, "kind", v.Kind, "container", owner.String())
		if e.OnKill != nil {
			e.OnKill(p)
		}
		if e.Event != nil && owner != (identity.Owner{}) {
			e.Event(ctx, owner, ReasonKilled, fmt.Sprintf("process %d killed (SIGKILL) by tessera's node monitor: %s", p.PID, v.Kind))
		}
	}
}

func (e *Enforcer) spare(p hostproc.Process, reason string) {
	if e.OnSpare != nil {
		e.OnSpare(p, reason)
	}
}

// runtimeOwner is the container the runtime says p runs in. A process
// containerd lists in a container that the CRI labelled for a pod is a
// Kubernetes container's, whatever its cgroup path looks like.
func (e *Enforcer) runtimeOwner(ctx context.Context, p hostproc.Process) (identity.Owner, bool) {
	if e.ProcessOwner == nil || e.Killable != nil {
		return identity.Owner{}, false
	}
	return e.ProcessOwner(ctx, p.PID)
}

func (e *Enforcer) killable(p hostproc.Process) bool {
	if e.Killable != nil {
		return e.Killable(p)
	}
	return InPod(p.Cgroup)
}

// InPod says whether a cgroup path (as /proc/<pid>/cgroup shows it) lies in
// a pod of kubelet's kubepods hierarchy, for both cgroup drivers and cgroup
// v1 and v2:
//
//   - cgroupfs: …/kubepods[/besteffort|/burstable]/pod<uid>/…
//   - systemd: …/kubepods[-qos]-pod<uid>.slice/… (also with a kubelet
//     --cgroup-root prefix, e.g. kubelet-kubepods-…-pod<uid>.slice). A
//     systemd slice names all its ancestors, so it is recognised even when
//     the path climbs out of a private cgroup namespace (/../../kubepods-…).
//
// Anything else (the root, system.slice, user.slice, a QoS level without a
// pod, a cgroupfs path whose kubepods component is hidden) is not a pod.
func InPod(cgroup string) bool {
	parts := strings.Split(strings.Trim(cgroup, "/"), "/")
	for i, c := range parts {
		if isPodSlice(c) {
			return true
		}
		if c != "kubepods" {
			continue
		}
		rest := parts[i+1:]
		if len(rest) > 0 && (rest[0] == "besteffort" || rest[0] == "burstable") {
			rest = rest[1:]
		}
		return len(rest) > 0 && len(rest[0]) > len("pod") && strings.HasPrefix(rest[0], "pod")
	}
	return false
}

// isPodSlice matches systemd's pod slices: [prefix-]kubepods[-qos]-pod<uid>.slice.
func isPodSlice(name string) bool {
	name, ok := strings.CutSuffix(name, ".slice")
	if !ok {
		return false
	}
	i := strings.LastIndex(name, "-pod")
	if i < 0 || i+len("-pod") == len(name) {
		return false
	}
	for _, field := range strings.Split(name[:i], "-") {
		if field == "kubepods" {
			return true
		}
	}
	return false
}

// Check compares the driver's processes with the regions.
func (e *Enforcer) Check() ([]Violation, error) {
	tab, err := hostproc.Scan(e.ProcRoot)
	if err != nil {
		return nil, err
	}
	allocs, err := e.Reader.ReadAll()
	if err != nil {
		return nil, err
	}
	own, _ := hostproc.Read(e.ProcRoot, uint32(os.Getpid()))
	acc := newAttribution(tab, allocs, own.Cgroup)
	var out []Violation
	var errs []error
	for _, d := range e.GPUs.Devices() {
		if !acc.managed[d.UUID] {
			continue // not a GPU tessera shares: whatever runs there is not ours to judge
		}
		procs, err := e.GPUs.Processes(d)
		if err != nil {
			// One lost GPU must not switch the others' checks off.
			errs = append(errs, err)
			continue
		}
		usage := map[string]*Violation{}
		tolerance := uint64(e.Config.ToleranceMiB) << 20
		for _, p := range procs {
			hp, known := tab.Get(p.PID)
			if !known {
				hp = hostproc.Process{PID: p.PID}
			}
			if keys := acc.contested[p.PID]; len(keys) > 0 {
				// Slots of two regions claim it. Within one pod the
				// pod wrote both: it counts against each container.
				// Across pods one slot may be forged to pull another
				// tenant's process into an account: report, never kill.
				if e.samePod(keys) {
					for _, key := range keys {
						v := usage[key]
						if v == nil {
							v = &Violation{Kind: KindOverCap, GPU: d.UUID, Key: key}
							usage[key] = v
						}
						v.UsedBytes += p.UsedBytes
						v.Processes = append(v.Processes, hp)
					}
				} else if p.UsedBytes > tolerance {
					out = append(out, Violation{Kind: KindContested, GPU: d.UUID, Processes: []hostproc.Process{hp},
						UsedBytes: p.UsedBytes, Claimants: keys})
				}
				continue
			}
			key, hooked := acc.hooked[p.PID]
			if !hooked && known && acc.linkable(hp.Cgroup) {
				key = acc.byCgroup[hp.Cgroup]
			}
			if key == "" {
				if p.UsedBytes <= tolerance {
					continue // a context's worth: a hooked process before its first charge
				}
				out = append(out, Violation{Kind: KindNoRegion, GPU: d.UUID, Processes: []hostproc.Process{hp},
					Bypassing: []hostproc.Process{hp}, UsedBytes: p.UsedBytes})
				continue
			}
			v := usage[key]
			if v == nil {
				v = &Violation{Kind: KindOverCap, GPU: d.UUID, Key: key}
				usage[key] = v
			}
			v.UsedBytes += p.UsedBytes
			v.Processes = append(v.Processes, hp)
			if !hooked {
				v.Bypassing = append(v.Bypassing, hp)
			}
		}
		out = append(out, e.overCap(d.UUID, usage, acc)...)
	}
	return out, errors.Join(errs...)
}

// samePod says whether every key has a known owner and all are in one pod.
func (e *Enforcer) samePod(keys []string) bool {
	if e.Owner == nil {
		return false
	}
	var pod identity.Owner
	for i, key := range keys {
		o, ok := e.Owner(key)
		if !ok {
			return false
		}
		o.Container = ""
		if i > 0 && o != pod {
			return false
		}
		pod = o
	}
	return true
}

func (e *Enforcer) overCap(uuid string, usage map[string]*Violation, acc *attribution) []Violation {
	var out []Violation
	keys := make([]string, 0, len(usage))
	for k := range usage {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tolerance := uint64(e.Config.ToleranceMiB) << 20
	for _, key := range keys {
		v := usage[key]
		limit := acc.caps[key][uuid]
		if limit == 0 || v.UsedBytes <= limit || v.UsedBytes-limit <= tolerance { // no cap+tolerance: it could wrap
			continue
		}
		v.CapBytes = limit
		if e.Owner != nil {
			v.Owner, _ = e.Owner(key)
		}
		out = append(out, *v)
	}
	return out
}

// attribution links host processes to the state directories that account for them.
type attribution struct {
	hooked    map[uint32]string            // host pid → key of the region with its slot
	contested map[uint32][]string          // host pids with slots in two regions → those keys, sorted
	byCgroup  map[string]string            // cgroup of a hooked process → its key
	caps      map[string]map[string]uint64 // key → GPU → cap
	managed   map[string]bool              // GPUs some allocation names
	ownGroup  string
}

func newAttribution(tab *hostproc.Table, allocs []accounting.Allocation, ownCgroup string) *attribution {
	a := &attribution{hooked: map[uint32]string{}, contested: map[uint32][]string{}, byCgroup: map[string]string{},
		caps: map[string]map[string]uint64{}, managed: map[string]bool{}, ownGroup: ownCgroup}
	claims := map[uint32]map[string]bool{} // host pid → keys whose slots match it
	for _, al := range allocs {
		for _, g := range al.GPUs {
			a.managed[g.UUID] = true
		}
		if al.Entry.Kind != "mem" {
			continue
		}
		a.caps[al.Entry.Key] = map[string]uint64{}
		for _, g := range al.GPUs {
			a.caps[al.Entry.Key][g.UUID] = g.MemLimitBytes
		}
		for _, slot := range al.Procs {
			if slot.StartTime == 0 {
				// A claim in progress names no process: matched
				// against any start time it would capture every
				// process with that pid in every pid namespace.
				// Its owner is judged by cgroup until the claim ends.
				continue
			}
			// Pids are per namespace: one slot can match processes of
			// several containers (the same pid and start tick). All are
			// claimed; a process claimed twice is contested below.
			for _, hp := range tab.Match(slot.PID, slot.StartTime) {
				if claims[hp.PID] == nil {
					claims[hp.PID] = map[string]bool{}
				}
				claims[hp.PID][al.Entry.Key] = true
			}
		}
	}
	groups := map[string]map[string]bool{} // cgroup → keys of its uncontested hooked processes
	for pid, keys := range claims {
		if len(keys) > 1 {
			for key := range keys {
				a.contested[pid] = append(a.contested[pid], key)
			}
			sort.Strings(a.contested[pid])
			continue
		}
		for key := range keys {
			a.hooked[pid] = key
			if hp, ok := tab.Get(pid); ok && a.linkable(hp.Cgroup) {
				if groups[hp.Cgroup] == nil {
					groups[hp.Cgroup] = map[string]bool{}
				}
				groups[hp.Cgroup][key] = true
			}
		}
	}
	for cg, keys := range groups {
		if len(keys) == 1 { // a cgroup two regions claim stands for neither
			for key := range keys {
				a.byCgroup[cg] = key
			}
		}
	}
	return a
}

// linkable says whether a cgroup can stand for one container: not the root,
// not unknown, and not the monitor's own (which is no tenant's).
func (a *attribution) linkable(cgroup string) bool {
	return cgroup != "" && cgroup != "/" && cgroup != a.ownGroup
}

// Kill sends SIGKILL to p through a pidfd, after checking through that pidfd's
// process that it is still the one seen (same start time): a pid reused since
// the check is never signalled.
func Kill(procRoot string, p hostproc.Process) error {
	fd, err := unix.PidfdOpen(int(p.PID), 0)
	if err != nil {
		return fmt.Errorf("pidfd %d: %w", p.PID, err)
	}
	defer unix.Close(fd)
	now, err := hostproc.Read(procRoot, p.PID)
	if err != nil {
		return fmt.Errorf("pid %d: %w", p.PID, err)
	}
	if p.StartTime != 0 && now.StartTime != p.StartTime {
		return fmt.Errorf("pid %d was reused (start %d, seen %d)", p.PID, now.StartTime, p.StartTime)
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		return fmt.Errorf("SIGKILL %d: %w", p.PID, err)
	}
	return nil
}
