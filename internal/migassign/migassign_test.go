package migassign

import (
	"strings"
	"testing"
	"time"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/engine"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
	"github.com/tessera-gpu/tessera/internal/queue"
)

// inventory: GPU-0 whole, GPU-1 in MIG mode with two 3g.20gb devices.
const inventory = `{"version":"v1","gpus":[
 {"uuid":"GPU-0","index":0,"model":"A100","memoryMiB":40960,"numaNode":0,"migEnabled":false,"healthy":true},
 {"uuid":"GPU-1","index":1,"model":"A100","memoryMiB":40960,"numaNode":0,"migEnabled":true,"healthy":true,
  "mig":[{"uuid":"MIG-a","profile":"3g.20gb","memoryMiB":20096},{"uuid":"MIG-b","profile":"3g.20gb","memoryMiB":20096}]}]}`

func nodeSpec(t *testing.T, raw string) partition.NodeSpec {
	t.Helper()
	inv, err := annv1.ParseNodeGPUs(raw)
	if err != nil {
		t.Fatal(err)
	}
	s := partition.NodeSpec{Name: "n1", Model: "A100", CPU: 8000, MemMiB: 1 << 16, GPUs: len(inv.GPUs), GPUMemMiB: 40960}
	if err := ApplyInventory(&s, inv.GPUs); err != nil {
		t.Fatal(err)
	}
	return s
}

func newEngine(t *testing.T, c *placement.Cluster) *engine.Engine {
	t.Helper()
	p, err := placement.NewPolicy("binpack", c, placement.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Config{Queue: queue.Config{EscalateTo: priority.P0}}, placement.NewScheduler(c, p, false), nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func migPod(key string) *engine.Pod {
	return &engine.Pod{Key: key, Class: priority.P2, Request: placement.Request{Name: key, CPUMilli: 100, NumMIG: 1, MIGProfile: "3g.20gb"}}
}

// TestRebuildFromAnnotations: a bound pod's containers[].mig (allocated
// preferred, assignment otherwise) is held again when the engine is
// rebuilt, and new pods get only the other instance; the engine's choice
// encodes into an assignment that names the device, profile and parent.
func TestRebuildFromAnnotations(t *testing.T) {
	c, err := placement.NewCluster([]partition.NodeSpec{nodeSpec(t, inventory)})
	if err != nil {
		t.Fatal(err)
	}
	bound, err := annv1.ParseAllocated(`{"version":"v1","containers":[{"name":"main","mig":[{"uuid":"MIG-a","profile":"3g.20gb","parent":"GPU-1"}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := Held(&c.Nodes[0], bound.Containers[0].MIG, "3g.20gb", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Reserve(placement.Decision{Node: 0, NodeName: "n1", Grant: partition.Grant{CPU: 100, MIG: devs}}); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, c)
	for _, k := range []string{"p1", "p2"} {
		if err := e.Submit(migPod(k)); err != nil {
			t.Fatal(err)
		}
	}
	e.Cycle(time.Unix(1, 0))
	r, ok := e.Running("p1")
	if !ok || e.Pending() != 1 {
		t.Fatalf("p1 running %v, pending %d: want p1 on the one free instance, p2 waiting", ok, e.Pending())
	}
	got, err := c.MIGDevices(r.Decision)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := annv1.Marshal(&annv1.Assignment{Version: annv1.Version, Containers: []annv1.ContainerAssignment{{Name: "main", MIG: Allocations(got)}}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := annv1.ParseAssignment(raw)
	if err != nil {
		t.Fatal(err)
	}
	if m := a.Containers[0].MIG; len(m) != 1 || m[0] != (annv1.MIGAllocation{UUID: "MIG-b", Profile: "3g.20gb", Parent: "GPU-1"}) {
		t.Fatalf("assignment %s: want MIG-b of 3g.20gb on GPU-1", raw)
	}
	// The rebuilt books hold MIG-a: claiming it again is double booking.
	if err := c.Reserve(placement.Decision{Node: 0, Grant: partition.Grant{MIG: devs}}); err == nil {
		t.Fatal("MIG-a was reserved twice")
	}
}

func TestHeldRefusesWhatTheNodeLacks(t *testing.T) {
	n, err := partition.NewNode(nodeSpec(t, inventory))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ms      []annv1.MIGAllocation
		profile string
		want    string
	}{
		{[]annv1.MIGAllocation{{UUID: "MIG-z", Profile: "3g.20gb", Parent: "GPU-1"}}, "3g.20gb", "MIG-z is not on node n1"},
		{[]annv1.MIGAllocation{{UUID: "MIG-a", Profile: "1g.5gb", Parent: "GPU-1"}}, "1g.5gb", "is 3g.20gb on GPU GPU-1"},
		{[]annv1.MIGAllocation{{UUID: "MIG-a", Profile: "3g.20gb", Parent: "GPU-0"}}, "3g.20gb", "not 3g.20gb on GPU-0"},
		{[]annv1.MIGAllocation{{UUID: "MIG-a", Profile: "3g.20gb", Parent: "GPU-1"}}, "1g.5gb", "the container requests 1g.5gb"},
		{nil, "3g.20gb", "names 0 MIG devices"},
	} {
		if _, err := Held(&n, c.ms, c.profile, 1); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.ms, err, c.want)
		}
	}
	if _, err := annv1.ParseAssignment(`{"version":"v1","containers":[{"name":"main","mig":[{"uuid":"MIG-a"}]}]}`); err == nil {
		t.Error("an assignment whose MIG device lacks parent and profile parsed")
	}
}

func TestApplyInventoryRefusesBadMIG(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{strings.Replace(inventory, `"migEnabled":true`, `"migEnabled":false`, 1), "not in MIG mode"},
		{strings.Replace(inventory, `"profile":"3g.20gb"`, `"profile":"3g/20gb"`, 1), "mig[0].profile"},
	} {
		inv, err := annv1.ParseNodeGPUs(c.raw)
		if err != nil {
			t.Fatal(err)
		}
		s := partition.NodeSpec{Name: "n1", GPUs: len(inv.GPUs)}
		if err := ApplyInventory(&s, inv.GPUs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
	}
	s := partition.NodeSpec{Name: "n1", GPUs: 3}
	if err := ApplyInventory(&s, nil); err == nil {
		t.Error("an inventory of 0 GPUs was applied to a spec of 3")
	}
}

// FuzzInventoryToNode: whatever an inventory says, ApplyInventory and
// NewNode either refuse it with an error or give a node whose every MIG
// device hangs off a MIG GPU, and the devices Held finds for a fuzzed
// allocation are on the node with the requested profile.
func FuzzInventoryToNode(f *testing.F) {
	f.Add(inventory, `{"version":"v1","containers":[{"name":"main","mig":[{"uuid":"MIG-a","profile":"3g.20gb","parent":"GPU-1"}]}]}`)
	f.Add(strings.Replace(inventory, "MIG-b", "MIG-a", 1), `{"version":"v1","containers":[{"name":"main","mig":[{"uuid":"MIG-b","profile":"3g.20gb","parent":"GPU-1"}]}]}`)
	f.Add(`{"version":"v1","gpus":[]}`, `{"version":"v1","containers":[{"name":"c"}]}`)
	f.Fuzz(func(t *testing.T, rawInv, rawAlloc string) {
		inv, err := annv1.ParseNodeGPUs(rawInv)
		if err != nil || len(inv.GPUs) > 64 {
			return
		}
		s := partition.NodeSpec{Name: "n", GPUs: len(inv.GPUs), GPUMemMiB: 1024}
		if ApplyInventory(&s, inv.GPUs) != nil {
			return
		}
		n, err := partition.NewNode(s)
		if err != nil {
			return
		}
		for _, d := range n.MIG {
			if !n.GPUs[d.GPU].InMIGMode() || d.Parent != inv.GPUs[d.GPU].UUID {
				t.Fatalf("device %+v on a GPU not in MIG mode or of another parent", d)
			}
		}
		al, err := annv1.ParseAllocated(rawAlloc)
		if err != nil || len(al.Containers) == 0 {
			return
		}
		ms := al.Containers[0].MIG
		if len(ms) == 0 {
			return
		}
		devs, err := Held(&n, ms, ms[0].Profile, len(ms))
		if err != nil {
			return
		}
		for _, d := range devs {
			if n.MIG[d].Profile != ms[0].Profile {
				t.Fatalf("Held gave %+v for profile %s", n.MIG[d], ms[0].Profile)
			}
		}
		if err := n.Reserve(partition.Grant{MIG: devs}); err != nil {
			t.Fatalf("devices Held found cannot be reserved on a fresh node: %v", err)
		}
	})
}
