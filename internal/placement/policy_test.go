package placement

import (
	"math"
	"testing"

	"github.com/tessera-gpu/tessera/internal/partition"
)

func share(milli int32) Request {
	return Request{Name: "p", CPUMilli: 1000, NumGPU: 1, GPUMilli: milli}
}

func TestBestfitPicksTightestNodeAndGPU(t *testing.T) {
	c := testCluster(t, node("big", "T4", 64000, 4), node("small", "T4", 64000, 2))
	use(t, c, 1, 0, 600, 0)
	d, err := schedule(t, c, "bestfit", share(300))
	if err != nil || d.NodeName != "small" || d.Grant.Shares[0].GPU != 0 {
		t.Fatalf("bestfit chose %+v, %v; want GPU 0 of small", d, err)
	}
}

func TestBinpackAndSpreadDisagree(t *testing.T) {
	c := testCluster(t, node("empty", "T4", 64000, 2), node("used", "T4", 64000, 2))
	use(t, c, 1, 8000, 500, 0)
	d, _ := schedule(t, c, "binpack", share(200))
	if d.NodeName != "used" || d.Grant.Shares[0].GPU != 0 {
		t.Errorf("binpack chose %s GPU %d, want the used node's used GPU", d.NodeName, d.Grant.Shares[0].GPU)
	}
	d, _ = schedule(t, c, "spread", share(200))
	if d.NodeName != "empty" {
		t.Errorf("spread chose %s, want the empty node", d.NodeName)
	}
}

func TestFGDFollowsTheTargetWorkload(t *testing.T) {
	// One node, GPU 0 idle, GPU 1 with 530 free. Where a 470 share goes
	// depends on what the workload will need next.
	for _, tc := range []struct {
		name     string
		workload []Request
		wantGPU  int
	}{
		// More 470s to come: keep two 530 GPUs rather than leave 60 unusable.
		{"shares follow", []Request{share(470)}, 0},
		// Whole GPUs to come: fill the broken GPU, keep the idle one whole.
		{"whole GPUs follow", []Request{share(1000)}, 1},
	} {
		c := testCluster(t, node("n", "T4", 64000, 2))
		use(t, c, 0, 0, 0, 470)
		p, _ := NewPolicy("fgd", c, Options{Workload: NewWorkload(c, tc.workload, 1)})
		r := share(470)
		d, err := NewScheduler(c, p, false).Schedule(&r)
		if err != nil || d.Grant.Shares[0].GPU != tc.wantGPU {
			t.Errorf("%s: fgd chose %+v, %v; want GPU %d", tc.name, d.Grant.Shares, err, tc.wantGPU)
		}
	}
}

func TestFGDScoreIsPublishedSigmoidAndTiesGoFirst(t *testing.T) {
	var p fgd
	for _, tc := range []struct {
		rank float64
		want int64
	}{{0, 50}, {-1000, 26}, {1000, 73}, {-30, 49}, {30, 50}} {
		if got := p.NodeScore(NodeView{}, nil, 0, tc.rank); got != tc.want {
			t.Errorf("score(%v) = %d, want %d", tc.rank, got, tc.want)
		}
	}
	c := testCluster(t, node("a", "T4", 64000, 2), node("b", "T4", 64000, 2), node("c", "T4", 64000, 2))
	d, _ := schedule(t, c, "fgd", share(500))
	if d.NodeName != "a" {
		t.Errorf("tie went to %s, want the first node", d.NodeName)
	}
}

func TestRandomIsSeededAndFeasible(t *testing.T) {
	pick := func(seed uint64) []int {
		c := testCluster(t, node("a", "T4", 64000, 2), node("tiny", "T4", 100, 2), node("b", "T4", 64000, 2), node("c", "T4", 64000, 2))
		p, _ := NewPolicy("random", c, Options{Seed: seed})
		s := NewScheduler(c, p, false)
		var out []int
		for i := 0; i < 12; i++ {
			r := share(100)
			d, err := s.Place(&r)
			if err != nil {
				t.Fatal(err)
			}
			if d.NodeName == "tiny" {
				t.Fatal("random chose a node without the CPU")
			}
			out = append(out, d.Node)
		}
		return out
	}
	a, b, other := pick(7), pick(7), pick(8)
	if !equalInts(a, b) {
		t.Errorf("same seed, different choices: %v %v", a, b)
	}
	if equalInts(a, other) {
		t.Errorf("seeds 7 and 8 made the same 12 choices: %v", a)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTesseraLeavesOversubscribedModelsToRestrictedPods(t *testing.T) {
	c := testCluster(t, node("t4", "T4", 64000, 2), node("v100", "V100", 64000, 2))
	var w []Request
	for i := 0; i < 8; i++ {
		w = append(w, Request{CPUMilli: 1000, NumGPU: 1, GPUMilli: 1000, Models: []string{"T4"}})
	}
	w = append(w, share(1000), share(1000))
	opts := Options{Workload: NewWorkload(c, w, 1)}
	p, _ := NewPolicy("tessera", c, opts)
	r := share(1000)
	d, err := NewScheduler(c, p, false).Schedule(&r)
	if err != nil || d.NodeName != "v100" {
		t.Errorf("tessera placed an unrestricted pod on %s (%v), want v100", d.NodeName, err)
	}
	// A pod that may only use T4 is not held back from it.
	r.Models = []string{"T4"}
	if d, err = NewScheduler(c, p, false).Schedule(&r); err != nil || d.NodeName != "t4" {
		t.Errorf("a T4-only pod went to %s (%v)", d.NodeName, err)
	}
}

func TestTesseraAvoidsStrandingGPUsByCPU(t *testing.T) {
	// The CPU-poor node comes first, so fgd's tie-break would pick it; its
	// two idle GPUs would then have too little CPU left to be used.
	c := testCluster(t, node("poor", "T4", 12000, 2), node("rich", "T4", 96000, 2))
	w := []Request{share(1000), share(500), {CPUMilli: 8000}}
	for i := range w {
		w[i].CPUMilli = 8000
	}
	p, _ := NewPolicy("tessera", c, Options{Workload: NewWorkload(c, w, 1)})
	r := Request{Name: "cpu-only", CPUMilli: 8000}
	d, err := NewScheduler(c, p, false).Schedule(&r)
	if err != nil || d.NodeName != "rich" {
		t.Fatalf("tessera placed a CPU-only pod on %s (%v), want rich", d.NodeName, err)
	}
}

func TestSliverWaste(t *testing.T) {
	w := &Workload{Classes: []Class{
		{NumGPU: 1, GPUMilli: 470, Freq: 0.5}, {NumGPU: 1, GPUMilli: 320, Freq: 0.49},
		{NumGPU: 1, GPUMilli: 160, Freq: 0.01}, // too rare to count on
	}}
	waste := sliverWaste(w, 0.03)
	for r, want := range map[int]float64{0: 0, 190: 190, 320: 0, 530: 60, 640: 0, 1000: 0, 999: 39} {
		if waste[r] != want {
			t.Errorf("waste[%d] = %v, want %v", r, waste[r], want)
		}
	}
}

func TestFragmentationByHand(t *testing.T) {
	c := testCluster(t, node("n", "T4", 16000, 4), node("v", "V100", 16000, 1))
	use(t, c, 0, 10000, 200, 1000, 1000, 500)
	w := &Workload{Classes: []Class{
		{NumGPU: 1, GPUMilli: 600, CPUMilli: 1000, AnyModel: true, Freq: 0.5},   // fits GPU 0; GPU 3's 500 is too small
		{NumGPU: 2, GPUMilli: 1000, CPUMilli: 8000, AnyModel: true, Freq: 0.25}, // CPU short: all 1300+... idle
		{CPUMilli: 100, Freq: 0.25}, // CPU-only: all idle
	}}
	f := NewFragmentation(w)
	idle := 800.0 + 500 // GPU 0 has 800 free, GPU 3 has 500 free, GPUs 1-2 are full
	want := 0.5*500 + 0.25*idle + 0.25*idle
	if got := f.Node(&c.Nodes[0], c.ModelOf(0)); math.Abs(got-want) > 1e-9 {
		t.Errorf("fragmentation = %v, want %v", got, want)
	}
	// A model the class excludes makes all idle compute fragmented.
	w.Classes[0].AnyModel, w.Classes[0].Models = false, c.modelMask([]string{"V100"})
	f = NewFragmentation(w)
	if got, want := f.Node(&c.Nodes[0], c.ModelOf(0)), idle; math.Abs(got-want) > 1e-9 {
		t.Errorf("with the class excluding T4: %v, want %v", got, want)
	}
	empty := partition.Node{}
	if f.Node(&empty, 0) != 0 {
		t.Error("a node without GPUs has fragmentation")
	}
}

func TestWorkloadCoverage(t *testing.T) {
	c := testCluster(t, node("n", "T4", 1, 1))
	var pods []Request
	for i, n := range []int{50, 30, 15, 4, 1} {
		for k := 0; k < n; k++ {
			pods = append(pods, share(int32(100*(i+1))))
		}
	}
	w := NewWorkload(c, pods, 0.95)
	if len(w.Classes) != 3 {
		t.Fatalf("%d classes cover 95%%, want 3", len(w.Classes))
	}
	sum := 0.0
	for _, cl := range w.Classes {
		sum += cl.Freq
	}
	if math.Abs(sum-1) > 1e-12 || math.Abs(w.Classes[0].Freq-50.0/95) > 1e-12 {
		t.Errorf("frequencies not renormalised: %+v", w.Classes)
	}
}

// Without a workload tessera measures against single-GPU shares that need no
// CPU. Taking a node's last CPU then strands nothing; it must not turn the
// rank into NaN (0/0), which ranked the node below every other.
func TestTesseraWithoutWorkloadRanksNodeLosingAllCPU(t *testing.T) {
	c := testCluster(t, node("a", "T4", 4000, 2), node("b", "T4", 8000, 2))
	p, _ := NewPolicy("tessera", c, Options{})
	r := Request{Name: "p", CPUMilli: 4000, NumGPU: 1, GPUMilli: 500}
	sh := c.ShapeOf(&r)
	for i := range c.Nodes {
		if rank := p.Rank(NodeView{Index: i, Model: c.ModelOf(i), Node: &c.Nodes[i]}, &sh, 1); math.IsNaN(rank) {
			t.Errorf("node %s: rank is NaN", c.Nodes[i].Name)
		}
	}
	// Both nodes rate the same; the tie goes to the first.
	if d, err := NewScheduler(c, p, false).Schedule(&r); err != nil || d.NodeName != "a" {
		t.Errorf("tessera chose %+v (%v), want the tie to go to a", d, err)
	}
}
