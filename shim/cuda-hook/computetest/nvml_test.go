package computetest

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tessera-gpu/tessera/internal/region"
)

// openNVML loads the simulated driver's NVML for node n in this process.
func (n *node) openNVML(t *testing.T) nvml.Device {
	t.Helper()
	t.Setenv("FAKEGPU_STATE", filepath.Join(n.dir, "fakegpu.state"))
	for _, v := range []string{"FAKEGPU_DEVICES", "FAKEGPU_CONFIG"} { // set but empty would mean no GPU
		if old, ok := os.LookupEnv(v); ok {
			os.Unsetenv(v)
			t.Cleanup(func() { os.Setenv(v, old) })
		}
	}
	lib := nvml.New(nvml.WithLibraryPath(filepath.Join(libDir, "fakegpu", "libnvidia-ml.so.1")))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("nvml.Init: %v", ret)
	}
	t.Cleanup(func() { lib.Shutdown() })
	d, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetHandleByIndex(0): %v", ret)
	}
	return d
}

// The cross-check the issue asks for: what the hooks billed each container
// (busy_ns from its events, in the core region) against what the driver says
// each process ran (nvmlDeviceGetProcessUtilization, summed over the
// container's processes: one of them forks two children) and the device as
// a whole (nvmlDeviceGetUtilizationRates), over the same second. On a real GPU
// NVML samples every 1/6-1 s, so it can only cross-check seconds; the
// simulated driver's NVML is exact over the caller's interval.
func TestBilledMatchesNVML(t *testing.T) {
	var worst, devDiff float64
	measureUnstarved(t, func() error {
		n := newNode(t)
		n.startArbiter(defaultPolicy())
		dev := n.openNVML(t)
		cs := []*container{n.container("a", 30, false, 2), n.container("b", 70, false, 2)}
		var groups [][]int
		var regs []*region.Region
		for i, c := range cs {
			args := []string{"kernel", "1000", "2.5"}
			if i == 0 {
				args = append(args, "children=2") // a container of three processes
			}
			groups = append(groups, []int{n.start(c, args...).pid})
			r, err := region.OpenRegion(c.entry.CoreRegion())
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			regs = append(regs, r)
		}
		time.Sleep(400 * time.Millisecond)
		groups[0] = append(groups[0], children(groups[0][0])...)
		if len(groups[0]) != 3 {
			t.Fatalf("container a has processes %v, want 3", groups[0])
		}
		read := func() (time.Time, []uint64) {
			var b []uint64
			for _, r := range regs {
				b = append(b, r.Compute(0).BusyNs)
			}
			return time.Now(), b
		}
		// Prime NVML's intervals (each caller's is since its previous call).
		dev.GetUtilizationRates()
		dev.GetProcessUtilization(0)
		t0, b0 := read()
		time.Sleep(time.Second)
		u, ret := dev.GetUtilizationRates()
		if ret != nvml.SUCCESS {
			t.Fatalf("GetUtilizationRates: %v", ret)
		}
		procs, ret := dev.GetProcessUtilization(0)
		if ret != nvml.SUCCESS {
			t.Fatalf("GetProcessUtilization: %v", ret)
		}
		t1, b1 := read()
		observeStarvation()
		wall := float64(t1.Sub(t0))
		worst, devDiff = 0, 0
		sum := 0.0
		var lines []string
		for i, g := range groups {
			billed := 100 * float64(b1[i]-b0[i]) / wall
			sum += billed
			sm, seen := 0.0, 0
			for _, p := range procs {
				for _, pid := range g {
					if int(p.Pid) == pid {
						sm += float64(p.SmUtil)
						seen++
					}
				}
			}
			if seen != len(g) {
				return fmt.Errorf("NVML lists utilisation for %d of the processes %v: %+v", seen, g, procs)
			}
			worst = math.Max(worst, math.Abs(billed-sm))
			lines = append(lines, fmt.Sprintf("%s billed %.1f%% NVML %.0f%%", cs[i].entry.Key, billed, sm))
		}
		devDiff = math.Abs(sum - float64(u.Gpu))
		t.Logf("%v; device NVML %d%%, billed in all %.1f%%", lines, u.Gpu, sum)
		// Whole percents per process (three in container a) and reads a
		// few µs apart: within 4 pp when billing is right. Billing each
		// sibling's slices too (as before) put container a at ~2x.
		if worst > 4 || devDiff > 4 {
			return fmt.Errorf("billed time and NVML differ by %.1f pp per container, %.1f pp for the device; want ≤ 4", worst, devDiff)
		}
		return nil
	})
	fmt.Printf("BENCH hook.nvml_crosscheck_pp %.2f pp\n", worst)
	fmt.Printf("BENCH hook.nvml_crosscheck_device_pp %.2f pp\n", devDiff)
}
