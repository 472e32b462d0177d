package kubesched

import (
	"fmt"
	"testing"
	"time"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
)

// migInventory: GPU-m0 in MIG mode with two 3g.20gb devices and one
// 1g.5gb, GPU-m1 whole (serves shares, never MIG pods).
const migInventory = `{"version":"v1","gpus":[
 {"uuid":"GPU-m0","index":0,"model":"A100","memoryMiB":40960,"numaNode":0,"migEnabled":true,"healthy":true,
  "mig":[{"uuid":"MIG-a","profile":"3g.20gb","memoryMiB":20096},{"uuid":"MIG-b","profile":"3g.20gb","memoryMiB":20096},{"uuid":"MIG-c","profile":"1g.5gb","memoryMiB":4864}]},
 {"uuid":"GPU-m1","index":1,"model":"A100","memoryMiB":40960,"numaNode":0,"migEnabled":false,"healthy":true}]}`

const mig3g = "tessera.io/mig-3g.20gb"

// migOf is the one container's MIG devices in a pod's assignment.
func (a *api) migOf(name string) []annv1.MIGAllocation {
	a.t.Helper()
	p := a.get(name)
	as, err := annv1.ParseAssignment(p.Annotations[annv1.AssignmentKey])
	if err != nil {
		a.t.Fatalf("%s: assignment: %v", name, err)
	}
	if len(as.Containers) != 1 || len(as.Containers[0].GPUs) != 0 {
		a.t.Fatalf("%s: assignment %+v: want one container with MIG devices and no GPU shares", name, as)
	}
	return as.Containers[0].MIG
}

// MIG pods bind only to the node with a free device of their profile, each
// gets its own device named in the assignment, the third waits with a
// FailedScheduling event; a restarted scheduler rebuilds the held devices
// from the bound pods and books none of them twice.
func TestMIGPodsBindToFreeInstancesAndSurviveRestart(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("plain", 2, 40*gib, "A100")
	a.rawNode("mig", migInventory)
	first := a.start(testConfig())
	a.pod("m1", res(mig3g, "1"))
	a.pod("m2", res(mig3g, "1"))
	eventually(t, "m1 and m2 bound", func() bool { return a.get("m1").Spec.NodeName != "" && a.get("m2").Spec.NodeName != "" })
	held := map[string]string{}
	for _, name := range []string{"m1", "m2"} {
		if n := a.get(name).Spec.NodeName; n != "mig" {
			t.Fatalf("%s bound to %s, the node without MIG devices", name, n)
		}
		m := a.migOf(name)
		if len(m) != 1 || m[0].Profile != "3g.20gb" || m[0].Parent != "GPU-m0" || (m[0].UUID != "MIG-a" && m[0].UUID != "MIG-b") {
			t.Fatalf("%s assigned %+v: want one 3g.20gb device on GPU-m0", name, m)
		}
		if other, dup := held[m[0].UUID]; dup {
			t.Fatalf("%s and %s both assigned %s", other, name, m[0].UUID)
		}
		held[m[0].UUID] = name
	}
	a.pod("m3", res(mig3g, "1"))
	eventually(t, "m3 reported unschedulable", func() bool { return a.eventFor("m3", "FailedScheduling", "0/2 nodes are available") })
	if n := a.get("m3").Spec.NodeName; n != "" {
		t.Fatalf("m3 bound to %s with both 3g.20gb devices taken", n)
	}

	first.stop()
	a.start(testConfig())
	a.pod("m4", res(mig3g, "1"))
	a.pod("small", res("tessera.io/mig-1g.5gb", "1"))
	eventually(t, "small bound after the restart", func() bool { return a.get("small").Spec.NodeName == "mig" })
	if m := a.migOf("small"); len(m) != 1 || m[0].UUID != "MIG-c" {
		t.Fatalf("small assigned %+v: want MIG-c, the only 1g.5gb device", m)
	}
	eventually(t, "m4 reported unschedulable by the new scheduler", func() bool { return a.eventFor("m4", "FailedScheduling", "0/2 nodes are available") })
	time.Sleep(200 * time.Millisecond)
	for _, name := range []string{"m3", "m4"} {
		if n := a.get(name).Spec.NodeName; n != "" {
			t.Fatalf("%s bound to %s after the restart: a held device was booked twice", name, n)
		}
	}
	for _, name := range []string{"m1", "m2"} {
		if got := a.bindsOf(fmt.Sprint("default/", name)); got != 1 {
			t.Fatalf("%s bound %d times", name, got)
		}
	}

	// Freeing m1's device lets a waiting pod have exactly that one.
	freed := a.migOf("m1")[0].UUID
	a.deletePod("m1")
	eventually(t, "m3 or m4 bound to the freed device", func() bool {
		return a.get("m3").Spec.NodeName != "" || a.get("m4").Spec.NodeName != ""
	})
	for _, name := range []string{"m3", "m4"} {
		if a.get(name).Spec.NodeName != "" {
			if m := a.migOf(name); len(m) != 1 || m[0].UUID != freed {
				t.Fatalf("%s assigned %+v: want the freed %s", name, m, freed)
			}
		}
	}
}

// On rebuild a MIG pod's tessera.io/allocated wins over its assignment, and
// a pod asking for a bad profile or count is refused with the field named.
func TestMIGAllocatedWinsAndBadRequestsNamed(t *testing.T) {
	a := newAPI(t)
	a.rawNode("mig", migInventory)
	assigned := `{"version":"v1","containers":[{"name":"main","mig":[{"uuid":"MIG-a","profile":"3g.20gb","parent":"GPU-m0"}]}]}`
	allocated := `{"version":"v1","containers":[{"name":"main","mig":[{"uuid":"MIG-b","profile":"3g.20gb","parent":"GPU-m0"}]}]}`
	a.pod("old", res(mig3g, "1"), onNode("mig"), created(time.Hour), ann(annv1.AssignmentKey, assigned, annv1.AllocatedKey, allocated))
	a.start(testConfig())
	a.pod("new", res(mig3g, "1"))
	eventually(t, "new bound", func() bool { return a.get("new").Spec.NodeName == "mig" })
	if m := a.migOf("new"); len(m) != 1 || m[0].UUID != "MIG-a" {
		t.Fatalf("new assigned %+v: want MIG-a, MIG-b is the one old really holds", m)
	}
	a.pod("badprofile", res("tessera.io/mig-3g*20gb", "1"))
	a.pod("badcount", res("tessera.io/mig-1g.5gb", "65"))
	a.pod("both", res(mig3g, "1", "tessera.io/gpu", "1"))
	eventually(t, "bad profile named", func() bool { return a.eventFor("badprofile", "FailedScheduling", "tessera.io/mig-3g*20gb") })
	eventually(t, "bad count named", func() bool { return a.eventFor("badcount", "FailedScheduling", "65 is not a whole number in 1..64") })
	eventually(t, "MIG with shares named", func() bool { return a.eventFor("both", "FailedScheduling", "not both") })
}
