package priority

import (
	"math"
	"testing"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
)

// The scheduler (api/scheduler/v1 Default) and the device plugin's compute
// priority (DefaultTable) read the same pod: without configuration they must
// give it the same class, or a pod queued as P1 could yield on the GPU as P3
// (they disagreed once on batch, inference, best-effort and unannotated pods).
func TestDefaultTablesOfSchedulerAndNodeAgree(t *testing.T) {
	sched, err := TableFrom(&schedv1.Default().Priority)
	if err != nil {
		t.Fatal(err)
	}
	node := DefaultTable()
	names := append(sched.Names(), node.Names()...)
	for _, n := range append(names, "P0", "p3", " Training ") {
		s, serr := sched.Resolve(n, true, 0)
		d, derr := node.Resolve(n, true, 0)
		if serr != nil || derr != nil || s != d {
			t.Errorf("annotation %q: scheduler %v (%v), device plugin %v (%v)", n, s, serr, d, derr)
		}
	}
	for _, v := range []int32{math.MinInt32, -1, 0, 999, 1_000, 99_999, 100_000, 999_999, 1_000_000, 2_000_000_000} {
		s, _ := sched.Resolve("", false, v)
		d, _ := node.Resolve("", false, v)
		if s != d {
			t.Errorf("PriorityClass value %d: scheduler %v, device plugin %v", v, s, d)
		}
	}
}
