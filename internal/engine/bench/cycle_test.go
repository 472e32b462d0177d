package bench

import (
	"testing"

	"github.com/tessera-gpu/tessera/internal/placement"
	pbench "github.com/tessera-gpu/tessera/internal/placement/bench"
	"github.com/tessera-gpu/tessera/internal/placement/sim"
)

func loadPods(t testing.TB) []placement.Request {
	tr, err := sim.Load("../../placement/testdata/openb/openb_node_list_gpu_node.csv", "../../placement/testdata/openb/openb_pod_list_default.csv")
	if err != nil {
		t.Fatal(err)
	}
	return pbench.Unconstrained(tr.Pods)
}

// A small run that checks the measurement's bookkeeping, not its speed.
func TestRunCycle(t *testing.T) {
	syn := pbench.Synthetic{Nodes: 200, GPUs: 8, Models: 2, CPU: 128000, MemMiB: 1 << 20}
	res, err := RunCycle(CycleSetup{Nodes: syn.Specs(), Pods: loadPods(t), Pending: 500, Rounds: 3, FreedPerRound: 50, Engine: FullConfig(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts < 500 || res.Placed == 0 || res.Pending+res.Placed-res.Preempted != 500 {
		t.Errorf("attempts %d, placed %d, preempted %d, pending %d: the books do not add up to 500 queued", res.Attempts, res.Placed, res.Preempted, res.Pending)
	}
}

func BenchmarkCycle10000(b *testing.B) {
	syn := pbench.Synthetic{Nodes: 10000, GPUs: 8, Models: 2, CPU: 128000, MemMiB: 1 << 20}
	pods := loadPods(b)
	for i := 0; i < b.N; i++ {
		res, err := RunCycle(CycleSetup{Nodes: syn.Specs(), Pods: pods, Pending: 10000, Rounds: 5, FreedPerRound: 500, Engine: CycleConfig(), Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(res.PerSecond(), "pods/s")
		b.Logf("%+v", res)
	}
}

func BenchmarkCycle10000WithPreemption(b *testing.B) {
	syn := pbench.Synthetic{Nodes: 10000, GPUs: 8, Models: 2, CPU: 128000, MemMiB: 1 << 20}
	pods := loadPods(b)
	for i := 0; i < b.N; i++ {
		res, err := RunCycle(CycleSetup{Nodes: syn.Specs(), Pods: pods, Pending: 10000, Rounds: 5, FreedPerRound: 500, Engine: FullConfig(), Seed: 42})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(res.PerSecond(), "pods/s")
		b.Logf("%+v", res)
	}
}
