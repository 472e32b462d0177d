package placement

import (
	"fmt"
	"testing"

	"github.com/tessera-gpu/tessera/internal/partition"
)

// The engine keeps no state beyond the cluster's reservations, so a
// restarted scheduler that re-reserves the grants of running pods (what a
// Kubernetes scheduler reads back from bound pods) decides exactly as the
// one that never stopped.
func TestRestartFromReservations(t *testing.T) {
	var specs []partition.NodeSpec
	for i := 0; i < 30; i++ {
		specs = append(specs, node(fmt.Sprint("n", i), []string{"T4", "V100"}[i%2], int64(16000+4000*(i%4)), 1+i%4))
	}
	var pods []Request
	for i := 0; i < 120; i++ {
		pods = append(pods, Request{Name: fmt.Sprint("p", i), CPUMilli: int64(1000 * (i % 5)), NumGPU: 1 + i%7/6, GPUMilli: int32([]int{230, 470, 810, 1000, 320, 1000, 1000}[i%7])})
	}
	start := func() *Scheduler {
		c, _ := NewCluster(specs)
		p, _ := NewPolicy("tessera", c, Options{Workload: NewWorkload(c, pods, 0.95)})
		return NewScheduler(c, p, false)
	}
	running := start()
	var grants []Decision
	for i := range pods[:60] {
		if d, err := running.Place(&pods[i]); err == nil {
			grants = append(grants, d)
		}
	}
	restarted := start()
	for _, d := range grants {
		if err := restarted.Cluster().Reserve(d); err != nil {
			t.Fatalf("re-reserving %+v: %v", d, err)
		}
	}
	for i := 60; i < len(pods); i++ {
		a, errA := running.Place(&pods[i])
		b, errB := restarted.Place(&pods[i])
		if (errA == nil) != (errB == nil) || (errA == nil && fmt.Sprint(a) != fmt.Sprint(b)) {
			t.Fatalf("pod %d: running engine chose %+v (%v), restarted one %+v (%v)", i, a, errA, b, errB)
		}
	}
}
