package fakegpu_test

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// go-nvlib (what the device plugin enumerates GPUs with) walks the simulated node.
func TestGoNVLibEnumeratesNode(t *testing.T) {
	n := newNode(t)
	n.devices = "NVIDIA H200:143771:132;NVIDIA H200:143771:132;NVIDIA H200:143771:132;NVIDIA H200:143771:132;" +
		"NVIDIA H200:143771:132"
	lib := openNVML(t, n)
	devs, err := device.New(lib).GetDevices()
	if err != nil || len(devs) != 5 {
		t.Fatalf("GetDevices: %d devices, %v", len(devs), err)
	}
	for i, d := range devs {
		arch, err1 := d.GetArchitectureAsString()
		cc, err2 := d.GetCudaComputeCapabilityAsString()
		bus, err3 := d.GetPCIBusID()
		mig, err4 := d.IsMigEnabled()
		migs, err5 := d.GetMigDevices()
		if err := firstErr(err1, err2, err3, err4, err5); err != nil {
			t.Fatalf("device %d: %v", i, err)
		}
		if arch != "Hopper" || cc != "9.0" || bus != fakegpu.BusID(i)[4:] || mig || len(migs) != 0 {
			t.Errorf("device %d: arch %s cc %s bus %s mig %v (%d)", i, arch, cc, bus, mig, len(migs))
		}
		attrs, ret := d.GetAttributes()
		numa, ret2 := d.GetNumaNodeId()
		if ret != nvml.SUCCESS || attrs.MultiprocessorCount != 132 || attrs.MemorySizeMB != 143771 ||
			ret2 != nvml.SUCCESS || numa != i/4 {
			t.Errorf("device %d: attributes %+v (%v), NUMA %d (%v)", i, attrs, ret, numa, ret2)
		}
	}
	want := map[[2]int]nvml.GpuTopologyLevel{
		{0, 0}: nvml.TOPOLOGY_INTERNAL, {0, 3}: nvml.TOPOLOGY_NODE, {3, 4}: nvml.TOPOLOGY_SYSTEM,
	}
	for pair, level := range want {
		got, ret := devs[pair[0]].GetTopologyCommonAncestor(devs[pair[1]])
		if ret != nvml.SUCCESS || got != level {
			t.Errorf("topology %v: %v (%v), want %v", pair, got, ret, level)
		}
	}
	if _, ret := devs[0].GetNvLinkState(0); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("NVLink state: %v, want ERROR_NOT_SUPPORTED", ret)
	}
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Xid errors injected through the state file arrive as NVML events.
func TestGoNVMLXidEvents(t *testing.T) {
	n := newNode(t)
	lib := openNVML(t, n)
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	defer set.Free()
	d1 := handle(t, lib, 1)
	supported, _ := d1.GetSupportedEventTypes()
	if ret := d1.RegisterEvents(nvml.EventTypeXidCriticalError&supported, set); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	start := time.Now()
	if _, ret := set.Wait(50); ret != nvml.ERROR_TIMEOUT {
		t.Fatalf("Wait with nothing injected: %v", ret)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("Wait(50 ms) returned after %v", waited)
	}
	if err := fakegpu.InjectXid(n.state, 0, 13); err != nil { // not registered: ignored
		t.Fatal(err)
	}
	if err := fakegpu.InjectXid(n.state, 1, 79); err != nil {
		t.Fatal(err)
	}
	e, ret := set.Wait(1000)
	idx, _ := e.Device.GetIndex()
	if ret != nvml.SUCCESS || idx != 1 || e.EventType != nvml.EventTypeXidCriticalError || e.EventData != 79 {
		t.Errorf("event %+v on device %d, %v; want Xid 79 on device 1", e, idx, ret)
	}
	if _, ret := set.Wait(10); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("second Wait: %v, want ERROR_TIMEOUT (one event per injection)", ret)
	}
}
