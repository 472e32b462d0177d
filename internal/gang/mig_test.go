package gang

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
)

func migMember(name string, n int) Member {
	return Member{Name: name, Request: placement.Request{CPUMilli: 100, NumMIG: n, MIGProfile: "3g.20gb"}}
}

// TestSameNodeMIGGroup: members asking for MIG devices of one node get
// distinct devices there, all or nothing; island and NUMA groups refuse
// MIG members with the reason.
func TestSameNodeMIGGroup(t *testing.T) {
	mig := func(name string, devs int) partition.NodeSpec {
		s := node(name, 1, 1)
		s.MIGGPUs = []int{0}
		for i := 0; i < devs; i++ {
			s.MIG = append(s.MIG, partition.MIGDevice{UUID: fmt.Sprintf("MIG-%s-%d", name, i), Profile: "3g.20gb", GPU: 0, Parent: "GPU-" + name})
		}
		return s
	}
	s := cluster(t, mig("one", 1), mig("three", 3))
	tr := NewTracker(s, time.Minute)
	addAll(t, tr, Spec{Name: "g", MinMember: 2, Locality: SameNode}, migMember("a", 1), migMember("b", 2))
	got, err := tr.Reserve("g")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for name, d := range got {
		if d.NodeName != "three" {
			t.Fatalf("member %s on %s", name, d.NodeName)
		}
		for _, m := range d.Grant.MIG {
			if seen[m] {
				t.Fatalf("device %d granted twice: %v", m, got)
			}
			seen[m] = true
		}
	}
	if len(seen) != 3 {
		t.Fatalf("%d devices granted, want 3: %v", len(seen), got)
	}
	for _, loc := range []Locality{SameIsland, SameNUMA} {
		err := NewTracker(s, time.Minute).Add(Spec{Name: "h", MinMember: 1, Locality: loc}, migMember("c", 1), t0)
		if err == nil || !strings.Contains(err.Error(), "MIG") {
			t.Errorf("%s group with a MIG member: err = %v", loc, err)
		}
	}
}
