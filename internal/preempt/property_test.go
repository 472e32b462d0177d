package preempt

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/placement"
)

// TestRandomPlansAreSoundAndMinimal fills random clusters with random pods
// and asks for random pending pods. Every plan must take only eligible pods
// and whole gangs, and must verify independently (victims released, the pod
// fits on the plan's node); a plan of several victims must not be beaten by
// one eligible victim anywhere; and when no plan is returned, evicting every
// eligible pod of a node never makes room on it.
func TestRandomPlansAreSoundAndMinimal(t *testing.T) {
	pol := PolicyFrom(&schedv1.Default().Preemption)
	plans := 0
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 3))
		f := newFixture(t, "A100", "A100", "H100", "T4")
		for i := range 40 {
			gpus := []int{1, 1, 1, 2, 4}[rng.IntN(5)]
			node := rng.IntN(4)
			if _, ok := f.sched.ScheduleOn(node, &placement.Request{CPUMilli: 1000, NumGPU: gpus, GPUMilli: 1000}); !ok {
				continue
			}
			age := time.Duration(rng.IntN(600)) * time.Minute
			f.run(fmt.Sprintf("r%d", i), node, gpus, rng.IntN(4), age, func(r *Running) {
				if rng.IntN(5) == 0 {
					r.LastPreempted = now.Add(-time.Duration(rng.IntN(60)) * time.Minute)
				}
				if rng.IntN(6) == 0 {
					r.Gang = fmt.Sprintf("g%d", rng.IntN(3))
				}
				if rng.IntN(4) == 0 {
					r.Queue, r.Borrowing = "other", true
				}
				if rng.IntN(4) == 0 {
					r.CheckpointInterval, r.LastCheckpoint = time.Hour, now.Add(-time.Duration(rng.IntN(60))*time.Minute)
				}
			})
		}
		for range 10 {
			class, gpus := rng.IntN(3), 1+rng.IntN(4)
			if gpus == 3 {
				gpus = 4
			}
			within := rng.IntN(2) == 0
			pod := Pending{Request: placement.Request{Name: "x", CPUMilli: 1000, NumGPU: gpus, GPUMilli: 1000}, Class: class, Queue: "q", WithinGuarantee: within}
			pr := New(f.sched, pol)
			eligible := func(r *Running) bool { return pr.protection(r, &pod, now) == "" }
			plan, err := pr.Find(pod, f.running, now)
			if err != nil && !errors.Is(err, ErrNoPlan) {
				t.Fatal(err)
			}
			if err != nil {
				for n := range f.sched.Cluster().Nodes {
					if fitsAfter(t, f, n, &pod.Request, func(r *Running) bool { return eligible(r) && gangEligible(f, r, eligible) }) {
						t.Fatalf("seed %d: no plan, yet evicting every eligible pod of node %d makes room", seed, n)
					}
				}
				continue
			}
			plans++
			inPlan := map[string]bool{}
			for _, v := range plan.Victims {
				inPlan[v.ID] = true
			}
			for i := range f.running {
				r := &f.running[i]
				if inPlan[r.ID] && !eligible(r) {
					t.Fatalf("seed %d: victim %s is protected: %s", seed, r.ID, pr.protection(r, &pod, now))
				}
				for j := range f.running {
					if o := &f.running[j]; inPlan[r.ID] && r.Gang != "" && o.Gang == r.Gang && !inPlan[o.ID] {
						t.Fatalf("seed %d: gang %s broken: %s taken, %s left", seed, r.Gang, r.ID, o.ID)
					}
				}
			}
			if !fitsAfter(t, f, plan.Node, &pod.Request, func(r *Running) bool { return inPlan[r.ID] }) {
				t.Fatalf("seed %d: plan %v on node %s does not make room", seed, plan.Victims, plan.NodeName)
			}
			if len(plan.Victims) > 1 {
				for i := range f.running {
					r := &f.running[i]
					if r.Gang == "" && eligible(r) && fitsAfter(t, f, r.Decision.Node, &pod.Request, func(o *Running) bool { return o.ID == r.ID }) {
						t.Fatalf("seed %d: plan of %d victims, but %s alone makes room", seed, len(plan.Victims), r.ID)
					}
				}
			}
		}
	}
	if plans < 50 {
		t.Errorf("only %d plans in the random runs: the test proves little", plans)
	}
	t.Logf("%d plans checked", plans)
}

func gangEligible(f *fixture, r *Running, eligible func(*Running) bool) bool {
	if r.Gang == "" {
		return true
	}
	for i := range f.running {
		if o := &f.running[i]; o.Gang == r.Gang && !eligible(o) {
			return false
		}
	}
	return true
}

// fitsAfter releases the chosen pods on node n, asks whether req fits
// there, and reserves them back.
func fitsAfter(t *testing.T, f *fixture, n int, req *placement.Request, chosen func(*Running) bool) bool {
	t.Helper()
	cl := f.sched.Cluster()
	var released []placement.Decision
	for i := range f.running {
		if r := &f.running[i]; r.Decision.Node == n && chosen(r) {
			if err := cl.Release(r.Decision); err != nil {
				t.Fatal(err)
			}
			released = append(released, r.Decision)
		}
	}
	_, fits := f.sched.ScheduleOn(n, req)
	for _, d := range released {
		if err := cl.Reserve(d); err != nil {
			t.Fatal(err)
		}
	}
	return fits
}
