package preferred

import (
	"strings"
	"testing"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
)

// FuzzPreferred: whatever kubelet sends (foreign, malformed or repeated
// IDs, any size, mustInclude outside the available list), the answer is
// at most max(size, len(mustInclude)) distinct known IDs of the resource,
// and
// nothing panics; gpu-mem and gpu-core answers for a container not known
// to want several GPUs lie on one GPU.
func FuzzPreferred(f *testing.F) {
	fx := newFixture(&testing.T{}, configv1.PlacementBinpack, true)
	g0, g1 := fx.gpus[0].UUID, fx.gpus[1].UUID
	f.Add(0, g0+"::mem::0,"+g0+"::mem::1,"+g1+"::mem::0", g1+"::mem::0", 2)
	f.Add(1, g0+"::gpu::0,"+g1+"::gpu::1,"+g1+"::gpu::1", "", 2)
	f.Add(2, g0+"::core::5,garbage,::core::,"+g0+"::core::-1", g0+"::core::99", 3)
	f.Add(0, "", "", -4)
	f.Add(0, g0+"::mem::0,"+g0+"::mem::0,"+g0+"::mem::1", "", 2)
	resources := []string{resource.Memory, resource.GPU, resource.Core, resource.MIGPrefix + "1g.10gb"}
	f.Fuzz(func(t *testing.T, r int, available, must string, size int) {
		if size > 1<<12 {
			size = 1 << 12
		}
		res := resources[uint(r)%uint(len(resources))]
		ids := fx.c.Preferred(res, split(available), split(must), size)
		if len(ids) > max(size, len(split(must))) {
			t.Fatalf("%d IDs for size %d", len(ids), size)
		}
		seen := map[string]bool{}
		for _, id := range ids {
			if _, err := fx.c.Manager.Lookup(res, id); err != nil {
				t.Fatalf("answered %v", err)
			}
			if seen[id] {
				t.Fatalf("%s answered twice: %v", id, ids)
			}
			seen[id] = true
		}
		if (res == resource.Memory || res == resource.Core) && len(split(must)) == 0 && len(resource.GPUsOf(ids)) > 1 {
			t.Fatalf("spread over %d GPUs: %v", len(resource.GPUsOf(ids)), ids)
		}
	})
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
