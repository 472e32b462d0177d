package partition

import (
	"strings"
	"testing"
)

// migNode: GPU 0 whole, GPU 1 with 1g.5gb a,b and 3g.20gb c, GPU 2 with
// 1g.5gb d.
func migNode(t *testing.T) Node {
	t.Helper()
	n, err := NewNode(NodeSpec{Name: "m", Model: "A100", CPU: 8000, MemMiB: 8192, GPUs: 3, GPUMemMiB: 40960,
		MIGGPUs: []int{1, 2}, MIG: []MIGDevice{
			{UUID: "MIG-a", Profile: "1g.5gb", GPU: 1, Parent: "GPU-1"},
			{UUID: "MIG-b", Profile: "1g.5gb", GPU: 1, Parent: "GPU-1"},
			{UUID: "MIG-c", Profile: "3g.20gb", GPU: 1, Parent: "GPU-1"},
			{UUID: "MIG-d", Profile: "1g.5gb", GPU: 2, Parent: "GPU-2"},
		}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestFixedMIGReserveRelease(t *testing.T) {
	n := migNode(t)
	if got := n.FreeMIG("1g.5gb"); got != 3 {
		t.Fatalf("free 1g.5gb = %d, want 3", got)
	}
	g := Grant{CPU: 1000, MIG: []int{0, 3}}
	if err := n.Reserve(g); err != nil {
		t.Fatal(err)
	}
	if got := n.FreeMIG("1g.5gb"); got != 1 {
		t.Fatalf("free 1g.5gb after reserving two = %d, want 1", got)
	}
	// Either device again is double booking: refused, nothing changes.
	used, cpu := n.MIGUsed, n.FreeCPU
	for _, bad := range []Grant{{MIG: []int{1, 0}}, {MIG: []int{3}}, {MIG: []int{4}}, {MIG: []int{-1}}, {MIG: []int{1, 1}}} {
		if err := n.Reserve(bad); err == nil {
			t.Errorf("reserve %v accepted", bad.MIG)
		}
	}
	if n.MIGUsed != used || n.FreeCPU != cpu {
		t.Fatal("a refused MIG reserve changed the node")
	}
	if err := n.Release(Grant{MIG: []int{1}}); err == nil || !strings.Contains(err.Error(), "MIG-b") {
		t.Fatalf("release of an unheld device: err = %v", err)
	}
	if err := n.Release(g); err != nil {
		t.Fatal(err)
	}
	if n.MIGUsed != 0 || n.FreeMIG("1g.5gb") != 3 {
		t.Fatal("release did not free the devices")
	}
}

func TestFixedMIGGPUServesNoShares(t *testing.T) {
	n := migNode(t)
	if !n.GPUs[1].InMIGMode() || n.GPUs[0].InMIGMode() {
		t.Fatal("MIG mode not set from the spec")
	}
	if err := n.Reserve(Grant{Shares: []Share{{GPU: 2, Milli: 100}}}); err == nil {
		t.Fatal("a share was reserved on a fixed-MIG GPU")
	}
}

func TestPickMIGFillsUsedGPUsFirst(t *testing.T) {
	n := migNode(t)
	// GPU 2 has one free 1g.5gb, GPU 1 two: the lone one goes first.
	if got := n.PickMIG("1g.5gb", 1); len(got) != 1 || got[0] != 3 {
		t.Fatalf("PickMIG(1) = %v, want [3]", got)
	}
	if got := n.PickMIG("1g.5gb", 3); len(got) != 3 {
		t.Fatalf("PickMIG(3) = %v", got)
	}
	if got := n.PickMIG("1g.5gb", 4); got != nil {
		t.Fatalf("PickMIG(4) of 3 free = %v", got)
	}
	if got := n.PickMIG("2g.10gb", 1); got != nil {
		t.Fatalf("PickMIG of a profile the node lacks = %v", got)
	}
}

func TestNewNodeRejectsBadMIG(t *testing.T) {
	base := NodeSpec{Name: "m", GPUs: 2, GPUMemMiB: 1024, MIGGPUs: []int{1}}
	for _, c := range []struct {
		name string
		mig  []int
		devs []MIGDevice
		want string
	}{
		{"device on a whole GPU", []int{1}, []MIGDevice{{UUID: "x", Profile: "1g.5gb", GPU: 0}}, "mig[0].gpu"},
		{"no such GPU", []int{5}, nil, "MIG GPU 5"},
		{"duplicate uuid", []int{1}, []MIGDevice{{UUID: "x", Profile: "1g.5gb", GPU: 1}, {UUID: "x", Profile: "1g.5gb", GPU: 1}}, "mig[1].uuid"},
		{"empty uuid", []int{1}, []MIGDevice{{Profile: "1g.5gb", GPU: 1}}, "mig[0].uuid"},
		{"bad profile", []int{1}, []MIGDevice{{UUID: "x", Profile: "1g 5gb", GPU: 1}}, "mig[0].profile"},
	} {
		s := base
		s.MIGGPUs, s.MIG = c.mig, c.devs
		_, err := NewNode(s)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one naming %q", c.name, err, c.want)
		}
	}
	many := base
	for i := 0; i <= MaxMIGDevices; i++ {
		many.MIG = append(many.MIG, MIGDevice{UUID: string(rune('A'+i%26)) + strings.Repeat("x", i), Profile: "1g.5gb", GPU: 1})
	}
	if _, err := NewNode(many); err == nil {
		t.Error("a node with more than MaxMIGDevices devices was accepted")
	}
}

func TestCheckMIGProfile(t *testing.T) {
	for _, ok := range []string{"1g.5gb", "3g.40gb", "1g.10gb.me", "1g.10gb+me", "7g.80gb"} {
		if err := CheckMIGProfile(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "1g 5gb", "a/b", "mig:1", strings.Repeat("a", 57)} {
		if err := CheckMIGProfile(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
