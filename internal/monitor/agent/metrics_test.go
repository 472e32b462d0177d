package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tessera-gpu/tessera/internal/monitor/identity"
	"github.com/tessera-gpu/tessera/internal/statedir"
	"github.com/tessera-gpu/tessera/test/fakegpu"
)

func lbl(o identity.Owner, gpu string) map[string]string {
	m := map[string]string{"namespace": o.Namespace, "pod": o.Pod, "container": o.Container, "node": "node-a"}
	if gpu != "" {
		m["gpu_uuid"] = gpu
	}
	return m
}

// TestMetricsForSeveralContainers runs hooked processes of three containers on
// the simulated GPU and checks every per-container and per-GPU value scraped
// over HTTP.
func TestMetricsForSeveralContainers(t *testing.T) {
	n := newNode(t)
	a := n.allocate("ns1", "pa", "main", map[int]uint64{0: 256 * MiB}, map[int]uint32{0: 25}, true)
	b := n.allocate("ns1", "pa", "side", map[int]uint64{0: 128 * MiB, 1: 512 * MiB}, nil, true)
	hidden := n.allocate("ns2", "pc", "gone", map[int]uint64{1: 64 * MiB}, nil, false)
	// A foreign file where a region should be: skipped, counted, never trusted.
	foreign := filepath.Join(statedir.Containers(n.stateDir), "mem-feedfacefeedface")
	mkdir(t, foreign)
	os.WriteFile(filepath.Join(foreign, statedir.LimitsFile), make([]byte, 8192), 0o644)

	pa := n.run(a.env, true)
	pa.ok("init")
	pa.ok("ctx 0")
	pa.ok("alloc x 67108864")   // 64 MiB
	pa.ok("launch 1 300000000") // one 300 ms kernel
	pb1 := n.run(b.env, true)
	pb1.ok("init")
	pb1.ok("ctx 1")
	pb1.ok("alloc y 33554432") // 32 MiB on GPU 1
	pb2 := n.run(b.env, true)
	pb2.ok("init")
	pb2.ok("ctx 0")
	pb2.ok("alloc z 16777216") // 16 MiB on GPU 0
	fmt2 := "alloc big 209715200"
	pb2.in.Write([]byte(fmt2 + "\n"))
	if line := <-pb2.lines; line == "" || line[:3] != "err" {
		t.Fatalf("200 MiB over a 128 MiB cap: %q", line)
	}
	ph := n.run(hidden.env, true)
	ph.ok("init")
	ph.ok("ctx 1")
	ph.ok("alloc h 1048576")

	g := n.openGPUs()
	ag := n.agentFor(quietLog(), g)
	ctx, cancel := context.WithCancel(t.Context())
	watching := make(chan struct{})
	w := ag.HealthWatcher()
	registered := make(chan string, len(w.GPUs))
	w.Lib = registeringLib{Interface: w.Lib, registered: registered}
	go func() { w.Run(ctx); close(watching) }()
	t.Cleanup(func() { cancel(); <-watching }) // before NVML shuts down
	// An Xid injected before the event set registers a GPU is not reported
	// to it (as with a real driver): inject only once every GPU is watched.
	for range w.GPUs {
		select {
		case <-registered:
		case <-time.After(10 * time.Second):
			t.Fatal("the health watcher registered no events within 10 s")
		}
	}
	if err := fakegpu.InjectXid(filepath.Join(n.dir, "fakegpu.state"), 1, 79); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ag.Reaper.Once(); err != nil { // learns the slot owners' host pids
		t.Fatal(err)
	}
	url := serve(t, ag)
	u0, u1 := n.uuids[0], n.uuids[1]
	type want struct {
		name   string
		labels map[string]string
		v      float64
	}
	wants := []want{
		{"tessera_container_gpu_memory_used_bytes", lbl(a.owner, u0), 64 * MiB},
		{"tessera_container_gpu_memory_limit_bytes", lbl(a.owner, u0), 256 * MiB},
		{"tessera_container_gpu_memory_peak_bytes", lbl(a.owner, u0), 64 * MiB},
		{"tessera_container_gpu_allocations_refused_total", lbl(a.owner, u0), 0},
		{"tessera_container_gpu_compute_limit_ratio", lbl(a.owner, u0), 0.25},
		{"tessera_container_gpu_processes", lbl(a.owner, u0), 1},
		{"tessera_container_gpu_priority", lbl(a.owner, u0), 0},
		{"tessera_container_processes", lbl(a.owner, ""), 1},
		{"tessera_container_gpu_memory_used_bytes", lbl(b.owner, u0), 16 * MiB},
		{"tessera_container_gpu_memory_limit_bytes", lbl(b.owner, u0), 128 * MiB},
		{"tessera_container_gpu_allocations_refused_total", lbl(b.owner, u0), 1},
		{"tessera_container_gpu_memory_used_bytes", lbl(b.owner, u1), 32 * MiB},
		{"tessera_container_gpu_memory_limit_bytes", lbl(b.owner, u1), 512 * MiB},
		{"tessera_container_gpu_memory_peak_bytes", lbl(b.owner, u1), 32 * MiB},
		{"tessera_container_gpu_processes", lbl(b.owner, u1), 1},
		{"tessera_container_processes", lbl(b.owner, ""), 2},
		{"tessera_gpu_memory_total_bytes", map[string]string{"gpu_uuid": u0, "gpu_index": "0", "model": "GPU Alpha", "node": "node-a"}, 1024 * MiB},
		{"tessera_gpu_memory_used_bytes", map[string]string{"gpu_uuid": u0}, 80 * MiB},
		{"tessera_gpu_memory_used_bytes", map[string]string{"gpu_uuid": u1, "model": "GPU Beta"}, 33 * MiB},
		{"tessera_gpu_memory_promised_bytes", map[string]string{"gpu_uuid": u0}, 384 * MiB},
		{"tessera_gpu_memory_promised_bytes", map[string]string{"gpu_uuid": u1}, 512 * MiB},
		{"tessera_gpu_tenants", map[string]string{"gpu_uuid": u0}, 2},
		{"tessera_gpu_tenants", map[string]string{"gpu_uuid": u1}, 1},
		{"tessera_gpu_processes", map[string]string{"gpu_uuid": u0}, 2},
		{"tessera_gpu_processes", map[string]string{"gpu_uuid": u1}, 2},
		{"tessera_gpu_healthy", map[string]string{"gpu_uuid": u0}, 1},
		{"tessera_gpu_info", map[string]string{"gpu_uuid": u1, "gpu_index": "1", "model": "GPU Beta", "node": "node-a"}, 1},
		{"tessera_monitor_allocations", map[string]string{"owned": "true"}, 3},
		{"tessera_monitor_allocations", map[string]string{"owned": "false"}, 1},
	}
	// Utilisation is per interval between scrapes: the first one sees the kernel.
	fams := scrape(t, url)
	if v, ok := value(fams, "tessera_container_gpu_utilization_ratio", lbl(a.owner, u0)); !ok || v <= 0 || v > 1 {
		t.Errorf("utilisation of the container that ran a kernel: %v (%v)", v, ok)
	}
	if v, ok := value(fams, "tessera_container_gpu_utilization_ratio", lbl(b.owner, u0)); !ok || v != 0 {
		t.Errorf("utilisation of a container that ran none: %v (%v)", v, ok)
	}
	eventually(t, 30*time.Second, "Xid 79 counted on GPU 1", func() bool {
		fams = scrape(t, url)
		v, ok := value(fams, "tessera_gpu_xid_errors_total", map[string]string{"gpu_uuid": u1, "xid": "79"})
		return ok && v == 1
	})
	for _, w := range wants {
		got, ok := value(fams, w.name, w.labels)
		if !ok || got != w.v {
			t.Errorf("%s%v = %v (present %v), want %v", w.name, w.labels, got, ok, w.v)
		}
	}
	if v, ok := value(fams, "tessera_gpu_healthy", map[string]string{"gpu_uuid": u1}); !ok || v != 0 {
		t.Errorf("GPU 1 after Xid 79: healthy %v (%v)", v, ok)
	}
	if _, ok := value(fams, "tessera_gpu_xid_errors_total", map[string]string{"gpu_uuid": u0}); ok {
		t.Error("Xid counted on the GPU it did not happen on")
	}
	if _, ok := value(fams, "tessera_container_gpu_memory_limit_bytes", lbl(a.owner, u1)); ok {
		t.Error("series for a GPU the container has no share of")
	}
	if _, ok := value(fams, "tessera_container_gpu_compute_limit_ratio", lbl(b.owner, u0)); ok {
		t.Error("compute share exported for a container without one")
	}
	if got := series(fams, hidden.owner); got != 0 {
		t.Errorf("%d series for a container PodResources does not list", got)
	}
	if v, ok := value(fams, "tessera_monitor_regions_skipped_total", map[string]string{"reason": "foreign", "file": "limits"}); !ok || v < 1 {
		t.Errorf("foreign file: skipped %v (%v)", v, ok)
	}
	if v, ok := value(fams, "tessera_monitor_scrape_duration_seconds", nil); !ok || v <= 0 {
		t.Errorf("scrape duration %v (%v)", v, ok)
	}
}

// registeringLib is NVML whose device handles say on registered when their
// events have been registered with an event set.
type registeringLib struct {
	nvml.Interface
	registered chan<- string
}

func (l registeringLib) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	d, ret := l.Interface.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return d, ret
	}
	return registeringDevice{Device: d, uuid: uuid, registered: l.registered}, ret
}

type registeringDevice struct {
	nvml.Device
	uuid       string
	registered chan<- string
}

func (d registeringDevice) RegisterEvents(types uint64, set nvml.EventSet) nvml.Return {
	ret := d.Device.RegisterEvents(types, set)
	d.registered <- d.uuid
	return ret
}
