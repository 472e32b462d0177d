package reconcile

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
)

// FuzzReadBack: the reconciler's invariant over kubelet's listings, not
// only Aggregate's. Whatever the grouping, order and NUMA duplication of
// the entries, and with read-backs that list no pods (a restarting
// kubelet), every running container keeps exactly its state directories
// (one per gpu-mem and gpu-core allocation) read-back after read-back, and
// none other is made.
func FuzzReadBack(f *testing.F) {
	f.Add([]byte{0x12, 0x34, 0x56}, uint64(1), []byte{0, 1, 0})
	f.Add([]byte{0xff, 0x01, 0x80, 0x7f}, uint64(9), []byte{1, 1, 2})
	f.Fuzz(func(t *testing.T, plan []byte, seed uint64, listings []byte) {
		if len(plan) > 8 || len(listings) > 6 {
			return
		}
		rb := newReadBack(t)
		rng := rand.New(rand.NewPCG(seed, 2))
		type ctr struct {
			pod   string
			alloc map[string][]string
		}
		var ctrs []ctr
		want := map[string]bool{}
		next := map[string]int{} // GPU/kind → next free ID
		for i, b := range plan {
			g := rb.gpus[int(b)%len(rb.gpus)].UUID
			c := ctr{pod: fmt.Sprintf("p%d", i%3), alloc: map[string][]string{}}
			if n := int(b>>3) % 9; n > 0 {
				c.alloc[resource.Memory] = ids(g, "mem", next[g+"mem"], n)
				next[g+"mem"] += n
			}
			if n := int(b>>1) % 31; n > 0 && next[g+"core"]+n <= 100 {
				c.alloc[resource.Core] = ids(g, "core", next[g+"core"], n)
				next[g+"core"] += n
			}
			for res, list := range c.alloc {
				rb.allocate(res, list)
				kind, _ := resource.KindOf(res)
				want[allocation.Key(kind, list)] = true
			}
			ctrs = append(ctrs, c)
		}
		for i := 0; i < 3; i++ {
			rb.addPod(fmt.Sprintf("p%d", i), corev1.PodRunning)
		}
		for round, l := range append([]byte{0}, listings...) {
			resp := &podresourcesapi.ListPodResourcesResponse{}
			if l%3 != 2 { // 2: a restarting kubelet lists nothing
				for i, c := range ctrs {
					pr := &podresourcesapi.PodResources{Namespace: "ns", Name: c.pod, Containers: []*podresourcesapi.ContainerResources{
						{Name: fmt.Sprintf("c%d", i), Devices: asKubelet(rng, c.alloc)}}}
					resp.PodResources = append(resp.PodResources, pr)
				}
				rng.Shuffle(len(resp.PodResources), func(i, j int) {
					resp.PodResources[i], resp.PodResources[j] = resp.PodResources[j], resp.PodResources[i]
				})
			}
			rb.lst.resp = resp
			rb.once()
			var got []string
			if _, err := os.Stat(rb.r.Builder.StateDir + "/containers"); err == nil {
				got = rb.stateDirs()
			}
			var wantList []string
			for k := range want {
				wantList = append(wantList, k)
			}
			sort.Strings(wantList)
			if fmt.Sprint(got) != fmt.Sprint(wantList) {
				t.Fatalf("read-back %d: state directories %v, want %v", round, got, wantList)
			}
		}
	})
}
