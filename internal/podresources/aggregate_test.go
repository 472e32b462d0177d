package podresources

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

const (
	mem  = "tessera.io/gpu-mem"
	core = "tessera.io/gpu-core"
)

// kubeletEntries is how kubelet lists a container's IDs: one entry per ID,
// and one per NUMA node for a device with topology.
func kubeletEntries(res string, ids []string, numaNodes int) []*podresourcesapi.ContainerDevices {
	var out []*podresourcesapi.ContainerDevices
	for _, id := range ids {
		for n := 0; n < numaNodes; n++ {
			out = append(out, &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: []string{id},
				Topology: &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: int64(n)}}}})
		}
	}
	return out
}

func idsOf(gpu, kind string, n int) []string {
	var ids []string
	for i := 0; i < n; i++ {
		ids = append(ids, fmt.Sprintf("%s::%s::%d", gpu, kind, i))
	}
	return ids
}

// TestAggregateKubeletShape: gpu-mem 8 and gpu-core 30 as kubelet lists
// them (38 single-ID entries, interleaved; twice each with two NUMA
// nodes) aggregate to the two whole sets.
func TestAggregateKubeletShape(t *testing.T) {
	memIDs, coreIDs := idsOf("GPU-a", "mem", 8), idsOf("GPU-a", "core", 30)
	for _, numa := range []int{1, 2} {
		devs := append(kubeletEntries(mem, memIDs, numa), kubeletEntries(core, coreIDs, numa)...)
		rand.New(rand.NewPCG(1, 2)).Shuffle(len(devs), func(i, j int) { devs[i], devs[j] = devs[j], devs[i] })
		resp := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
			{Name: "p", Namespace: "ns", Containers: []*podresourcesapi.ContainerResources{
				{Name: "sidecar"},
				{Name: "c", Devices: devs},
			}},
		}}
		pods := Aggregate(resp)
		if len(pods) != 1 || len(pods[0].Containers) != 2 {
			t.Fatalf("numa %d: %+v", numa, pods)
		}
		c := pods[0].Container("c")
		sort.Strings(coreIDs)
		if c == nil || !reflect.DeepEqual(c.Devices, map[string][]string{mem: memIDs, core: coreIDs}) {
			t.Fatalf("numa %d: container c = %+v", numa, c)
		}
		if s := pods[0].Container("sidecar"); s == nil || len(s.Devices) != 0 {
			t.Fatalf("numa %d: a container listed without devices must be there with none: %+v", numa, s)
		}
		if pods[0].Container("init") != nil {
			t.Fatal("found a container that is not listed")
		}
	}
}

// TestAggregateEmpty: no answer and an empty one are no pods.
func TestAggregateEmpty(t *testing.T) {
	if got := Aggregate(nil); len(got) != 0 {
		t.Fatalf("Aggregate(nil) = %v", got)
	}
	if got := Aggregate(&podresourcesapi.ListPodResourcesResponse{}); len(got) != 0 {
		t.Fatalf("Aggregate(empty) = %v", got)
	}
}

// entry is one (pod, container, resource, ID) of a fuzzed listing; res ""
// is a container listed without devices.
type entry struct {
	ns, pod, ctr, res, id string
	split                 bool // start a new ContainerDevices entry
}

var fuzzResources = []string{mem, core, "tessera.io/gpu", ""}

// decodePlan turns fuzz bytes into entries, three bytes each.
func decodePlan(plan []byte) []entry {
	var out []entry
	for i := 0; i+2 < len(plan); i += 3 {
		a, b, c := plan[i], plan[i+1], plan[i+2]
		e := entry{
			ns:    fmt.Sprintf("ns%d", a>>2&1),
			pod:   fmt.Sprintf("p%d", a&3),
			ctr:   fmt.Sprintf("c%d", b&3),
			res:   fuzzResources[b>>2&3],
			split: b>>4&1 == 1,
		}
		if e.res != "" && c%20 != 19 { // 19: an empty ID
			e.id = fmt.Sprintf("GPU-%d::u::%d", c%20%3, c%20)
		}
		out = append(out, e)
	}
	return out
}

type canon map[string]map[string][]string // ns/pod/ctr → resource → sorted IDs

// union is what Aggregate must return: the set union of every
// container's IDs per resource, and every listed container.
func union(entries []entry) canon {
	sets := map[string]map[string]map[string]bool{}
	for _, e := range entries {
		k := e.ns + "/" + e.pod + "/" + e.ctr
		if sets[k] == nil {
			sets[k] = map[string]map[string]bool{}
		}
		if e.res == "" || e.id == "" {
			continue
		}
		if sets[k][e.res] == nil {
			sets[k][e.res] = map[string]bool{}
		}
		sets[k][e.res][e.id] = true
	}
	out := canon{}
	for k, byRes := range sets {
		out[k] = map[string][]string{}
		for res, set := range byRes {
			for id := range set {
				out[k][res] = append(out[k][res], id)
			}
			sort.Strings(out[k][res])
		}
	}
	return out
}

// asPlanned lists the entries in their order, grouping consecutive ones
// into the same pod item, container and device entry unless the plan
// splits them: any grouping, pods and containers repeated.
func asPlanned(entries []entry) *podresourcesapi.ListPodResourcesResponse {
	resp := &podresourcesapi.ListPodResourcesResponse{}
	var pr *podresourcesapi.PodResources
	var cr *podresourcesapi.ContainerResources
	var dev *podresourcesapi.ContainerDevices
	for _, e := range entries {
		if pr == nil || pr.Namespace != e.ns || pr.Name != e.pod {
			pr = &podresourcesapi.PodResources{Namespace: e.ns, Name: e.pod}
			resp.PodResources = append(resp.PodResources, pr)
			cr = nil
		}
		if cr == nil || cr.Name != e.ctr {
			cr = &podresourcesapi.ContainerResources{Name: e.ctr}
			pr.Containers = append(pr.Containers, cr)
			dev = nil
		}
		if e.res == "" {
			continue
		}
		if dev == nil || e.split || dev.ResourceName != e.res {
			dev = &podresourcesapi.ContainerDevices{ResourceName: e.res}
			cr.Devices = append(cr.Devices, dev)
		}
		dev.DeviceIds = append(dev.DeviceIds, e.id)
	}
	return resp
}

// asKubelet lists every ID in its own entry, in random order, some twice
// (a device on two NUMA nodes).
func asKubelet(entries []entry, rng *rand.Rand) *podresourcesapi.ListPodResourcesResponse {
	resp := &podresourcesapi.ListPodResourcesResponse{}
	for _, e := range entries {
		cr := &podresourcesapi.ContainerResources{Name: e.ctr}
		if e.res != "" {
			for n := 0; n < 1+rng.IntN(2); n++ {
				cr.Devices = append(cr.Devices, &podresourcesapi.ContainerDevices{ResourceName: e.res, DeviceIds: []string{e.id}})
			}
		}
		resp.PodResources = append(resp.PodResources, &podresourcesapi.PodResources{Namespace: e.ns, Name: e.pod,
			Containers: []*podresourcesapi.ContainerResources{cr}})
	}
	rng.Shuffle(len(resp.PodResources), func(i, j int) {
		resp.PodResources[i], resp.PodResources[j] = resp.PodResources[j], resp.PodResources[i]
	})
	return resp
}

// checkAggregate asserts Aggregate(resp) is want, with sorted pods,
// containers and IDs and no duplicates.
func checkAggregate(t *testing.T, how string, resp *podresourcesapi.ListPodResourcesResponse, want canon) {
	t.Helper()
	pods := Aggregate(resp)
	got := canon{}
	for i, p := range pods {
		if i > 0 && (pods[i-1].Namespace > p.Namespace || pods[i-1].Namespace == p.Namespace && pods[i-1].Name >= p.Name) {
			t.Fatalf("%s: pods out of order or repeated: %s/%s after %s/%s", how, p.Namespace, p.Name, pods[i-1].Namespace, pods[i-1].Name)
		}
		for j, c := range p.Containers {
			if j > 0 && p.Containers[j-1].Name >= c.Name {
				t.Fatalf("%s: containers of %s out of order or repeated", how, p.Name)
			}
			if p.Container(c.Name) != &p.Containers[j] {
				t.Fatalf("%s: Container(%q) does not find it", how, c.Name)
			}
			byRes := map[string][]string{}
			for res, ids := range c.Devices {
				if len(ids) == 0 {
					t.Fatalf("%s: resource %s present without IDs", how, res)
				}
				if !sort.StringsAreSorted(ids) {
					t.Fatalf("%s: IDs not sorted: %v", how, ids)
				}
				byRes[res] = ids
			}
			got[p.Namespace+"/"+p.Name+"/"+c.Name] = byRes
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %v\nwant %v", how, got, want)
	}
}

// FuzzAggregate: whatever the grouping, order and duplication of kubelet's
// entries, Aggregate returns the set union per container and resource.
func FuzzAggregate(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0, 2, 0, 4, 3, 0, 4, 3}, int64(0))     // one container, mem and core, a duplicate
	f.Add([]byte{0, 0, 1, 1, 0, 1, 0, 0, 2, 1, 1, 5}, int64(7))     // a pod listed twice, interleaved
	f.Add([]byte{0, 16, 1, 0, 16, 2, 0, 16, 1, 0, 12, 0}, int64(3)) // split entries; a container without devices
	f.Add([]byte{4, 0, 1, 0, 0, 1, 4, 1, 19, 7, 11, 18}, int64(-1)) // same pod name in two namespaces; an empty ID
	f.Add([]byte{}, int64(1))
	f.Fuzz(func(t *testing.T, plan []byte, seed int64) {
		entries := decodePlan(plan)
		want := union(entries)
		checkAggregate(t, "as planned", asPlanned(entries), want)
		rng := rand.New(rand.NewPCG(uint64(seed), 1))
		checkAggregate(t, "one entry per ID, shuffled, NUMA duplicates", asKubelet(entries, rng), want)
		rng.Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
		checkAggregate(t, "shuffled plan", asPlanned(entries), want)
	})
}
