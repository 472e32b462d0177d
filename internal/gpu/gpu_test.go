package gpu

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestDiscoverModels(t *testing.T) {
	for model, want := range map[string]struct {
		name string
		mib  uint64
		sms  int
	}{
		gputest.DGXA100: {"A100", 40960, 108},
		gputest.DGXH100: {"H100", 81920, 132},
		gputest.DGXH200: {"H200", 144384, 132},
	} {
		t.Run(model, func(t *testing.T) {
			node := gputest.MustNew(model)
			gpus, err := Discover(node, quiet)
			if err != nil {
				t.Fatal(err)
			}
			if len(gpus) != 8 {
				t.Fatalf("found %d GPUs, want 8", len(gpus))
			}
			for i, g := range gpus {
				if !strings.Contains(g.Model, want.name) || g.MemoryBytes != want.mib<<20 || g.SMCount != want.sms {
					t.Errorf("GPU %d = %+v, want model %s, %d MiB, %d SMs", i, g, want.name, want.mib, want.sms)
				}
				if g.Index != i || g.DevicePath() != "/dev/nvidia"+string(rune('0'+i)) || g.NUMANode != i/4 {
					t.Errorf("GPU %d identity = index %d path %s numa %d", i, g.Index, g.DevicePath(), g.NUMANode)
				}
				if len(g.NVLinkPeers) != 7 || contains(g.NVLinkPeers, g.UUID) {
					t.Errorf("GPU %d NVLink peers = %v, want the 7 others", i, g.NVLinkPeers)
				}
				if g.MIGEnabled || len(g.MIG) != 0 {
					t.Errorf("GPU %d reports MIG without it being enabled", i)
				}
			}
		})
	}
}

func TestDiscoverMIG(t *testing.T) {
	// Profile names come from go-nvlib's naming applied to the mock's
	// memory sizes; the slice counts are what the test controls.
	wantProfiles := []string{"1g.", "3g."}
	for _, model := range []string{gputest.DGXA100, gputest.DGXH100, gputest.DGXH200} {
		t.Run(model, func(t *testing.T) {
			node := gputest.MustNew(model)
			uuids, err := node.EnableMIG(2, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
			if err != nil {
				t.Fatal(err)
			}
			gpus, err := Discover(node, quiet)
			if err != nil {
				t.Fatal(err)
			}
			g := gpus[2]
			if !g.MIGEnabled || len(g.MIG) != 2 {
				t.Fatalf("GPU 2 MIG = %v %+v", g.MIGEnabled, g.MIG)
			}
			for j, m := range g.MIG {
				if !strings.HasPrefix(m.Profile, wantProfiles[j]) || !strings.HasSuffix(m.Profile, "gb") || m.UUID != uuids[j] || m.Parent != g.UUID || m.MemoryMiB == 0 {
					t.Errorf("MIG %d = %+v, want profile %s uuid %s", j, m, wantProfiles[j], uuids[j])
				}
			}
			if gpus[1].MIGEnabled {
				t.Error("GPU 1 should not be MIG-enabled")
			}
		})
	}
}

func TestDiscoverReportsNVMLFailure(t *testing.T) {
	node := gputest.MustNew(gputest.DGXH100)
	node.Device(3).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
	_, err := Discover(node, quiet)
	if err == nil || !strings.Contains(err.Error(), "GPU 3: memory info") {
		t.Fatalf("error = %v, want it to name GPU 3's memory info", err)
	}
}

// TestRediscoverMIGReconfiguration: a second discovery sees the layout an
// operator made after the first (new GPU instances, new IDs), and MIG off.
func TestRediscoverMIGReconfiguration(t *testing.T) {
	node := gputest.MustNew(gputest.DGXH200)
	if _, err := node.EnableMIG(4, nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE); err != nil {
		t.Fatal(err)
	}
	before, err := Discover(node, quiet)
	if err != nil {
		t.Fatal(err)
	}
	uuids, err := node.EnableMIG(4, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE)
	if err != nil {
		t.Fatal(err)
	}
	after, err := Discover(node, quiet)
	if err != nil {
		t.Fatal(err)
	}
	g := after[4]
	if len(g.MIG) != 3 || g.MIG[0].UUID != uuids[0] || !strings.HasPrefix(g.MIG[2].Profile, "2g.") {
		t.Fatalf("after reconfiguration GPU 4 MIG = %+v", g.MIG)
	}
	for _, m := range g.MIG {
		for _, old := range before[4].MIG {
			if m.GI == old.GI || m.UUID == old.UUID {
				t.Fatalf("new instance %+v reuses old %+v", m, old)
			}
		}
	}
	if _, ok := g.MIGDevice(uuids[2]); !ok {
		t.Fatal("MIGDevice does not find the new device")
	}
	node.DisableMIG(4)
	off, err := Discover(node, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if off[4].MIGEnabled || len(off[4].MIG) != 0 {
		t.Fatalf("after DisableMIG GPU 4 = %v %+v", off[4].MIGEnabled, off[4].MIG)
	}
}
