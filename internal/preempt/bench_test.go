package preempt

import (
	"fmt"
	"testing"
	"time"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
)

// BenchmarkFindFullCluster: a full cluster of 2,000 nodes × 8 GPUs, one
// single-GPU P3 pod per GPU of varied age; a P0 pod asks for 2 GPUs.
func BenchmarkFindFullCluster(b *testing.B) {
	const nodes = 2000
	specs := make([]partition.NodeSpec, nodes)
	for i := range specs {
		specs[i] = partition.NodeSpec{Name: fmt.Sprintf("n%d", i), Model: "A100", CPU: 128000, MemMiB: 1 << 20, GPUs: 8, GPUMemMiB: 81920, Islands: 2}
	}
	c, err := placement.NewCluster(specs)
	if err != nil {
		b.Fatal(err)
	}
	p, _ := placement.NewPolicy("tessera", c, placement.Options{})
	s := placement.NewScheduler(c, p, false)
	var running []Running
	for i := range nodes * 8 {
		d, err := s.Place(&placement.Request{Name: fmt.Sprint(i), CPUMilli: 1000, NumGPU: 1, GPUMilli: 1000})
		if err != nil {
			b.Fatal(err)
		}
		running = append(running, Running{ID: fmt.Sprint(i), Decision: d, Class: 3, Start: now.Add(-time.Duration(20+i*7919%1000) * time.Minute)})
	}
	pr := New(s, PolicyFrom(&schedv1.Default().Preemption))
	pod := Pending{Request: placement.Request{Name: "x", CPUMilli: 1000, NumGPU: 2, GPUMilli: 1000}, Class: 0}
	b.ResetTimer()
	for range b.N {
		plan, err := pr.Find(pod, running, now)
		if err != nil || len(plan.Victims) != 2 {
			b.Fatal(plan, err)
		}
	}
}
