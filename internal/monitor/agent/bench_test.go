//go:build bench

package agent

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/hostproc"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
	"github.com/tessera-gpu/tessera/internal/monitor/identity/identitytest"
	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/region/regiontest"
	"github.com/tessera-gpu/tessera/internal/statedir"
	"github.com/tessera-gpu/tessera/test/fakegpu"
)

func bench(name string, v float64, unit string) { fmt.Printf("BENCH %s %.2f %s\n", name, v, unit) }

func median(xs []float64) float64 {
	sort.Float64s(xs)
	return xs[len(xs)/2]
}

// eightGPUs is a simulated 8×H200 node.
var eightGPUs = strings.TrimSuffix(strings.Repeat("NVIDIA H200:143771:132;", 8), ";")

// fillNode writes 100 containers, each with a memory share of all 8 GPUs and
// two live slots (this process), listed in PodResources.
func fillNode(t *testing.T, n *node, containers int) {
	self, err := hostproc.Read("/proc", uint32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	for c := range containers {
		var ids []string
		var limits []region.DeviceLimit
		for g := range 8 {
			uuid := fakegpu.UUID("", g)
			limits = append(limits, region.DeviceLimit{UUID: uuid, MemLimitBytes: uint64(1+c%7) << 30})
			ids = append(ids, resource.ID{GPU: uuid, Kind: resource.KindMem, N: c}.String())
		}
		key := allocation.Key(resource.KindMem, ids)
		dir := filepath.Join(statedir.Containers(n.stateDir), key)
		mkdir(t, dir)
		if err := region.WriteLimits(filepath.Join(dir, statedir.LimitsFile), limits); err != nil {
			t.Fatal(err)
		}
		reg := filepath.Join(dir, statedir.RegionFile)
		if err := region.CreateRegion(reg); err != nil {
			t.Fatal(err)
		}
		used := map[int]uint64{}
		for g := range 8 {
			used[g] = uint64(c+g) << 20
		}
		slot := regiontest.Slot{PID: self.NSPID, StartTime: self.StartTime, UsedBytes: used}
		if err := regiontest.Write(reg, regiontest.Contents{Slots: []regiontest.Slot{slot, slot}}); err != nil {
			t.Fatal(err)
		}
		n.listing = append(n.listing, identity.Listing{
			Owner:   identity.Owner{Namespace: "bench", Pod: fmt.Sprintf("pod-%03d", c), Container: "main"},
			Devices: map[string][]string{resource.Memory: ids},
		})
	}
}

// TestBenchScrape: scrape latency of /metrics over HTTP with 100 containers
// × 8 GPUs (800 container-GPU shares), NVML on the simulated node.
func TestBenchScrape(t *testing.T) {
	n := newNode(t)
	n.devices = eightGPUs
	t.Setenv("FAKEGPU_DEVICES", eightGPUs)
	fillNode(t, n, 100)
	g := n.openGPUs()
	ag := n.agentFor(quietLog(), g)
	url := serve(t, ag)
	fams := scrape(t, url)
	if got := len(fams["tessera_container_gpu_memory_used_bytes"].GetMetric()); got != 800 {
		t.Fatalf("%d container-GPU series, want 800", got)
	}
	var ms []float64
	cpu0 := cpuTime(t)
	for range 40 {
		began := time.Now()
		// As Prometheus asks; an explicit header also keeps Go's transport
		// from unzipping in this process (the server's cost is measured).
		req, _ := http.NewRequest(http.MethodGet, url+"/metrics", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, float64(time.Since(began).Microseconds())/1000)
	}
	cpu := cpuTime(t) - cpu0
	bench("monitor.scrape_ms", median(ms), "ms")
	// CPU time per scrape (server and client in this process) does not
	// grow with the load of a shared machine, as wall time does.
	bench("monitor.scrape_cpu_ms", float64(cpu.Microseconds())/1000/40, "ms")
}

func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestBenchReapLatency: time from a hooked process's SIGKILL to its bytes
// being free in its container's region again, with the default reap interval.
func TestBenchReapLatency(t *testing.T) {
	n := newNode(t)
	c := n.allocate("bench", "reap", "main", map[int]uint64{0: 512 * MiB}, nil, true)
	ag := n.agentFor(quietLog(), nil, func(cfg *configv1.MonitorConfig) { cfg.ReapInterval.Duration = time.Second })
	start(t, ag)
	r, err := region.OpenRegion(c.region)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var ms []float64
	for range 7 {
		p := n.run(c.env, true)
		p.ok("init")
		p.ok("ctx 0")
		p.ok("alloc x 67108864")
		// A process that has lived past one reap pass (any real one): the
		// reaper watches it. Kills are spread over the interval.
		time.Sleep(time.Second + time.Duration(len(ms)*137%1000)*time.Millisecond)
		began := time.Now()
		p.cmd.Process.Kill()
		p.cmd.Wait()
		for r.Usage().UsedBytes[0] != 0 {
			if time.Since(began) > 10*time.Second {
				t.Fatal("not reaped in 10 s")
			}
			time.Sleep(time.Millisecond)
		}
		ms = append(ms, float64(time.Since(began).Microseconds())/1000)
	}
	bench("monitor.reap_latency_ms", median(ms), "ms")
}

// TestBenchRSS runs the real binary (TESSERA_MONITOR_BIN) on the 100 × 8 node
// with PodResources over a socket, scrapes it, and reports its peak RSS.
func TestBenchRSS(t *testing.T) {
	bin := os.Getenv("TESSERA_MONITOR_BIN")
	if bin == "" {
		t.Fatal("TESSERA_MONITOR_BIN must name the vgpu-monitor binary (make bench-monitor sets it)")
	}
	n := newNode(t)
	n.devices = eightGPUs
	t.Setenv("FAKEGPU_DEVICES", eightGPUs)
	fillNode(t, n, 100)
	socket := filepath.Join(n.dir, "kubelet.sock")
	identitytest.Serve(t, socket, n.listing)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "--node-name", "bench", "--state-dir", n.stateDir, "--pod-resources-socket", socket,
		"--listen-address", addr, "--nvml-library", filepath.Join(libDir, "fakegpu", "libnvidia-ml.so.1"))
	cmd.Env = append(os.Environ(), "FAKEGPU_DEVICES="+eightGPUs)
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	url := "http://" + addr
	eventually(t, 20*time.Second, "the binary ready", func() bool {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	for range 20 {
		if got := len(scrape(t, url)["tessera_container_gpu_memory_used_bytes"].GetMetric()); got != 800 {
			t.Fatalf("%d container-GPU series from the binary, want 800", got)
		}
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(rest), "%f", &kb)
			bench("monitor.rss_mib", kb/1024, "MiB")
			return
		}
	}
	t.Fatal("no VmHWM in /proc/<pid>/status")
}
