package resource

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

func health(m *Manager, res string) map[string]string {
	out := map[string]string{}
	for _, d := range m.Devices(res) {
		out[d.ID] = d.Health
	}
	return out
}

// TestUpdateMIGRetiresBeforeDropping: a MIG reconfiguration advertises the
// new devices at once, keeps the vanished ones Unhealthy while a container
// holds them, and drops them only on a later update once nothing does.
func TestUpdateMIGRetiresBeforeDropping(t *testing.T) {
	for _, model := range []string{gputest.DGXA100, gputest.DGXH100, gputest.DGXH200} {
		t.Run(model, func(t *testing.T) {
			n := gputest.MustNew(model)
			old, err := n.EnableMIG(5, nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
			if err != nil {
				t.Fatal(err)
			}
			gpus := discover(t, n)
			m, _ := NewManager(gpus, Options{SplitCount: 10, MemoryUnit: 1 << 30, MIG: true})
			uuid := gpus[5].UUID
			oldRes := MIGResource(gpus[5].MIG[0].Profile)
			heldKey := uuid + "::mig::" + old[0]
			freeKey := uuid + "::mig::" + old[1]
			wake, cancel := m.Watch(oldRes)
			defer cancel()
			held := func(res, key string) bool { return res == oldRes && key == heldKey }

			if changed, _ := m.UpdateMIG(discover(t, n), held); changed {
				t.Fatal("an unchanged layout reported a change")
			}
			fresh, err := n.EnableMIG(5, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
			if err != nil {
				t.Fatal(err)
			}
			changed, unknown := m.UpdateMIG(discover(t, n), held)
			if !changed || len(unknown) != 0 {
				t.Fatalf("reconfiguration: changed %v unknown %v", changed, unknown)
			}
			select {
			case <-wake:
			default:
				t.Fatal("watchers of the old profile were not woken")
			}
			h := health(m, oldRes)
			if len(h) != 2 || h[heldKey] != pluginapi.Unhealthy || h[freeKey] != pluginapi.Unhealthy {
				t.Fatalf("vanished devices must stay listed Unhealthy first: %v", h)
			}
			if err := m.Retired(oldRes, []string{heldKey}); err == nil || !strings.Contains(err.Error(), heldKey) {
				t.Fatalf("Retired(%s) = %v", heldKey, err)
			}
			// A new allocation refuses it (one lock for lookup and check);
			// restoring the running container's files still decodes it.
			if _, err := m.AllocatableShares(oldRes, []string{heldKey}); err == nil || !strings.Contains(err.Error(), "no longer exists") {
				t.Fatalf("AllocatableShares(%s) = %v", heldKey, err)
			}
			if s, err := m.Shares(oldRes, []string{heldKey}); err != nil || len(s) != 1 || len(s[0].MIG) != 1 {
				t.Fatalf("Shares(%s) = %+v, %v", heldKey, s, err)
			}
			newRes := MIGResource(m.GPU(uuid).MIG[0].Profile)
			nh := health(m, newRes)
			if len(nh) != 2 || nh[uuid+"::mig::"+fresh[0]] != pluginapi.Healthy {
				t.Fatalf("new devices %v", nh)
			}
			if !strings.Contains(strings.Join(m.Resources(), ","), newRes) {
				t.Fatalf("resources %v lack %s", m.Resources(), newRes)
			}
			if m.GPU(uuid).MIG[0].UUID != fresh[0] {
				t.Fatalf("GPU's MIG list not updated: %+v", m.GPU(uuid).MIG)
			}

			// Next pass: the free device goes, the held one stays Unhealthy.
			if changed, _ := m.UpdateMIG(discover(t, n), held); !changed {
				t.Fatal("dropping the free retired device is a change")
			}
			if h := health(m, oldRes); len(h) != 1 || h[heldKey] != pluginapi.Unhealthy {
				t.Fatalf("after second pass %v", h)
			}
			if _, err := m.Shares(oldRes, []string{heldKey}); err != nil {
				t.Fatalf("a held retired device must still decode for its container: %v", err)
			}
			// The container ended: the last retired device goes.
			if changed, _ := m.UpdateMIG(discover(t, n), func(string, string) bool { return false }); !changed {
				t.Fatal("dropping the last retired device is a change")
			}
			if h := health(m, oldRes); len(h) != 0 {
				t.Fatalf("after release %v", h)
			}
			if changed, _ := m.UpdateMIG(discover(t, n), held); changed {
				t.Fatal("a settled layout reported a change")
			}
		})
	}
}

// TestUpdateMIGModeChange: turning MIG on retires the GPU's slot, memory
// and compute IDs (Unhealthy, then dropped) and turning it off brings them back.
func TestUpdateMIGModeChange(t *testing.T) {
	n := gputest.MustNew(gputest.DGXH100)
	m, _ := NewManager(discover(t, n), Options{SplitCount: 10, MemoryUnit: 1 << 30, MIG: true})
	none := func(string, string) bool { return false }
	if _, err := n.EnableMIG(0, nvml.GPU_INSTANCE_PROFILE_7_SLICE); err != nil {
		t.Fatal(err)
	}
	if changed, _ := m.UpdateMIG(discover(t, n), none); !changed {
		t.Fatal("MIG mode change not seen")
	}
	unhealthy := 0
	for _, d := range m.Devices(Memory) {
		if d.Health == pluginapi.Unhealthy {
			unhealthy++
			if !strings.HasPrefix(d.ID, m.GPUs()[0].UUID) {
				t.Fatalf("wrong GPU retired: %s", d.ID)
			}
		}
	}
	if want := m.MemoryUnits(m.GPUs()[0]); unhealthy != want || len(m.Devices(Memory)) != 8*want {
		t.Fatalf("%d of %d memory IDs unhealthy, want %d of %d", unhealthy, len(m.Devices(Memory)), want, 8*want)
	}
	if m.Capacity(Memory, m.GPUs()[0].UUID) != 0 {
		t.Fatal("a MIG GPU has no memory capacity")
	}
	m.UpdateMIG(discover(t, n), none)
	if got := len(m.Devices(Core)); got != 700 {
		t.Fatalf("core IDs after drop = %d, want 700", got)
	}
	n.DisableMIG(0)
	m.UpdateMIG(discover(t, n), none)
	if got := len(m.Devices(Core)); got != 800 {
		t.Fatalf("core IDs after MIG off = %d, want 800", got)
	}
	// MIG on and off again before the retired IDs were dropped: they come
	// back healthy, listed once.
	if _, err := n.EnableMIG(0, nvml.GPU_INSTANCE_PROFILE_7_SLICE); err != nil {
		t.Fatal(err)
	}
	m.UpdateMIG(discover(t, n), none)
	n.DisableMIG(0)
	if changed, _ := m.UpdateMIG(discover(t, n), none); !changed {
		t.Fatal("IDs coming back is a change")
	}
	if h := health(m, Core); len(h) != 800 || len(m.Devices(Core)) != 800 {
		t.Fatalf("%d core IDs listed, %d distinct", len(m.Devices(Core)), len(h))
	}
	for id, hl := range health(m, Core) {
		if hl != pluginapi.Healthy {
			t.Fatalf("%s is %s after coming back", id, hl)
		}
	}
	if err := m.Retired(Core, []string{m.GPUs()[0].UUID + "::core::0"}); err != nil {
		t.Fatalf("a device that came back is still retired: %v", err)
	}
}
