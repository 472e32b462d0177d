package fakegpu_test

import (
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// openNVML loads the simulated libnvidia-ml.so.1 through NVIDIA's own Go binding,
// in this process, configured like node n.
func openNVML(t *testing.T, n *node) nvml.Interface {
	t.Helper()
	t.Setenv("FAKEGPU_STATE", n.state)
	t.Setenv("FAKEGPU_DEVICES", n.devices)
	t.Setenv("FAKEGPU_CONFIG", "")
	t.Setenv("FAKEGPU_UUID_SEED", "")
	lib := nvml.New(nvml.WithLibraryPath(filepath.Join(libDir(t), "libnvidia-ml.so.1")))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("nvml.Init: %v", ret)
	}
	t.Cleanup(func() { lib.Shutdown() })
	return lib
}

func handle(t *testing.T, lib nvml.Interface, i int) nvml.Device {
	t.Helper()
	d, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetHandleByIndex(%d): %v", i, ret)
	}
	return d
}

func TestGoNVMLIdentity(t *testing.T) {
	lib := openNVML(t, newNode(t))
	if v, ret := lib.SystemGetDriverVersion(); ret != nvml.SUCCESS || v != fakegpu.DriverVersion {
		t.Errorf("driver version %q, %v", v, ret)
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret != nvml.SUCCESS || v != fakegpu.CUDAVersion {
		t.Errorf("CUDA driver version %d, %v", v, ret)
	}
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS || count != 2 {
		t.Fatalf("DeviceGetCount = %d, %v", count, ret)
	}
	wantName := []string{"Test GPU", "Other"}
	wantMem := []uint64{1024 * MiB, 2048 * MiB}
	for i := 0; i < count; i++ {
		d := handle(t, lib, i)
		uuid, _ := d.GetUUID()
		name, _ := d.GetName()
		idx, _ := d.GetIndex()
		minor, _ := d.GetMinorNumber()
		mem, _ := d.GetMemoryInfo()
		mem2, ret2 := d.GetMemoryInfo_v2()
		pci, _ := d.GetPciInfo()
		cur, pend, retMig := d.GetMigMode()
		major, minorCC, _ := d.GetCudaComputeCapability()
		multi, _ := d.GetMultiGpuBoard()
		busID := cString(pci.BusId[:])
		if uuid != fakegpu.UUID("", i) || name != wantName[i] || idx != i || minor != i {
			t.Errorf("device %d: uuid %s name %q index %d minor %d", i, uuid, name, idx, minor)
		}
		if mem.Total != wantMem[i] || mem.Used != 0 || mem.Free != wantMem[i] {
			t.Errorf("device %d: memory %+v", i, mem)
		}
		if ret2 != nvml.SUCCESS || mem2.Total != wantMem[i] || mem2.Free != wantMem[i] {
			t.Errorf("device %d: memory v2 %+v, %v", i, mem2, ret2)
		}
		if busID != fakegpu.BusID(i) || pci.PciDeviceId != fakegpu.PCIDeviceID {
			t.Errorf("device %d: PCI %s %#x", i, busID, pci.PciDeviceId)
		}
		if retMig != nvml.SUCCESS || cur != nvml.DEVICE_MIG_DISABLE || pend != nvml.DEVICE_MIG_DISABLE {
			t.Errorf("device %d: MIG %d/%d, %v", i, cur, pend, retMig)
		}
		if major != 9 || minorCC != 0 || multi != 0 {
			t.Errorf("device %d: CC %d.%d multi-GPU board %d", i, major, minorCC, multi)
		}
		byUUID, ret := lib.DeviceGetHandleByUUID(uuid)
		if idx2, _ := byUUID.GetIndex(); ret != nvml.SUCCESS || idx2 != i {
			t.Errorf("DeviceGetHandleByUUID(%s) = index %d, %v", uuid, idx2, ret)
		}
		byBus, ret := lib.DeviceGetHandleByPciBusId(busID)
		if idx2, _ := byBus.GetIndex(); ret != nvml.SUCCESS || idx2 != i {
			t.Errorf("DeviceGetHandleByPciBusId(%s) = index %d, %v", busID, idx2, ret)
		}
	}
	if _, ret := lib.DeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000"); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("unknown UUID: %v, want ERROR_NOT_FOUND", ret)
	}
	if _, ret := lib.DeviceGetHandleByIndex(2); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("index 2: %v, want ERROR_INVALID_ARGUMENT", ret)
	}
}

func TestGoNVMLInitRefcountAndBadConfig(t *testing.T) {
	n := newNode(t)
	lib := openNVML(t, n)
	if ret := lib.Init(); ret != nvml.SUCCESS { // nested
		t.Fatal(ret)
	}
	if ret := lib.Shutdown(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := lib.DeviceGetCount(); ret != nvml.SUCCESS {
		t.Errorf("after one of two shutdowns: %v", ret)
	}
	lib.Shutdown()
	bad := nvml.New(nvml.WithLibraryPath(filepath.Join(libDir(t), "libnvidia-ml.so.1")))
	t.Setenv("FAKEGPU_DEVICES", "H200:many:132")
	if ret := bad.Init(); ret != nvml.ERROR_UNKNOWN {
		t.Errorf("Init with a malformed FAKEGPU_DEVICES: %v, want ERROR_UNKNOWN", ret)
		bad.Shutdown()
	}
}

type procMem struct {
	pid  int
	used uint64
}

func runningOn(t *testing.T, d nvml.Device) []procMem {
	t.Helper()
	infos, ret := d.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		t.Fatalf("GetComputeRunningProcesses: %v", ret)
	}
	var out []procMem
	for _, p := range infos {
		out = append(out, procMem{int(p.Pid), p.UsedGpuMemory})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}

// Two processes' memory shows in NVML in a third (this test), and a SIGKILLed
// one disappears with its memory.
func TestGoNVMLSeesOtherProcesses(t *testing.T) {
	n := newNode(t)
	lib := openNVML(t, n)
	d0 := handle(t, lib, 0)
	a, r := n.hold(0, 100*MiB)
	mustAlloc(t, r, "0")
	b, r := n.hold(0, 200*MiB)
	mustAlloc(t, r, "0")
	mem, _ := d0.GetMemoryInfo()
	if mem.Used != 300*MiB || mem.Free != 724*MiB {
		t.Errorf("memory with two holders: %+v", mem)
	}
	want := []procMem{{a.pid(), 100 * MiB}, {b.pid(), 200 * MiB}}
	sort.Slice(want, func(i, j int) bool { return want[i].pid < want[j].pid })
	if got := runningOn(t, d0); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("running processes %+v, want %+v", got, want)
	}
	if got := runningOn(t, handle(t, lib, 1)); len(got) != 0 {
		t.Errorf("device 1 lists %+v", got)
	}
	gfx, ret1 := d0.GetGraphicsRunningProcesses()
	mps, ret2 := d0.GetMPSComputeRunningProcesses()
	if ret1 != nvml.SUCCESS || ret2 != nvml.SUCCESS || len(gfx)+len(mps) != 0 {
		t.Errorf("graphics %+v (%v), MPS %+v (%v): want none", gfx, ret1, mps, ret2)
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	_ = a.cmd.Wait()
	mem, _ = d0.GetMemoryInfo()
	if mem.Used != 200*MiB {
		t.Errorf("after SIGKILL of the 100 MiB holder: used %d", mem.Used)
	}
	if got := runningOn(t, d0); len(got) != 1 || got[0].pid != b.pid() {
		t.Errorf("after SIGKILL: running %+v", got)
	}
}

// Busy time from simulated kernels becomes NVML utilisation.
func TestGoNVMLUtilization(t *testing.T) {
	n := newNode(t)
	lib := openNVML(t, n)
	d0 := handle(t, lib, 0)
	fgtest(t) // built before the window opens, not inside it
	// The sample window runs from one GetUtilizationRates to the next: it is
	// bracketed by the times taken around the two calls, whatever the
	// machine's stalls between them (a 20 ms stall moved a ±3 % bound).
	before1 := time.Now()
	if _, ret := d0.GetUtilizationRates(); ret != nvml.SUCCESS { // starts a sample window
		t.Fatal(ret)
	}
	after1 := time.Now()
	p := n.start("busy", "300")
	p.expect(t, "done")
	before2 := time.Now()
	u, ret := d0.GetUtilizationRates()
	after2 := time.Now()
	pct := func(window time.Duration) uint32 { return uint32((300*time.Millisecond*100 + window/2) / window) }
	lo, hi := pct(after2.Sub(before1)), pct(before2.Sub(after1)) // longest window, shortest window
	if ret != nvml.SUCCESS || u.Gpu+1 < lo || u.Gpu > hi+1 {
		t.Errorf("utilisation %d%% over a window of %v..%v with 300 ms of kernels, want %d..%d%%",
			u.Gpu, before2.Sub(after1), after2.Sub(before1), lo, hi)
	}
	t.Logf("utilisation %d%%, window bracketed to %d..%d%%", u.Gpu, lo, hi)
	samples, ret := d0.GetProcessUtilization(0)
	if ret != nvml.SUCCESS || len(samples) != 1 || int(samples[0].Pid) != p.pid() || samples[0].SmUtil == 0 {
		t.Errorf("process utilisation %+v, %v", samples, ret)
	}
	st, err := fakegpu.ReadState(n.state)
	if err != nil {
		t.Fatal(err)
	}
	rec, ok := st.Process(p.pid())
	if st.Devices[0].BusyTotalNs != 300e6 || !ok || rec.BusyNs[0] != 300e6 {
		t.Errorf("state busy: device %d, process %+v", st.Devices[0].BusyTotalNs, rec)
	}
	time.Sleep(20 * time.Millisecond)
	if u, _ := d0.GetUtilizationRates(); u.Gpu != 0 {
		t.Errorf("idle device reports %d%%", u.Gpu)
	}
}

func cString(b []int8) string {
	var s []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}
