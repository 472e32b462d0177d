package kubesched

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/tessera-gpu/tessera/internal/gang"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
)

// 200 pods of mixed shapes (memory+compute shares, memory only, whole and
// multi-GPU) on 20 nodes, bound concurrently by 16 workers: every GPU
// stays within its memory and compute, every pod is bound at most once.
func TestManyConcurrentBindsNeverOversubscribe(t *testing.T) {
	a := newAPI(t)
	for i := range 20 {
		a.gpuNode(fmt.Sprintf("n%02d", i), 4, 24*gib, []string{"A10", "L4"}[i%2])
	}
	cfg := testConfig()
	cfg.BindWorkers = 16
	r := a.start(cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		var opt podOpt
		switch rng.IntN(4) {
		case 0:
			opt = res(string(translate.ResourceMemory), fmt.Sprint(1+rng.IntN(12)), string(translate.ResourceCore), fmt.Sprint(10*(1+rng.IntN(5))))
		case 1:
			opt = res(string(translate.ResourceMemory), fmt.Sprint(1+rng.IntN(20)))
		case 2:
			opt = res(string(translate.ResourceGPU), "1")
		default:
			opt = res(string(translate.ResourceGPU), "2", string(translate.ResourceCore), "200")
		}
		a.pod(fmt.Sprint("p", i), opt)
	}
	last := 0
	settled := func() bool {
		bound := 0
		for i := range 200 {
			if a.get(fmt.Sprint("p", i)).Spec.NodeName != "" {
				bound++
			}
		}
		last = bound
		return bound > 60 && a.quiet()
	}
	start := time.Now()
	eventually(t, "the cluster to fill", settled)
	t.Logf("%d of 200 bound; settled %v after the last pod was created", last, time.Since(start))
	a.checkCapacity(24 * gib)
	for i := range 200 {
		if n := a.bindsOf(fmt.Sprint("default/p", i)); n > 1 {
			t.Fatalf("p%d bound %d times", i, n)
		}
	}
	r.checkNoInterPodCost(t)
}

// A gang of 8 whole-GPU pods on a cluster with 4 free GPUs takes nothing;
// when 4 more GPUs join, all 8 are bound.
func TestGangOfEightAllOrNothing(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 2, 16*gib, "T4")
	a.gpuNode("n2", 2, 16*gib, "T4")
	a.start(testConfig())
	for i := range 8 {
		a.pod(fmt.Sprint("g", i), res(string(translate.ResourceGPU), "1"), ann(gang.GroupAnnotation, "train", gang.MinMemberAnnotation, "8"))
	}
	eventually(t, "gang reported", func() bool { return a.eventFor("g0", "FailedScheduling", "pod group train (min-member 8)") })
	for i := range 8 {
		if a.get(fmt.Sprint("g", i)).Spec.NodeName != "" {
			t.Fatalf("g%d bound before the whole gang fits", i)
		}
	}
	a.gpuNode("n3", 2, 16*gib, "T4")
	a.gpuNode("n4", 2, 16*gib, "T4")
	eventually(t, "all 8 bound", func() bool {
		for i := range 8 {
			if a.get(fmt.Sprint("g", i)).Spec.NodeName == "" {
				return false
			}
		}
		return true
	})
	a.checkCapacity(16 * gib)
}

// A gang member whose bind fails keeps the capacity its group was given:
// pods arriving meanwhile do not take it, the bind is retried there, and
// the whole group ends bound.
func TestGangMemberBindFailureKeepsItsCapacity(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 4, 16*gib, "T4")
	a.failBind["default/g1"] = failure{2, apierrors.NewForbidden(podsGVR.GroupResource(), "g1", fmt.Errorf("denied by a test"))}
	a.start(testConfig())
	for i := range 3 {
		a.pod(fmt.Sprint("g", i), res(string(translate.ResourceGPU), "1"), ann(gang.GroupAnnotation, "train", gang.MinMemberAnnotation, "3"))
	}
	eventually(t, "g1's failure reported", func() bool { return a.eventFor("g1", "FailedScheduling", "the capacity stays held") })
	a.pod("other", res(string(translate.ResourceGPU), "1"))
	a.pod("other2", res(string(translate.ResourceGPU), "1"))
	eventually(t, "the gang bound", func() bool {
		for i := range 3 {
			if a.get(fmt.Sprint("g", i)).Spec.NodeName == "" {
				return false
			}
		}
		return true
	})
	eventually(t, "one of the others bound", func() bool {
		return a.get("other").Spec.NodeName != "" || a.get("other2").Spec.NodeName != ""
	})
	if a.get("other").Spec.NodeName != "" && a.get("other2").Spec.NodeName != "" {
		t.Fatal("both other pods bound: one took the GPU held for g1")
	}
	if a.bindsOf("default/g1") != 1 {
		t.Fatalf("g1 bound %d times", a.bindsOf("default/g1"))
	}
	a.checkCapacity(16 * gib)
}
