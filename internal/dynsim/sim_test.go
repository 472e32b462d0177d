package dynsim

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// A small hand-checked run: one 1-GPU job runs 30 min of a 1 h horizon on
// a 2-GPU node (mean allocation 25 %), and a job the engine refuses (a
// 2-GPU request of half GPUs) must be reported, not vanish.
func TestSimulateSmallRunIsAccounted(t *testing.T) {
	nodes := []partition.NodeSpec{{Name: "n1", Model: "A100", CPU: 64000, MemMiB: 1 << 20, GPUs: 2, GPUMemMiB: 40960}}
	jobs := []Job{
		{Name: "ok", Class: priority.P1, Team: "team-0", Arrive: 0, Run: 30 * time.Minute,
			Request: placement.Request{Name: "ok", CPUMilli: 1000, MemMiB: 1024, NumGPU: 1, GPUMilli: 1000}},
		{Name: "bad", Class: priority.P3, Team: "team-0", Arrive: time.Minute, Run: time.Minute,
			Request: placement.Request{Name: "bad", CPUMilli: 1000, MemMiB: 1024, NumGPU: 2, GPUMilli: 500}},
	}
	mode, err := Modes("fifo", priority.Ageing{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Simulate(nodes, jobs, time.Hour, Config{Mode: mode, Tick: 10 * time.Second, Drain: time.Hour, Policy: "binpack"})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.AllocPct-25) > 0.01 {
		t.Errorf("mean allocation %.3f %%, want 25 %%", r.AllocPct)
	}
	if got := r.Rejected(); got != 1 {
		t.Errorf("rejected %d, want 1", got)
	}
	var table, bench bytes.Buffer
	WriteTable(&table, []*Result{r})
	WriteBench(&bench, r)
	if !strings.Contains(table.String(), "rejected 1") {
		t.Errorf("the table does not report the refused job:\n%s", table.String())
	}
	if !strings.Contains(bench.String(), "BENCH sched.dynamic.fifo.rejected 1 pods") {
		t.Errorf("no rejected BENCH line:\n%s", bench.String())
	}
}
