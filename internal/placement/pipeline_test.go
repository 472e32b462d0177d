package placement

import (
	"errors"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/internal/partition"
)

func testCluster(t *testing.T, specs ...partition.NodeSpec) *Cluster {
	t.Helper()
	c, err := NewCluster(specs)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func node(name, model string, cpu int64, gpus int) partition.NodeSpec {
	return partition.NodeSpec{Name: name, Model: model, CPU: cpu, MemMiB: 1 << 20, GPUs: gpus, GPUMemMiB: 16384}
}

// use reserves shares (milli per GPU index) on node i directly.
func use(t *testing.T, c *Cluster, i int, cpu int64, milli ...int32) {
	t.Helper()
	g := partition.Grant{CPU: cpu}
	for gpu, m := range milli {
		if m > 0 {
			g.Shares = append(g.Shares, partition.Share{GPU: gpu, Milli: m})
		}
	}
	if err := c.Reserve(Decision{Node: i, Grant: g}); err != nil {
		t.Fatal(err)
	}
}

func schedule(t *testing.T, c *Cluster, policy string, r Request) (Decision, error) {
	t.Helper()
	p, err := NewPolicy(policy, c, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return NewScheduler(c, p, false).Schedule(&r)
}

func TestFilters(t *testing.T) {
	c := testCluster(t,
		node("cpu-poor", "T4", 2000, 2),
		node("v100", "V100", 64000, 2),
		node("full-gpus", "T4", 64000, 2),
	)
	use(t, c, 2, 0, 800, 800)
	cases := []struct {
		name string
		r    Request
		want []string // filter that rejects each node, "" if it fits
	}{
		{"fits by CPU but not by GPU", Request{CPUMilli: 4000, NumGPU: 1, GPUMilli: 500, Models: []string{"T4"}},
			[]string{"cpu", "gpu-model", "gpu-share"}},
		{"memory", Request{MemMiB: 2 << 20}, []string{"memory", "memory", "memory"}},
		{"model allowed", Request{NumGPU: 1, GPUMilli: 100, Models: []string{"V100"}}, []string{"gpu-model", "", "gpu-model"}},
		{"whole GPUs for multi-GPU", Request{NumGPU: 2, GPUMilli: 1000}, []string{"", "", "gpu-share"}},
		{"CPU-only pod ignores GPUs", Request{CPUMilli: 1000}, []string{"", "", ""}},
		{"unknown model admits nothing", Request{NumGPU: 1, GPUMilli: 100, Models: []string{"H100"}}, []string{"gpu-model", "gpu-model", "gpu-model"}},
	}
	for _, tc := range cases {
		sh := c.ShapeOf(&tc.r)
		for i := range c.Nodes {
			got := ""
			if f := feasible(&c.Nodes[i], c.ModelOf(i), &sh); f >= 0 {
				got = Filters[f].Name
			}
			if got != tc.want[i] {
				t.Errorf("%s, node %s: rejected by %q, want %q", tc.name, c.Nodes[i].Name, got, tc.want[i])
			}
		}
	}
}

func TestNVLinkIsland(t *testing.T) {
	s := partition.NodeSpec{Name: "dgx", Model: "A100", CPU: 96000, MemMiB: 1 << 20, GPUs: 8, GPUMemMiB: 40960, Islands: 2}
	c := testCluster(t, s)
	// Island 0 = GPUs 0-3, island 1 = GPUs 4-7. Leave 3 free GPUs on each.
	use(t, c, 0, 0, 1000, 0, 0, 0, 1000, 0, 0, 0)
	r := Request{Name: "train", NumGPU: 4, GPUMilli: 1000, SameIsland: true}
	if _, err := schedule(t, c, "tessera", r); !errors.Is(err, ErrUnschedulable) || !strings.Contains(err.Error(), "nvlink-island") {
		t.Fatalf("4 GPUs on one island: err = %v, want unschedulable by nvlink-island", err)
	}
	r.SameIsland = false
	d, err := schedule(t, c, "tessera", r)
	if err != nil || len(d.Grant.Shares) != 4 {
		t.Fatalf("without the island requirement: %+v, %v", d, err)
	}
	// Three GPUs fit in one island, so a 3-GPU pod gets one island.
	r = Request{Name: "three", NumGPU: 3, GPUMilli: 1000}
	d, err = schedule(t, c, "bestfit", r)
	if err != nil {
		t.Fatal(err)
	}
	isl := c.Nodes[0].GPUs[d.Grant.Shares[0].GPU].Island
	for _, sh := range d.Grant.Shares {
		if c.Nodes[0].GPUs[sh.GPU].Island != isl {
			t.Fatalf("3-GPU pod split over islands: %+v", d.Grant.Shares)
		}
	}
}

func TestCandidatesDeduplicateEqualGPUs(t *testing.T) {
	c := testCluster(t, node("n", "T4", 64000, 4))
	use(t, c, 0, 0, 500, 0, 500, 0)
	sh := c.ShapeOf(&Request{NumGPU: 1, GPUMilli: 300})
	got := candidates(&c.Nodes[0], &sh, nil)
	if len(got) != 2 || got[0] != 1<<0 || got[1] != 1<<1 {
		t.Fatalf("candidates = %v, want GPU 0 (half used) and GPU 1 (idle)", got)
	}
}

func TestUnschedulableExplains(t *testing.T) {
	c := testCluster(t, node("a", "T4", 1000, 1), node("b", "T4", 64000, 1))
	_, err := schedule(t, c, "fgd", Request{Name: "p", CPUMilli: 2000, NumGPU: 2, GPUMilli: 1000})
	if !errors.Is(err, ErrUnschedulable) || !strings.Contains(err.Error(), "1 nodes fail cpu, 1 nodes fail gpu-share") {
		t.Fatalf("err = %v", err)
	}
}

func TestScheduleDoesNotReserveAndPlaceDoes(t *testing.T) {
	c := testCluster(t, node("a", "T4", 8000, 2))
	p, _ := NewPolicy("tessera", c, Options{})
	s := NewScheduler(c, p, false)
	r := Request{Name: "p", CPUMilli: 1000, NumGPU: 1, GPUMilli: 400}
	if _, err := s.Schedule(&r); err != nil || c.Nodes[0].FreeCPU != 8000 {
		t.Fatalf("schedule changed the node or failed: %v", err)
	}
	d, err := s.Place(&r)
	if err != nil || c.Nodes[0].FreeCPU != 7000 {
		t.Fatalf("place: %v", err)
	}
	if err := c.Release(d); err != nil || c.Nodes[0].FreeMilli() != 2000 {
		t.Fatalf("release: %v", err)
	}
	if err := c.Release(d); err == nil {
		t.Fatal("releasing twice succeeded")
	}
}

func TestRequestValidation(t *testing.T) {
	c := testCluster(t, node("a", "T4", 8000, 2))
	for _, r := range []Request{
		{CPUMilli: -1}, {NumGPU: 1, GPUMilli: 0}, {NumGPU: 1, GPUMilli: 1001}, {GPUMilli: 5}, {NumGPU: 65, GPUMilli: 1},
		{NumGPU: 2, GPUMilli: 500}, // multi-GPU pods take whole GPUs
	} {
		if _, err := schedule(t, c, "bestfit", r); err == nil || errors.Is(err, ErrUnschedulable) {
			t.Errorf("%+v: err = %v, want a validation error", r, err)
		}
	}
}

// The cluster releases only what it reserved: a grant it never gave out is
// refused even when the node holds enough to cover it (another pod's share),
// and the node is left as it was.
func TestReleaseOfGrantNeverReservedFails(t *testing.T) {
	c := testCluster(t, node("a", "T4", 8000, 2))
	held := Decision{Node: 0, Grant: partition.Grant{CPU: 2000, MemMiB: 512, Shares: []partition.Share{{GPU: 0, Milli: 500}}}}
	if err := c.Reserve(held); err != nil {
		t.Fatal(err)
	}
	before := c.Nodes[0]
	before.GPUs = append([]partition.GPU(nil), c.Nodes[0].GPUs...)
	for _, g := range []partition.Grant{
		{CPU: 2000, MemMiB: 512, Shares: []partition.Share{{GPU: 0, Milli: 300}}}, // less than held on GPU 0
		{CPU: 1000},              // CPU only, within what is held
		{CPU: 2000, MemMiB: 512}, // the pod's CPU without its share
		{Shares: []partition.Share{{GPU: 0, Milli: 500}}}, // the share without the CPU
	} {
		if err := c.Release(Decision{Node: 0, Grant: g}); err == nil {
			t.Errorf("release of %+v, never reserved, succeeded", g)
		}
	}
	if c.Nodes[0].FreeCPU != before.FreeCPU || c.Nodes[0].FreeMemMiB != before.FreeMemMiB || c.Nodes[0].GPUs[0] != before.GPUs[0] {
		t.Fatalf("refused releases changed the node: %+v", c.Nodes[0])
	}
	if err := c.Release(held); err != nil {
		t.Fatalf("release of the reserved grant: %v", err)
	}
	if err := c.Release(held); err == nil {
		t.Fatal("a grant released twice")
	}
}

// SameNUMA keeps a multi-GPU pod on one host NUMA node. A node of 8 GPUs
// in 4 NVLink islands (pairs) and 2 NUMA nodes (0-3, 4-7) with GPUs 0 and 4
// taken: 3 free on each NUMA node, 2 free in islands 1 and 3.
func TestNUMANode(t *testing.T) {
	s := partition.NodeSpec{Name: "n", Model: "A100", CPU: 96000, MemMiB: 1 << 20, GPUs: 8, GPUMemMiB: 40960, Islands: 4, NUMANodes: 2}
	c := testCluster(t, s)
	use(t, c, 0, 0, 1000, 0, 0, 0, 1000, 0, 0, 0)
	r := Request{Name: "four", NumGPU: 4, GPUMilli: 1000, SameNUMA: true}
	if _, err := schedule(t, c, "tessera", r); !errors.Is(err, ErrUnschedulable) || !strings.Contains(err.Error(), "numa-node") {
		t.Fatalf("4 GPUs on one NUMA node: err = %v, want unschedulable by numa-node", err)
	}
	numaOf := func(d Decision) map[int8]bool {
		m := map[int8]bool{}
		for _, sh := range d.Grant.Shares {
			m[c.Nodes[0].GPUs[sh.GPU].NUMA] = true
		}
		return m
	}
	// Three GPUs: no island has 3, but one NUMA node does.
	r = Request{Name: "three", NumGPU: 3, GPUMilli: 1000, SameNUMA: true}
	d, err := schedule(t, c, "tessera", r)
	if err != nil || len(numaOf(d)) != 1 {
		t.Fatalf("3 GPUs on one NUMA node: %+v, %v", d.Grant.Shares, err)
	}
	// Two GPUs of one island inside one NUMA node; with SameIsland too.
	r = Request{Name: "two", NumGPU: 2, GPUMilli: 1000, SameNUMA: true, SameIsland: true}
	d, err = schedule(t, c, "bestfit", r)
	if err != nil || len(numaOf(d)) != 1 || c.Nodes[0].GPUs[d.Grant.Shares[0].GPU].Island != c.Nodes[0].GPUs[d.Grant.Shares[1].GPU].Island {
		t.Fatalf("2 GPUs, one island in one NUMA node: %+v, %v", d.Grant.Shares, err)
	}
}
