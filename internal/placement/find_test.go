package placement

import (
	"slices"
	"testing"
)

func TestFindAgreesWithSchedule(t *testing.T) {
	c := testCluster(t, node("a", "T4", 8000, 2), node("b", "V100", 64000, 4))
	p, _ := NewPolicy("tessera", c, Options{})
	s := NewScheduler(c, p, false)
	reqs := []Request{
		{Name: "share", CPUMilli: 1000, NumGPU: 1, GPUMilli: 500},
		{Name: "two", CPUMilli: 1000, NumGPU: 2, GPUMilli: 1000, Models: []string{"V100"}},
		{Name: "too-big", CPUMilli: 1000, NumGPU: 8, GPUMilli: 1000},
		{Name: "invalid", NumGPU: 2, GPUMilli: 300},
	}
	for i := 0; i < 3; i++ {
		for _, r := range reqs {
			want, err := s.Schedule(&r)
			got, ok := s.Find(&r)
			if ok != (err == nil) || (ok && (got.Node != want.Node || !slices.Equal(got.Grant.Shares, want.Grant.Shares))) {
				t.Fatalf("%s: Find = %+v %v, Schedule = %+v %v", r.Name, got, ok, want, err)
			}
			if ok {
				if err := c.Reserve(got); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func TestScheduleOnAndFitsState(t *testing.T) {
	c := testCluster(t, node("a", "T4", 8000, 2), node("b", "V100", 64000, 4))
	p, _ := NewPolicy("tessera", c, Options{})
	s := NewScheduler(c, p, false)
	use(t, c, 1, 0, 1000, 1000, 1000, 0)
	whole2 := Request{Name: "w", CPUMilli: 1000, NumGPU: 2, GPUMilli: 1000}
	if _, ok := s.ScheduleOn(1, &whole2); ok {
		t.Fatal("node b has one free GPU, yet two whole GPUs fit")
	}
	d, ok := s.ScheduleOn(0, &whole2)
	if !ok || d.Node != 0 || len(d.Grant.Shares) != 2 {
		t.Fatalf("ScheduleOn(a) = %+v, %v", d, ok)
	}
	// On a copy of b with GPU 0's pod gone, two whole GPUs fit; the real node is unchanged.
	n := c.Nodes[1]
	n.GPUs = slices.Clone(n.GPUs)
	n.GPUs[0].FreeMilli = 1000
	if !c.FitsState(1, &n, &whole2) || c.FitsState(1, &c.Nodes[1], &whole2) {
		t.Error("FitsState does not judge the given state")
	}
	if c.Admits(0, &Request{NumGPU: 1, GPUMilli: 10, Models: []string{"V100"}}) || !c.Admits(1, &Request{NumGPU: 1, GPUMilli: 10, Models: []string{"V100"}}) {
		t.Error("Admits ignores the model list")
	}
	c.Cordon(0, true)
	if _, ok := s.ScheduleOn(0, &whole2); ok || c.Admits(0, &whole2) {
		t.Error("a cordoned node was offered")
	}
}
