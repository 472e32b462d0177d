package engine

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// migSpec is a node whose GPUs listed in profiles are in MIG mode with the
// given fixed instances; the others are whole GPUs.
func migSpec(name string, gpus int, profiles map[int][]string) partition.NodeSpec {
	s := gpuNode(name, gpus)
	for g := 0; g < gpus; g++ {
		ps, ok := profiles[g]
		if !ok {
			continue
		}
		s.MIGGPUs = append(s.MIGGPUs, g)
		for j, p := range ps {
			s.MIG = append(s.MIG, partition.MIGDevice{UUID: fmt.Sprintf("MIG-%s-%d-%d", name, g, j), Profile: p, GPU: g, Parent: fmt.Sprintf("GPU-%s-%d", name, g)})
		}
	}
	return s
}

func migPod(key, profile string, n int) *Pod {
	return &Pod{Key: key, Class: priority.P2, Submitted: at(0),
		Request: placement.Request{Name: key, CPUMilli: 100, MemMiB: 64, NumMIG: n, MIGProfile: profile}}
}

// TestMIGPlacementMixedNodes: MIG pods go only where free instances of
// their profile are, no instance is handed out twice, whole-GPU pods never
// land on a MIG GPU, and a freed instance is reused.
func TestMIGPlacementMixedNodes(t *testing.T) {
	e := newEngine(t, baseConfig(),
		gpuNode("whole", 2),
		migSpec("half", 2, map[int][]string{0: {"3g.20gb", "3g.20gb"}}),
		migSpec("small", 1, map[int][]string{0: {"1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"}}))
	var keys []string
	submit := func(p *Pod) {
		t.Helper()
		if err := e.Submit(p); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, p.Key)
	}
	for i := 0; i < 3; i++ {
		submit(migPod(fmt.Sprintf("big%d", i), "3g.20gb", 1))
	}
	for i := 0; i < 4; i++ {
		submit(migPod(fmt.Sprintf("two%d", i), "1g.5gb", 2)) // 4×2 > 7: one waits
	}
	for i := 0; i < 4; i++ {
		submit(gpus(fmt.Sprintf("gpu%d", i), priority.P2, 1, 0)) // 3 whole GPUs exist
	}
	e.Cycle(at(1))
	wantNode := map[string]string{"3g.20gb": "half", "1g.5gb": "small"}
	held := map[string]string{}
	perProfile := map[string]int{}
	for _, k := range keys {
		r, ok := e.Running(k)
		if !ok {
			continue
		}
		devs, err := e.cluster.MIGDevices(r.Decision)
		if err != nil {
			t.Fatal(err)
		}
		req := r.Pod.Request
		if req.NumMIG == 0 {
			if len(devs) != 0 || len(r.Decision.Grant.Shares) != 1 {
				t.Fatalf("%s: whole-GPU pod got %v", k, r.Decision.Grant)
			}
			if g := e.cluster.Nodes[r.Decision.Node].GPUs[r.Decision.Grant.Shares[0].GPU]; g.InMIGMode() {
				t.Fatalf("%s: whole-GPU pod placed on a MIG GPU of %s", k, r.Decision.NodeName)
			}
			perProfile["gpu"]++
			continue
		}
		if r.Decision.NodeName != wantNode[req.MIGProfile] || len(devs) != req.NumMIG || len(r.Decision.Grant.Shares) != 0 {
			t.Fatalf("%s (%d×%s) got %s %v", k, req.NumMIG, req.MIGProfile, r.Decision.NodeName, devs)
		}
		for _, d := range devs {
			if d.Profile != req.MIGProfile {
				t.Fatalf("%s got %s of profile %s", k, d.UUID, d.Profile)
			}
			if other, dup := held[d.UUID]; dup {
				t.Fatalf("%s and %s both hold %s", other, k, d.UUID)
			}
			held[d.UUID] = k
		}
		perProfile[req.MIGProfile]++
	}
	if perProfile["3g.20gb"] != 2 || perProfile["1g.5gb"] != 3 || perProfile["gpu"] != 3 || e.Pending() != 3 {
		t.Fatalf("placed per kind %v, pending %d; want 2 3g, 3 pairs of 1g, 3 GPUs, 3 pending", perProfile, e.Pending())
	}
	// The 3g pod that waits gets the instance a finished one frees.
	var done, waiting string
	for _, k := range []string{"big0", "big1", "big2"} {
		if _, ok := e.Running(k); !ok {
			waiting = k
		} else if done == "" {
			done = k
		}
	}
	r, _ := e.Running(done)
	freed, _ := e.cluster.MIGDevices(r.Decision)
	if err := e.Complete(done); err != nil {
		t.Fatal(err)
	}
	e.Cycle(at(2))
	r, ok := e.Running(waiting)
	if !ok {
		t.Fatalf("%s still pending after %s freed %s", waiting, done, freed[0].UUID)
	}
	if devs, _ := e.cluster.MIGDevices(r.Decision); len(devs) != 1 || devs[0].UUID != freed[0].UUID {
		t.Fatalf("%s got %v, want the freed %s", waiting, devs, freed[0].UUID)
	}
}

// TestMIGBadRequestsRefused: a malformed MIG request is refused at Submit
// with the reason, and the queue goes on placing the others.
func TestMIGBadRequestsRefused(t *testing.T) {
	e := newEngine(t, baseConfig(), migSpec("m", 1, map[int][]string{0: {"1g.5gb"}}))
	bad := []struct {
		req  placement.Request
		want string
	}{
		{placement.Request{NumMIG: 1, MIGProfile: "1g 5gb"}, "not allowed"},
		{placement.Request{NumMIG: 1}, "MIG profile"},
		{placement.Request{MIGProfile: "1g.5gb"}, "without a device count"},
		{placement.Request{NumMIG: 1, MIGProfile: "1g.5gb", NumGPU: 1, GPUMilli: 1000}, "one or the other"},
		{placement.Request{NumMIG: -1, MIGProfile: "1g.5gb"}, "out of range"},
	}
	for i, b := range bad {
		p := &Pod{Key: fmt.Sprintf("bad%d", i), Class: priority.P2, Request: b.req}
		if err := e.Submit(p); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("request %+v: err = %v, want %q", b.req, err, b.want)
		}
	}
	// A valid profile no node offers waits; the one that exists places.
	if err := e.Submit(migPod("absent", "7g.80gb", 1)); err != nil {
		t.Fatal(err)
	}
	if err := e.Submit(migPod("ok", "1g.5gb", 1)); err != nil {
		t.Fatal(err)
	}
	e.Cycle(at(1))
	if _, ok := e.Running("ok"); !ok || e.Pending() != 1 {
		t.Fatalf("ok running = %v, pending = %d; want true, 1", ok, e.Pending())
	}
	if _, err := e.sched.Schedule(&placement.Request{Name: "absent", NumMIG: 1, MIGProfile: "7g.80gb"}); err == nil || !strings.Contains(err.Error(), "mig") {
		t.Fatalf("unschedulable MIG request explained as %v; want the mig filter named", err)
	}
}

// TestMIGPreemption: a more urgent MIG pod evicts a preemptible one that
// holds the only device of its profile, and gets that device.
func TestMIGPreemption(t *testing.T) {
	cfg := baseConfig()
	cfg.Preemption = true
	e := newEngine(t, cfg, migSpec("m", 1, map[int][]string{0: {"3g.20gb", "4g.20gb"}}))
	low := migPod("low", "3g.20gb", 1)
	low.Class, low.Preemptible = priority.P3, true
	if err := e.Submit(low); err != nil {
		t.Fatal(err)
	}
	e.Cycle(at(1))
	r, ok := e.Running("low")
	if !ok {
		t.Fatal("low did not start")
	}
	held, _ := e.cluster.MIGDevices(r.Decision)
	high := migPod("high", "3g.20gb", 1)
	high.Class = priority.P0
	if err := e.Submit(high); err != nil {
		t.Fatal(err)
	}
	e.Cycle(at(2))
	if _, ok := e.Running("low"); ok {
		t.Fatal("low still runs")
	}
	r, ok = e.Running("high")
	if !ok {
		t.Fatal("high did not start after low's eviction")
	}
	if got, _ := e.cluster.MIGDevices(r.Decision); len(got) != 1 || got[0].UUID != held[0].UUID {
		t.Fatalf("high holds %v, want %s", got, held[0].UUID)
	}
}

// TestMIGReservationHoldsDevices: a MIG pod that waited ReserveAfter holds
// the devices of its profile as they free, so a later single-device pod
// does not take them; without reservations it does and the pair starves.
func TestMIGReservationHoldsDevices(t *testing.T) {
	for _, reserve := range []bool{true, false} {
		cfg := baseConfig()
		if reserve {
			cfg.ReserveAfter, cfg.MaxReservations = time.Second, 1
		}
		e := newEngine(t, cfg, migSpec("m", 1, map[int][]string{0: {"1g.5gb", "1g.5gb"}}))
		for _, k := range []string{"s0", "s1"} {
			if err := e.Submit(migPod(k, "1g.5gb", 1)); err != nil {
				t.Fatal(err)
			}
		}
		e.Cycle(at(1))
		pair := migPod("pair", "1g.5gb", 2)
		pair.Submitted = at(1)
		if err := e.Submit(pair); err != nil {
			t.Fatal(err)
		}
		e.Cycle(at(3))
		if err := e.Complete("s0"); err != nil {
			t.Fatal(err)
		}
		late := migPod("late", "1g.5gb", 1)
		late.Submitted = at(4)
		if err := e.Submit(late); err != nil {
			t.Fatal(err)
		}
		e.Cycle(at(5))
		if _, lateRuns := e.Running("late"); lateRuns == reserve {
			t.Fatalf("reservations %v: late running = %v", reserve, lateRuns)
		}
		if !reserve {
			continue
		}
		if err := e.Complete("s1"); err != nil {
			t.Fatal(err)
		}
		e.Cycle(at(6))
		r, ok := e.Running("pair")
		if !ok || len(r.Decision.Grant.MIG) != 2 {
			t.Fatalf("pair running %v with %v after both devices freed", ok, r)
		}
	}
}

// TestMIGRandomNeverDoubleBooks: random MIG, whole-GPU and share pods
// arrive and finish; after every cycle each node's held devices are
// exactly those its running pods' grants name, none twice, each of the
// profile its pod asked for.
func TestMIGRandomNeverDoubleBooks(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	profiles := []string{"1g.5gb", "3g.20gb"}
	e := newEngine(t, baseConfig(),
		gpuNode("w", 2),
		migSpec("a", 2, map[int][]string{0: {"3g.20gb", "3g.20gb"}, 1: {"1g.5gb", "1g.5gb", "1g.5gb", "3g.20gb"}}),
		migSpec("b", 1, map[int][]string{0: {"1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"}}))
	var running []string
	placedMIG := 0
	for step := 0; step < 400; step++ {
		key := fmt.Sprintf("p%d", step)
		switch rng.IntN(3) {
		case 0:
			p := gpus(key, priority.P2, 1, step)
			p.Request.GPUMilli = int32(250 * (1 + rng.IntN(4)))
			_ = e.Submit(p)
		default:
			p := migPod(key, profiles[rng.IntN(2)], 1+rng.IntN(3))
			p.Submitted = at(step)
			if err := e.Submit(p); err != nil {
				t.Fatal(err)
			}
		}
		for len(running) > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(running))
			if err := e.Complete(running[i]); err != nil {
				t.Fatal(err)
			}
			running = append(running[:i], running[i+1:]...)
		}
		e.Cycle(at(step))
		for _, ev := range e.Events() {
			if ev.Kind == Placed {
				running = append(running, ev.Pod.Key)
				if ev.Pod.Request.NumMIG > 0 {
					placedMIG++
				}
			}
		}
		want := make([]uint64, len(e.cluster.Nodes))
		for _, k := range running {
			r, _ := e.Running(k)
			if len(r.Decision.Grant.MIG) != r.Pod.Request.NumMIG {
				t.Fatalf("step %d: %s asked %d devices, holds %v", step, k, r.Pod.Request.NumMIG, r.Decision.Grant.MIG)
			}
			n := &e.cluster.Nodes[r.Decision.Node]
			for _, m := range r.Decision.Grant.MIG {
				if want[r.Decision.Node]&(1<<uint(m)) != 0 {
					t.Fatalf("step %d: device %s held twice", step, n.MIG[m].UUID)
				}
				if n.MIG[m].Profile != r.Pod.Request.MIGProfile {
					t.Fatalf("step %d: %s asked %s, holds %s", step, k, r.Pod.Request.MIGProfile, n.MIG[m].Profile)
				}
				want[r.Decision.Node] |= 1 << uint(m)
			}
			for _, s := range r.Decision.Grant.Shares {
				if n.GPUs[s.GPU].InMIGMode() {
					t.Fatalf("step %d: %s has a share of MIG GPU %d on %s", step, k, s.GPU, n.Name)
				}
			}
		}
		for i := range e.cluster.Nodes {
			if e.cluster.Nodes[i].MIGUsed != want[i] {
				t.Fatalf("step %d: node %s holds %b, its pods %b", step, e.cluster.Nodes[i].Name, e.cluster.Nodes[i].MIGUsed, want[i])
			}
		}
	}
	if placedMIG < 50 {
		t.Fatalf("only %d MIG pods placed: the test exercised little", placedMIG)
	}
}
