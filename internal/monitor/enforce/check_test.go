package enforce

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/hostproc"
	"github.com/tessera-gpu/tessera/internal/monitor/accounting"
	"github.com/tessera-gpu/tessera/internal/monitor/gpus"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/region/regiontest"
	"github.com/tessera-gpu/tessera/internal/statedir"
)

// fakeProc writes /proc/<pid>/{stat,status,cgroup} under root.
func fakeProc(t *testing.T, root string, p hostproc.Process) {
	dir := filepath.Join(root, fmt.Sprint(p.PID))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (cuda app) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", p.PID, p.StartTime)
	os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644)
	os.WriteFile(filepath.Join(dir, "status"), []byte(fmt.Sprintf("Name:\tx\nNSpid:\t%d\t%d\n", p.PID, p.NSPID)), 0o644)
	os.WriteFile(filepath.Join(dir, "cgroup"), []byte("0::"+p.Cgroup+"\n"), 0o644)
}

type fakeGPUs map[string][]gpus.Process

func (f fakeGPUs) Devices() []gpus.Device {
	var out []gpus.Device
	for uuid := range f {
		out = append(out, gpus.Device{UUID: uuid})
	}
	return out
}
func (f fakeGPUs) Processes(d gpus.Device) ([]gpus.Process, error) { return f[d.UUID], nil }

// An unhooked process inside a tessera container is charged to its container
// by cgroup and is the one the kill policy names; a process of a container
// with no region at all on the same GPU is a no_region violation; a GPU no
// allocation names is not judged.
func TestCheckAttributesByCgroupAndNamesTheBypassingProcess(t *testing.T) {
	const MiB = 1 << 20
	root, state := t.TempDir(), t.TempDir()
	hooked := hostproc.Process{PID: 100, NSPID: 1, StartTime: 50, Cgroup: "/pod-a/c"}
	sibling := hostproc.Process{PID: 101, NSPID: 2, StartTime: 60, Cgroup: "/pod-a/c"}
	stranger := hostproc.Process{PID: 300, NSPID: 1, StartTime: 70, Cgroup: "/pod-x/c"}
	elsewhere := hostproc.Process{PID: 400, NSPID: 9, StartTime: 80, Cgroup: "/pod-y/c"}
	for _, p := range []hostproc.Process{hooked, sibling, stranger, elsewhere} {
		fakeProc(t, root, p)
	}
	dir := filepath.Join(statedir.Containers(state), "mem-000000000000000a")
	os.MkdirAll(dir, 0o755)
	if err := region.WriteLimits(filepath.Join(dir, statedir.LimitsFile), []region.DeviceLimit{{UUID: "GPU-a", MemLimitBytes: 100 * MiB}}); err != nil {
		t.Fatal(err)
	}
	reg := filepath.Join(dir, statedir.RegionFile)
	region.CreateRegion(reg)
	regiontest.Write(reg, regiontest.Contents{Slots: []regiontest.Slot{{PID: 1, StartTime: 50, UsedBytes: map[int]uint64{0: 60 * MiB}}}})

	e := &Enforcer{ProcRoot: root, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Reader: &accounting.Reader{StateDir: state, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		GPUs: fakeGPUs{
			"GPU-a": {{PID: 100, UsedBytes: 60 * MiB}, {PID: 101, UsedBytes: 60 * MiB}, {PID: 300, UsedBytes: 10 * MiB}},
			"GPU-b": {{PID: 400, UsedBytes: 50 * MiB}}, // no tessera share on it
		}}
	vs, err := e.Check()
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 2 {
		t.Fatalf("violations %+v, want over_cap and no_region", vs)
	}
	for _, v := range vs {
		switch v.Kind {
		case KindOverCap:
			if v.Key != "mem-000000000000000a" || v.UsedBytes != 120*MiB || v.CapBytes != 100*MiB ||
				len(v.Processes) != 2 || len(v.Bypassing) != 1 || v.Bypassing[0].PID != 101 {
				t.Errorf("over_cap %+v", v)
			}
		case KindNoRegion:
			if v.GPU != "GPU-a" || len(v.Bypassing) != 1 || v.Bypassing[0].PID != 300 || v.Bypassing[0].StartTime != 70 {
				t.Errorf("no_region %+v", v)
			}
		}
	}
	// Within tolerance nothing is flagged.
	e.Config.ToleranceMiB = 20
	if vs, _ := e.Check(); len(vs) != 0 {
		t.Errorf("within a 20 MiB tolerance: %+v", vs)
	}
}

// A container inside its cap is never over it, whatever the tolerance: cap
// plus tolerance must not wrap around.
func TestOverCapToleranceDoesNotWrap(t *testing.T) {
	e := &Enforcer{Config: configv1.EnforcementConfig{ToleranceMiB: 1<<44 - 1}}
	usage := map[string]*Violation{"mem-a": {Kind: KindOverCap, GPU: "GPU-a", Key: "mem-a", UsedBytes: 99<<20 + 1<<19}}
	acc := &attribution{caps: map[string]map[string]uint64{"mem-a": {"GPU-a": 100 << 20}}}
	if vs := e.overCap("GPU-a", usage, acc); len(vs) != 0 {
		t.Fatalf("99.5 MiB of a 100 MiB cap judged over it: %+v", vs)
	}
}

// writeMem makes a mem state directory with one GPU capped at capMiB and the
// given slots.
func writeMem(t *testing.T, state, key string, capMiB uint64, slots ...regiontest.Slot) {
	dir := filepath.Join(statedir.Containers(state), key)
	os.MkdirAll(dir, 0o755)
	if err := region.WriteLimits(filepath.Join(dir, statedir.LimitsFile), []region.DeviceLimit{{UUID: "GPU-a", MemLimitBytes: capMiB << 20}}); err != nil {
		t.Fatal(err)
	}
	reg := filepath.Join(dir, statedir.RegionFile)
	region.CreateRegion(reg)
	if err := regiontest.Write(reg, regiontest.Contents{Slots: slots}); err != nil {
		t.Fatal(err)
	}
}

// A process that two regions' slots name is charged to neither (one slot may
// be forged by another tenant). But a pod with two capped containers writes
// both regions itself: naming its own bypassing process in both must not
// exempt it from enforcement. Two claimants in one pod: the process counts
// against each of them. Claimants in different pods: it is reported
// (contested), never killed.
func TestProcessClaimedByTwoRegionsIsStillJudged(t *testing.T) {
	const MiB = 1 << 20
	root, state := t.TempDir(), t.TempDir()
	p := hostproc.Process{PID: 100, NSPID: 1, StartTime: 50, Cgroup: "/pod-a/c1"}
	fakeProc(t, root, p)
	slot := regiontest.Slot{PID: 1, StartTime: 50, UsedBytes: map[int]uint64{0: MiB}} // claims 1 MiB, holds 500
	writeMem(t, state, "mem-000000000000000a", 100, slot)
	writeMem(t, state, "mem-000000000000000b", 100, slot)
	owners := map[string]identity.Owner{
		"mem-000000000000000a": {Namespace: "t", Pod: "p", Container: "c1"},
		"mem-000000000000000b": {Namespace: "t", Pod: "p", Container: "c2"},
	}
	e := &Enforcer{ProcRoot: root, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Reader: &accounting.Reader{StateDir: state, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		GPUs:   fakeGPUs{"GPU-a": {{PID: 100, UsedBytes: 500 * MiB}}},
		Owner:  func(k string) (identity.Owner, bool) { o, ok := owners[k]; return o, ok }}
	vs, err := e.Check()
	if err != nil {
		t.Fatal(err)
	}
	over := 0
	for _, v := range vs {
		if v.Kind == KindOverCap && len(v.Processes) == 1 && v.Processes[0].PID == 100 {
			over++
		}
	}
	if over != 2 {
		t.Errorf("one pod's own process, named by both its regions: violations %+v, want over_cap for each container", vs)
	}

	owners["mem-000000000000000b"] = identity.Owner{Namespace: "u", Pod: "q", Container: "c"}
	vs, err = e.Check()
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 || vs[0].Kind != KindContested || vs[0].Processes[0].PID != 100 || vs[0].UsedBytes != 500*MiB {
		t.Fatalf("claimed by two pods: violations %+v, want one contested", vs)
	}
	killed := 0
	e.Config.Policy = configv1.PolicyKill
	e.OnKill = func(hostproc.Process) { killed++ }
	e.act(t.Context(), vs[0])
	if killed != 0 {
		t.Error("a contested process was killed")
	}
}

type failingGPU struct{ fakeGPUs }

func (f failingGPU) Devices() []gpus.Device {
	return append(f.fakeGPUs.Devices(), gpus.Device{UUID: "GPU-lost"})
}

func (f failingGPU) Processes(d gpus.Device) ([]gpus.Process, error) {
	if d.UUID == "GPU-lost" {
		return nil, errors.New("GPU is lost")
	}
	return f.fakeGPUs.Processes(d)
}

// A GPU whose process list cannot be read (fallen off the bus: Xid 79) must
// not switch enforcement off on the node's other GPUs.
func TestOneUnreadableGPUDoesNotStopTheCheckOfTheOthers(t *testing.T) {
	const MiB = 1 << 20
	root, state := t.TempDir(), t.TempDir()
	stranger := hostproc.Process{PID: 300, NSPID: 1, StartTime: 70, Cgroup: "/pod-x/c"}
	fakeProc(t, root, stranger)
	writeMem(t, state, "mem-000000000000000a", 100)
	dir := filepath.Join(statedir.Containers(state), "mem-000000000000000c")
	os.MkdirAll(dir, 0o755)
	region.WriteLimits(filepath.Join(dir, statedir.LimitsFile), []region.DeviceLimit{{UUID: "GPU-lost", MemLimitBytes: MiB}})
	region.CreateRegion(filepath.Join(dir, statedir.RegionFile))
	e := &Enforcer{ProcRoot: root, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Reader: &accounting.Reader{StateDir: state, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		GPUs:   failingGPU{fakeGPUs{"GPU-a": {{PID: 300, UsedBytes: 10 * MiB}}}}}
	vs, err := e.Check()
	if len(vs) != 1 || vs[0].Kind != KindNoRegion || vs[0].GPU != "GPU-a" {
		t.Fatalf("violations %+v (err %v); want the no_region on GPU-a", vs, err)
	}
}
