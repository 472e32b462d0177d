package allocation

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/region"
)

// FuzzContainer: Allocate with any device IDs either refuses with an
// error or answers with limits that add up to exactly what the IDs say;
// it never panics.
func FuzzContainer(f *testing.F) {
	b, gpus := builder(f)
	g0, g1 := gpus[0].UUID, gpus[1].UUID
	f.Add(0, g0+"::mem::0,"+g1+"::mem::3")
	f.Add(0, g0+"::mem::0,"+g0+"::mem::0")
	f.Add(1, g0+"::core::0,"+g0+"::core::99,"+g1+"::core::1")
	f.Add(2, g0+"::gpu::1,garbage,::gpu::")
	f.Add(3, gpus[7].UUID+"::mig::"+gpus[7].MIG[0].UUID)
	f.Add(0, "")
	resources := []string{resource.Memory, resource.Core, resource.GPU, resource.MIGResource(gpus[7].MIG[0].Profile)}
	f.Fuzz(func(t *testing.T, r int, list string) {
		res := resources[uint(r)%uint(len(resources))]
		var ids []string
		if list != "" {
			ids = strings.Split(list, ",")
		}
		resp, err := b.Container(res, ids)
		if err != nil {
			return
		}
		if len(ids) == 0 {
			t.Fatal("empty ID list accepted")
		}
		kind, _ := resource.KindOf(res)
		var name string
		switch kind {
		case resource.KindMem:
			name = "limits"
		case resource.KindCore:
			name = "core-limits"
		default:
			return
		}
		l, err := region.OpenLimits(filepath.Join(b.ContainerDir(kind, ids), name))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var mem uint64
		var core int
		for _, d := range l.Devices() {
			mem += d.MemLimitBytes
			core += int(d.CoreLimitPct)
		}
		if kind == resource.KindMem && mem != uint64(len(ids))*b.Manager.Options().MemoryUnit ||
			kind == resource.KindCore && core != len(ids) || resp.Envs[EnvNVIDIA] == "" {
			t.Fatalf("%d IDs gave %d bytes, %d%%, env %v", len(ids), mem, core, resp.Envs)
		}
	})
}
