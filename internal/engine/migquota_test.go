package engine

import (
	"fmt"
	"testing"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/quota"
)

// Quota holds MIG pods at their fraction of a GPU: a team guaranteed half
// an H100's compute, without borrowing, runs three 1g.10gb pods (3 × 142
// milli) and not a fourth, though the node has seven such devices free.
// They were counted as no GPU at all, and all seven ran.
func TestQuotaCountsMIGDevicesAsTheirFraction(t *testing.T) {
	sc := schedv1.Default()
	sc.Queues = []schedv1.QueueConfig{{Name: "a", Nominal: schedv1.Resources{GPUMilli: 500}, BorrowingLimit: &schedv1.Resources{}}}
	books, err := quota.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	spec := migSpec("h", 1, map[int][]string{0: {"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}})
	spec.Model, spec.GPUMemMiB = "H100", 81920
	c, err := placement.NewCluster([]partition.NodeSpec{spec})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := placement.NewPolicy("binpack", c, placement.Options{})
	e, err := New(baseConfig(), placement.NewScheduler(c, p, false), &QuotaAdmission{Books: books, Cluster: c})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		pod := migPod(fmt.Sprint("m", i), "1g.10gb", 1)
		pod.Team = "a"
		submit(t, e, pod)
	}
	e.Cycle(at(1))
	if got := placed(e); len(got) != 3 || e.Pending() != 4 {
		t.Fatalf("placed %v, %d pending: want 3 placed within 500 milli", got, e.Pending())
	}
	st, _ := books.Status("a")
	if st.Usage["gpuMilli"] != 3*142 {
		t.Errorf("team a uses %v milli, want %d", st.Usage["gpuMilli"], 3*142)
	}
}
