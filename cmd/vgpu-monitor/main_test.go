package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

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

func freeAddress(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startOnFreePort runs the command listening on a free loopback port until
// the test ends, and returns its base URL once it is ready. A port is free
// only when looked up: a test of another package running meanwhile may take
// it before the command listens, so a listen refused as in use is retried on
// another port.
func startOnFreePort(t *testing.T, args func(addr string) []string) string {
	t.Helper()
	for attempt := 0; ; attempt++ {
		addr := freeAddress(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- run(ctx, args(addr)) }()
		err := awaitReady(t, "http://"+addr, done)
		if err == nil {
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("run: %v", err)
				}
			})
			return "http://" + addr
		}
		cancel()
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == 4 {
			t.Fatal(err)
		}
		t.Logf("port %s taken meanwhile: %v; another", addr, err)
	}
}

// awaitReady polls /readyz until it answers 200 (nil), run returns (its
// error), or 30 s pass.
func awaitReady(t *testing.T, base string, done <-chan error) error {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	poll := &http.Client{Timeout: 2 * time.Second} // a port taken by a silent listener does not hang the test
	for {
		select {
		case err := <-done:
			if err == nil {
				err = errors.New("no error")
			}
			return fmt.Errorf("run returned before it was ready: %w", err)
		default:
		}
		resp, err := poll.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 30 s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBinaryServesAContainerFromPodResources runs the command as deployed:
// PodResources over a unix socket answering one entry per device ID, NVML
// from the simulated GPU, a state directory with one container.
func TestBinaryServesAContainerFromPodResources(t *testing.T) {
	libs, err := fakegpu.LibDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Setenv("FAKEGPU_STATE", filepath.Join(dir, "fakegpu.state"))
	t.Setenv("FAKEGPU_DEVICES", "Test GPU:1024:10")
	t.Setenv("FAKEGPU_CONFIG", "")
	uuid := fakegpu.UUID("", 0)
	var ids []string
	for i := range 4 {
		ids = append(ids, resource.ID{GPU: uuid, Kind: resource.KindMem, N: i}.String())
	}
	state := filepath.Join(dir, "state")
	cdir := filepath.Join(statedir.Containers(state), allocation.Key(resource.KindMem, ids))
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := region.WriteLimits(filepath.Join(cdir, statedir.LimitsFile), []region.DeviceLimit{{UUID: uuid, MemLimitBytes: 512 << 20}}); err != nil {
		t.Fatal(err)
	}
	reg := filepath.Join(cdir, statedir.RegionFile)
	if err := region.CreateRegion(reg); err != nil {
		t.Fatal(err)
	}
	self, err := hostproc.Read("/proc", uint32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if err := regiontest.Write(reg, regiontest.Contents{Slots: []regiontest.Slot{{PID: self.NSPID, StartTime: self.StartTime, UsedBytes: map[int]uint64{0: 3 << 20}}}}); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "kubelet.sock")
	identitytest.Serve(t, socket, []identity.Listing{{Owner: identity.Owner{Namespace: "team", Pod: "trainer", Container: "main"},
		Devices: map[string][]string{resource.Memory: ids}}})

	base := startOnFreePort(t, func(addr string) []string {
		return []string{"--node-name", "node-1", "--state-dir", state, "--pod-resources-socket", socket,
			"--listen-address", addr, "--nvml-library", filepath.Join(libs, "libnvidia-ml.so.1")}
	})
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"tessera_container_gpu_memory_used_bytes":  3 << 20,
		"tessera_container_gpu_memory_limit_bytes": 512 << 20,
	}
	for name, v := range want {
		f := fams[name]
		if f == nil || len(f.GetMetric()) != 1 {
			t.Fatalf("%s: %v", name, f)
		}
		m := f.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetGauge().GetValue() != v || labels["namespace"] != "team" || labels["pod"] != "trainer" ||
			labels["container"] != "main" || labels["gpu_uuid"] != uuid || labels["node"] != "node-1" {
			t.Errorf("%s = %v %v, want %v for team/trainer/main", name, m.GetGauge().GetValue(), labels, v)
		}
	}
	if f := fams["tessera_gpu_memory_total_bytes"]; f == nil || f.GetMetric()[0].GetGauge().GetValue() != 1024<<20 {
		t.Errorf("NVML total: %v", f)
	}
}

func TestBadConfigurationNamesTheField(t *testing.T) {
	for args, field := range map[string]string{
		"--node-name n --enforcement-policy shoot":       "enforcement.policy",
		"--node-name n --state-dir relative":             "stateDir",
		"--listen-address nowhere --node-name n":         "listenAddress",
		"--node-name n --arbiter-realtime-priority high": "arbiter.realtimePriority",
		"--node-name n --arbiter-realtime-priority 100":  "arbiter.realtimePriority",
	} {
		err := run(context.Background(), strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want an error naming %s", args, err, field)
		}
	}
}
