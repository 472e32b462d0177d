//go:build bench

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type registrar struct {
	pluginapi.UnimplementedRegistrationServer
	regs chan *pluginapi.RegisterRequest
}

func (r *registrar) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	r.regs <- req
	return &pluginapi.Empty{}, nil
}

func bench(name string, v float64, unit string) { fmt.Printf("BENCH %s %.2f %s\n", name, v, unit) }

// TestBenchDevicePlugin runs the real plugin binary on a simulated 8xH200
// node, plays kubelet against it, and reports sizes, latencies and RSS.
func TestBenchDevicePlugin(t *testing.T) {
	bin := os.Getenv("TESSERA_DP_SIM")
	if bin == "" {
		t.Fatal("TESSERA_DP_SIM must name the device-plugin binary built with -tags tessera_sim")
	}
	dir, err := os.MkdirTemp("", "dpb")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sockDir := filepath.Join(dir, "dp")
	os.MkdirAll(sockDir, 0o755)
	ln, err := net.Listen("unix", filepath.Join(sockDir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	reg := &registrar{regs: make(chan *pluginapi.RegisterRequest, 16)}
	gs := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(gs, reg)
	go gs.Serve(ln)
	defer gs.Stop()

	cmd := exec.Command(bin, "--simulate", "dgxh200", "--node-name", "bench", "--kubelet-socket-dir", sockDir,
		"--state-dir", filepath.Join(dir, "state"), "--hook-library", "/usr/local/tessera/lib/libtessera-hook.so",
		"--metrics-address", "", "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()

	endpoints := map[string]string{}
	for len(endpoints) < 3 {
		select {
		case r := <-reg.regs:
			endpoints[r.ResourceName] = filepath.Join(sockDir, r.Endpoint)
		case <-time.After(30 * time.Second):
			t.Fatalf("plugin registered only %v", endpoints)
		}
	}
	client := func(res string) pluginapi.DevicePluginClient {
		conn, err := grpc.NewClient("unix://"+endpoints[res], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return pluginapi.NewDevicePluginClient(conn)
	}
	ctx := context.Background()

	total := 0
	ids := map[string][]string{}
	for _, res := range []string{"tessera.io/gpu", "tessera.io/gpu-mem", "tessera.io/gpu-core"} {
		stream, err := client(res).ListAndWatch(ctx, &pluginapi.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		total += proto.Size(m)
		for _, d := range m.Devices {
			ids[res] = append(ids[res], d.ID)
		}
		sort.Strings(ids[res])
		if res == "tessera.io/gpu-mem" {
			bench("deviceplugin.listandwatch_mem_bytes", float64(proto.Size(m)), "bytes")
		}
	}
	bench("deviceplugin.listandwatch_bytes", float64(total), "bytes")

	mem := client("tessera.io/gpu-mem")
	const n = 300
	// Baseline: the cheapest RPC over the same socket.
	baseline := timeIt(n, func(int) {
		if _, err := mem.GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
			t.Fatal(err)
		}
	})
	bench("deviceplugin.rpc_baseline_us", baseline, "us")
	pref := timeIt(n, func(int) {
		r, err := mem.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: ids["tessera.io/gpu-mem"], AllocationSize: 16}}})
		if err != nil || len(r.ContainerResponses[0].DeviceIDs) != 16 {
			t.Fatalf("preferred: %v", err)
		}
	})
	bench("deviceplugin.preferred_us", pref, "us")
	gpu := client("tessera.io/gpu")
	pref4 := timeIt(50, func(int) {
		r, err := gpu.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: ids["tessera.io/gpu"], AllocationSize: 4}}})
		if err != nil || len(r.ContainerResponses[0].DeviceIDs) != 4 {
			t.Fatalf("preferred gpu x4: %v", err)
		}
	})
	bench("deviceplugin.preferred_gpu4_us", pref4, "us")
	// Allocate 16 distinct 8-unit sets in turn: each writes a limits file
	// and creates a usage region (first time) or rewrites them in place.
	alloc := timeIt(n, func(i int) {
		set := ids["tessera.io/gpu-mem"][(i%16)*8 : (i%16)*8+8]
		if _, err := mem.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: set}}}); err != nil {
			t.Fatalf("allocate: %v", err)
		}
	})
	bench("deviceplugin.allocate_us", alloc, "us")
	st := procStatus(t, cmd.Process.Pid)
	bench("deviceplugin.rss_mib", st["VmRSS"], "MiB")
	// VmRSS includes clean pages of the executable mapped from the page
	// cache (shared, reclaimable); RssAnon is the plugin's own memory.
	bench("deviceplugin.rss_anon_mib", st["RssAnon"], "MiB")
	bench("deviceplugin.rss_file_mib", st["RssFile"], "MiB")
}

func timeIt(n int, f func(int)) float64 {
	f(0) // warm up
	start := time.Now()
	for i := 0; i < n; i++ {
		f(i)
	}
	return float64(time.Since(start).Microseconds()) / float64(n)
}

// procStatus reads the memory lines of /proc/<pid>/status in MiB.
func procStatus(t *testing.T, pid int) map[string]float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[2] == "kB" {
			kb, _ := strconv.Atoi(f[1])
			out[strings.TrimSuffix(f[0], ":")] = float64(kb) / 1024
		}
	}
	if out["VmRSS"] == 0 {
		t.Fatal("no VmRSS in /proc status")
	}
	return out
}
