package resource

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/internal/gpu"
	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

func discover(t *testing.T, n *gputest.Node) []gpu.GPU {
	t.Helper()
	gpus, err := gpu.Discover(n, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return gpus
}

func TestIDRoundTrip(t *testing.T) {
	for _, id := range []ID{{GPU: "GPU-a", Kind: KindMem, N: 17}, {GPU: "GPU-a", Kind: KindCore, N: 0}, {GPU: "GPU-b", Kind: KindSlot, N: 9},
		{GPU: "GPU-c", Kind: KindMIG, MIG: "MIG-1"}} {
		got, err := ParseID(id.String())
		if err != nil || got != id {
			t.Fatalf("ParseID(%q) = %+v, %v", id.String(), got, err)
		}
	}
	if s := (ID{GPU: "GPU-a", Kind: KindMem, N: 17}).String(); s != "GPU-a::mem::17" {
		t.Fatalf("format %q", s)
	}
	for _, bad := range []string{"", "GPU-a", "GPU-a::mem", "GPU-a::mem::x", "GPU-a::mem::-1", "GPU-a::disk::1", "::mem::1", "a::mem::1::2"} {
		if _, err := ParseID(bad); err == nil {
			t.Errorf("ParseID(%q) accepted", bad)
		}
	}
}

func FuzzParseID(f *testing.F) {
	f.Add("GPU-a::mem::17")
	f.Add("GPU-c::mig::MIG-1")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err != nil {
			return
		}
		again, err := ParseID(id.String())
		if err != nil || again != id {
			t.Fatalf("%q → %+v → %q → %+v, %v", s, id, id.String(), again, err)
		}
	})
}

func TestManagerAdvertisesUnitsAndMIG(t *testing.T) {
	node := gputest.MustNew(gputest.DGXA100)
	if _, err := node.EnableMIG(7, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE); err != nil {
		t.Fatal(err)
	}
	gpus := discover(t, node)
	m, err := NewManager(gpus, Options{SplitCount: 4, MemoryUnit: 512 << 20, ReservedMemory: 1 << 30, MIG: true})
	if err != nil {
		t.Fatal(err)
	}
	// A100 40 GiB, 1 GiB reserved, 512 MiB units: 78 units on each of 7 GPUs.
	if n := len(m.IDs(Memory)); n != 7*78 {
		t.Fatalf("gpu-mem IDs = %d, want %d", n, 7*78)
	}
	if n := len(m.IDs(GPU)); n != 7*4 {
		t.Fatalf("gpu IDs = %d", n)
	}
	var migRes []string
	for _, r := range m.Resources() {
		if strings.HasPrefix(r, MIGPrefix) {
			migRes = append(migRes, r)
		}
	}
	if len(migRes) != 2 || len(m.IDs(migRes[0]))+len(m.IDs(migRes[1])) != 3 {
		t.Fatalf("MIG resources = %v", migRes)
	}
	for _, d := range m.IDs(Memory) {
		if d.ID.GPU == gpus[7].UUID {
			t.Fatal("a MIG-enabled GPU advertises gpu-mem")
		}
	}
	none, _ := NewManager(gpus, Options{SplitCount: 4, MemoryUnit: 1 << 30})
	for _, r := range none.Resources() {
		if strings.HasPrefix(r, MIGPrefix) {
			t.Fatalf("migStrategy none advertises %s", r)
		}
	}
}

func TestSharesAndHealth(t *testing.T) {
	gpus := discover(t, gputest.MustNew(gputest.DGXH100))
	m, _ := NewManager(gpus, Options{SplitCount: 10, MemoryUnit: 1 << 30})
	a, b := gpus[1].UUID, gpus[0].UUID
	shares, err := m.Shares(Memory, []string{a + "::mem::0", a + "::mem::5", b + "::mem::3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(shares) != 2 || shares[0].GPU != b || shares[0].MemBytes != 1<<30 || shares[1].MemBytes != 2<<30 {
		t.Fatalf("shares = %+v (want GPU 0 first, 1 GiB, then GPU 1, 2 GiB)", shares)
	}
	if _, err := m.Shares(Memory, []string{a + "::mem::0", a + "::mem::0"}); err == nil {
		t.Fatal("duplicate ID accepted")
	}
	if _, err := m.Shares(Core, []string{a + "::mem::0"}); err == nil {
		t.Fatal("gpu-mem ID accepted as gpu-core")
	}
	ch, cancel := m.Watch(Core)
	defer cancel()
	if !m.SetHealth(a, false, "Xid 79") || m.SetHealth(a, false, "Xid 79") {
		t.Fatal("SetHealth change detection wrong")
	}
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Fatal("watcher not woken")
	}
	unhealthy := 0
	for _, d := range m.Devices(Core) {
		if d.Health == pluginapi.Unhealthy {
			unhealthy++
		}
	}
	if unhealthy != 100 {
		t.Fatalf("%d unhealthy core IDs, want 100", unhealthy)
	}
}
