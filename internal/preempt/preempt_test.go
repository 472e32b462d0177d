package preempt

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
)

var now = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

type fixture struct {
	t       *testing.T
	sched   *placement.Scheduler
	running []Running
}

// newFixture builds nodes of 4 GPUs each (the models given).
func newFixture(t *testing.T, models ...string) *fixture {
	t.Helper()
	var specs []partition.NodeSpec
	for i, m := range models {
		specs = append(specs, partition.NodeSpec{Name: string(rune('a' + i)), Model: m, CPU: 64000, MemMiB: 1 << 20, GPUs: 4, GPUMemMiB: 40960})
	}
	c, err := placement.NewCluster(specs)
	if err != nil {
		t.Fatal(err)
	}
	p, err := placement.NewPolicy("bestfit", c, placement.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, sched: placement.NewScheduler(c, p, false)}
}

// run places pod r on node (by index) and records it as running since
// age ago, of class.
func (f *fixture) run(id string, node, gpus int, class int, age time.Duration, opts ...func(*Running)) {
	f.t.Helper()
	req := &placement.Request{Name: id, CPUMilli: 1000, NumGPU: gpus, GPUMilli: 1000}
	d, ok := f.sched.ScheduleOn(node, req)
	if !ok {
		f.t.Fatalf("%s does not fit on node %d", id, node)
	}
	if err := f.sched.Cluster().Reserve(d); err != nil {
		f.t.Fatal(err)
	}
	r := Running{ID: id, Decision: d, Class: class, Queue: "q", Start: now.Add(-age)}
	for _, o := range opts {
		o(&r)
	}
	f.running = append(f.running, r)
}

func (f *fixture) find(class int, gpus int, mutate ...func(*Pending)) (*Plan, error) {
	pod := Pending{Request: placement.Request{Name: "pending", CPUMilli: 1000, NumGPU: gpus, GPUMilli: 1000}, Class: class, Queue: "q"}
	for _, m := range mutate {
		m(&pod)
	}
	before := snapshot(f.sched.Cluster())
	pr := New(f.sched, PolicyFrom(&schedv1.Default().Preemption))
	plan, err := pr.Find(pod, f.running, now)
	if after := snapshot(f.sched.Cluster()); !reflect.DeepEqual(before, after) {
		f.t.Fatalf("Find changed the cluster:\n%v\n%v", before, after)
	}
	return plan, err
}

func snapshot(c *placement.Cluster) []partition.Node {
	out := slices.Clone(c.Nodes)
	for i := range out {
		out[i].GPUs = slices.Clone(out[i].GPUs)
	}
	return out
}

func victims(p *Plan) string {
	var ids []string
	for _, v := range p.Victims {
		ids = append(ids, v.ID)
	}
	slices.Sort(ids)
	return strings.Join(ids, ",")
}

const hour = time.Hour

func TestLowerPreemptibleClassOnly(t *testing.T) {
	f := newFixture(t, "A100")
	f.run("p1", 0, 1, 1, hour)           // online inference: not preemptible
	f.run("p2", 0, 1, 2, hour)           // training
	f.run("p0", 0, 1, 0, hour)           // realtime
	f.run("p3", 0, 1, 3, 30*time.Minute) // experiment
	plan, err := f.find(1, 1)
	if err != nil || victims(plan) != "p3" || plan.NodeName != "a" {
		t.Fatalf("plan = %+v, %v; want p3 on a", plan, err)
	}
	if len(plan.Decision.Grant.Shares) != 1 || plan.Decision.Grant.Shares[0].GPU != plan.Victims[0].Decision.Grant.Shares[0].GPU {
		t.Errorf("the verified decision must land on the victim's GPU: %+v", plan.Decision)
	}
	// A P2 pod may only take P3; a P3 pod takes nothing.
	if plan, err := f.find(2, 1); err != nil || victims(plan) != "p3" {
		t.Errorf("P2: plan = %v, %v", plan, err)
	}
	if _, err := f.find(2, 2); !errors.Is(err, ErrNoPlan) {
		t.Errorf("P2 asking 2 GPUs took a P2 or more urgent pod: %v", err)
	}
	if _, err := f.find(3, 1); !errors.Is(err, ErrNoPlan) || !strings.Contains(err.Error(), "not of a lower preemptible class") {
		t.Errorf("P3: err = %v", err)
	}
	// P0 takes two of P2/P3 but never P1 (not preemptible) or P0.
	if _, err := f.find(0, 3); !errors.Is(err, ErrNoPlan) {
		t.Errorf("P0 asking 3 GPUs must not take P1/P0: %v", err)
	}
}

func TestMinRunTimeAndCooldown(t *testing.T) {
	f := newFixture(t, "A100")
	f.run("young", 0, 1, 3, 5*time.Minute) // default min run time 10m
	f.run("asks-longer", 0, 1, 3, time.Hour, func(r *Running) { r.MinRunTime = 2 * time.Hour })
	f.run("cooled", 0, 1, 3, time.Hour, func(r *Running) { r.LastPreempted = now.Add(-10 * time.Minute) }) // cooldown 30m
	f.run("fair-game", 0, 1, 3, 20*time.Hour, func(r *Running) { r.LastPreempted = now.Add(-time.Hour) })
	plan, err := f.find(0, 1)
	if err != nil || victims(plan) != "fair-game" {
		t.Fatalf("plan = %v, %v", plan, err)
	}
	_, err = f.find(0, 2)
	for _, want := range []string{"2 pods inside its minimum run time", "1 pods preempted within the cooldown", "1 nodes: victims would not make room"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
}

func TestFewestVictimsThenLeastWorkLost(t *testing.T) {
	f := newFixture(t, "A100", "A100", "A100")
	// Node a: two small young pods must go; node b: one big old one.
	f.run("a1", 0, 2, 3, 11*time.Minute)
	f.run("a2", 0, 1, 3, 11*time.Minute)
	f.run("a3", 0, 1, 3, 11*time.Minute)
	f.run("b1", 1, 4, 3, 30*hour)
	// Node c: two one-GPU pods and a two-GPU pod: taking the 2-GPU pod (one
	// victim) beats two one-GPU pods.
	f.run("c1", 2, 1, 3, hour)
	f.run("c2", 2, 1, 3, hour)
	f.run("c3", 2, 2, 3, 50*hour)
	plan, err := f.find(0, 2)
	if err != nil || victims(plan) != "a1" {
		t.Fatalf("2 GPUs: plan = %v, %v; want a1 (one victim, youngest)", plan, err)
	}
	plan, err = f.find(0, 4)
	if err != nil || victims(plan) != "b1" {
		t.Fatalf("4 GPUs: plan = %v, %v; want b1 (one victim beats three)", plan, err)
	}
	if plan.LostGPUSeconds != 4*30*3600 {
		t.Errorf("lost = %v GPU-s, want %v", plan.LostGPUSeconds, 4*30*3600)
	}
}

func TestCheckpointAware(t *testing.T) {
	f := newFixture(t, "A100")
	f.run("young-no-ckpt", 0, 1, 3, 2*hour)
	f.run("old-just-ckpt", 0, 1, 3, 20*hour, func(r *Running) {
		r.CheckpointInterval = time.Hour
		r.LastCheckpoint = now.Add(-5 * time.Minute)
	})
	f.run("old-stale-ckpt", 0, 1, 3, 20*hour, func(r *Running) {
		r.CheckpointInterval = time.Hour
		r.LastCheckpoint = now.Add(-59 * time.Minute)
	})
	f.run("older", 0, 1, 3, 30*hour)
	plan, err := f.find(0, 1)
	if err != nil || victims(plan) != "old-just-ckpt" {
		t.Fatalf("plan = %v, %v; want the pod that just checkpointed", plan, err)
	}
	plan, err = f.find(0, 2)
	if err != nil || victims(plan) != "old-just-ckpt,old-stale-ckpt" {
		t.Fatalf("plan = %v, %v", plan, err)
	}
}

// TestNeverPointless: victims that exist but cannot make room are not
// proposed (wrong GPU model, too few GPUs on the node even when empty).
func TestNeverPointless(t *testing.T) {
	f := newFixture(t, "T4")
	f.run("v", 0, 4, 3, hour)
	if _, err := f.find(0, 1, func(p *Pending) { p.Request.Models = []string{"H100"} }); !errors.Is(err, ErrNoPlan) {
		t.Errorf("wrong model: %v", err)
	}
	if _, err := f.find(0, 5); err == nil {
		t.Error("5 GPUs on a 4-GPU node: a plan was returned")
	}
}

func TestGangsWholeOrNone(t *testing.T) {
	f := newFixture(t, "A100", "A100")
	gang := func(r *Running) { r.Gang = "g" }
	f.run("g-a", 0, 4, 3, hour, gang)
	f.run("g-b", 1, 2, 3, hour, gang)
	f.run("solo", 1, 2, 3, hour)
	plan, err := f.find(0, 4)
	if err != nil || plan.NodeName != "a" || victims(plan) != "g-a,g-b" {
		t.Fatalf("plan = %+v, %v; want the whole gang (node a)", plan, err)
	}
	// 2 GPUs: solo alone (one victim) beats the gang (two).
	if plan, err := f.find(0, 2); err != nil || victims(plan) != "solo" {
		t.Fatalf("plan = %v, %v", plan, err)
	}
	// A protected member protects the whole gang.
	f.running[1].Start = now.Add(-time.Minute)
	if _, err := f.find(0, 4); !errors.Is(err, ErrNoPlan) || !strings.Contains(err.Error(), "gang with a protected member") {
		t.Errorf("err = %v", err)
	}
}

func TestBorrowedCapacityIsReclaimed(t *testing.T) {
	f := newFixture(t, "A100")
	f.run("borrower", 0, 2, 2, hour, func(r *Running) { r.Queue, r.Borrowing = "other", true })
	f.run("own", 0, 2, 2, hour)
	within := func(p *Pending) { p.WithinGuarantee = true }
	if plan, err := f.find(2, 2, within); err != nil || victims(plan) != "borrower" {
		t.Fatalf("plan = %v, %v; want the borrower", plan, err)
	}
	if _, err := f.find(2, 2); !errors.Is(err, ErrNoPlan) {
		t.Errorf("a borrowing pod is taken only for a pod within its guarantee: %v", err)
	}
	if _, err := f.find(2, 2, within, func(p *Pending) { p.Queue = "other" }); !errors.Is(err, ErrNoPlan) {
		t.Errorf("a queue does not reclaim from itself: %v", err)
	}
}

// A borrowing pod gives way only to a queue of its own cohort: a P3 pod of
// a queue in cohort "vision", within its guarantee, evicted a realtime (P0)
// pod that borrowed in cohort "nlp", where no guarantee of "vision" was owed.
func TestBorrowerReclaimedOnlyWithinItsCohort(t *testing.T) {
	f := newFixture(t, "A100")
	f.run("nlp-borrower", 0, 4, 0, hour, func(r *Running) { r.Queue, r.Cohort, r.Borrowing = "nlp-a", "nlp", true })
	vision := func(p *Pending) { p.Queue, p.Cohort, p.WithinGuarantee = "vision-a", "vision", true }
	if plan, err := f.find(3, 2, vision); !errors.Is(err, ErrNoPlan) {
		t.Fatalf("a queue of another cohort reclaimed a P0 borrower: plan %v, %v", plan, err)
	}
	sameCohort := func(p *Pending) { p.Queue, p.Cohort, p.WithinGuarantee = "nlp-b", "nlp", true }
	if plan, err := f.find(3, 2, sameCohort); err != nil || victims(plan) != "nlp-borrower" {
		t.Fatalf("the borrower's own cohort reclaims: plan %v, %v", plan, err)
	}
}

func TestFitsWithoutVictims(t *testing.T) {
	f := newFixture(t, "A100")
	f.run("v", 0, 2, 3, hour)
	plan, err := f.find(0, 2)
	if err != nil || len(plan.Victims) != 0 {
		t.Fatalf("plan = %+v, %v; want no victims", plan, err)
	}
}

func TestRunningNotReservedIsAnError(t *testing.T) {
	f := newFixture(t, "A100")
	f.run("v", 0, 4, 3, hour)
	f.running[0].Decision.Grant.CPU++ // the caller's books disagree with the cluster
	if _, err := f.find(0, 1); err == nil || !strings.Contains(err.Error(), "running pod v") {
		t.Errorf("err = %v", err)
	}
}

// A running pod whose decision names a node the cluster does not have (a
// stale or unplaced pod in the caller's list) is an error naming it; Find
// panicked with an index out of range.
func TestRunningOnUnknownNodeIsAnError(t *testing.T) {
	for _, node := range []int{7, -1} {
		f := newFixture(t, "A100")
		f.run("v", 0, 4, 3, hour)
		f.running = append(f.running, Running{ID: "ghost", Class: 3, Start: now.Add(-hour)})
		f.running[1].Decision.Node = node
		if _, err := f.find(0, 1); err == nil || !strings.Contains(err.Error(), "running pod ghost") {
			t.Errorf("node %d: err = %v", node, err)
		}
	}
}

func TestEqualWorkLowerClassFirst(t *testing.T) {
	f := newFixture(t, "A100")
	f.run("p2", 0, 2, 2, hour)
	f.run("p3", 0, 2, 3, hour)
	if plan, err := f.find(0, 2); err != nil || victims(plan) != "p3" {
		t.Fatalf("plan = %v, %v; want p3 at equal work lost", plan, err)
	}
}
