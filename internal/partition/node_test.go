package partition

import (
	"math"
	"strings"
	"testing"
)

func newTestNode(t *testing.T) Node {
	t.Helper()
	n, err := NewNode(NodeSpec{Name: "n0", Model: "A100", CPU: 32000, MemMiB: 65536, GPUs: 8, GPUMemMiB: 40960, Islands: 2, NUMANodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestNewNodeTopology(t *testing.T) {
	n := newTestNode(t)
	for i, g := range n.GPUs {
		want := int8(i / 4)
		if g.Island != want || g.NUMA != want {
			t.Errorf("GPU %d: island %d numa %d, want %d", i, g.Island, g.NUMA, want)
		}
		if !g.Idle() {
			t.Errorf("GPU %d of a new node is not idle", i)
		}
	}
	if n.FreeMilli() != 8000 {
		t.Errorf("FreeMilli = %d, want 8000", n.FreeMilli())
	}
}

func TestNewNodeRejectsBadSpecs(t *testing.T) {
	for _, s := range []NodeSpec{
		{Model: "x", GPUs: 1},
		{Name: "a", CPU: -1},
		{Name: "a", GPUs: 65},
		{Name: "a", GPUs: 1, GPUMemMiB: -5},
		{Name: "a", GPUs: 64, Islands: 200}, // island ids would wrap the int8
		{Name: "a", GPUs: 8, NUMANodes: -1},
	} {
		if _, err := NewNode(s); err == nil {
			t.Errorf("NewNode(%+v) accepted a bad spec", s)
		}
	}
}

func TestReserveRelease(t *testing.T) {
	n := newTestNode(t)
	g := Grant{CPU: 4000, MemMiB: 1024, Shares: []Share{{GPU: 2, Milli: 300, MemMiB: 4096}, {GPU: 5, Milli: 1000}}}
	if err := n.Reserve(g); err != nil {
		t.Fatal(err)
	}
	if n.FreeCPU != 28000 || n.FreeMemMiB != 64512 || n.GPUs[2].FreeMilli != 700 || n.GPUs[2].FreeMemMiB != 36864 || n.GPUs[5].FreeMilli != 0 {
		t.Fatalf("after reserve: %+v", n)
	}
	if err := n.Release(g); err != nil {
		t.Fatal(err)
	}
	if n.FreeCPU != n.CPU || n.FreeMilli() != 8000 || !n.GPUs[2].Idle() {
		t.Fatalf("release did not restore the node: %+v", n)
	}
}

func TestReserveIsAllOrNothing(t *testing.T) {
	n := newTestNode(t)
	if err := n.Reserve(Grant{Shares: []Share{{GPU: 0, Milli: 600}}}); err != nil {
		t.Fatal(err)
	}
	before := n.GPUs[1]
	cpu := n.FreeCPU
	bad := []Grant{
		{CPU: 1000, Shares: []Share{{GPU: 1, Milli: 500}, {GPU: 0, Milli: 500}}}, // GPU 0 has 400 left
		{CPU: 40000},                          // more CPU than the node has
		{Shares: []Share{{GPU: 8, Milli: 1}}}, // no such GPU
		{Shares: []Share{{GPU: 1, Milli: 100}, {GPU: 1, Milli: 100}}}, // two shares on one GPU
		{Shares: []Share{{GPU: 1, Milli: -1}}},
	}
	for i, g := range bad {
		if err := n.Reserve(g); err == nil {
			t.Errorf("grant %d: reserve accepted %+v", i, g)
		}
	}
	if n.GPUs[1] != before || n.FreeCPU != cpu || n.GPUs[0].FreeMilli != 400 {
		t.Fatalf("a failed reserve changed the node: %+v", n)
	}
}

func TestReleaseMoreThanReservedFails(t *testing.T) {
	n := newTestNode(t)
	err := n.Release(Grant{Shares: []Share{{GPU: 0, Milli: 100}}})
	if err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("release of nothing reserved: err = %v", err)
	}
	if err := n.Release(Grant{CPU: 1}); err == nil {
		t.Fatal("release of unreserved CPU succeeded")
	}
}

func TestSharesRefusedOnMIGGPU(t *testing.T) {
	n := newTestNode(t)
	n.GPUs[3].MIG = NewMIGLayout(&A100_40GB)
	if err := n.Reserve(Grant{Shares: []Share{{GPU: 3, Milli: 100}}}); err == nil {
		t.Fatal("a share was reserved on a GPU in MIG mode")
	}
	if n.GPUs[3].Idle() != true {
		t.Fatal("MIG GPU without instances should be idle")
	}
}

// A release so large that free + released overflows must still be refused
// and change nothing (the sum must not wrap into a "fits" answer).
func TestReleaseOverflowIsRefused(t *testing.T) {
	n := newTestNode(t)
	if err := n.Reserve(Grant{CPU: 1000, MemMiB: 1, Shares: []Share{{GPU: 0, Milli: 500, MemMiB: 1}}}); err != nil {
		t.Fatal(err)
	}
	before := n.GPUs[0]
	cpu, mem := n.FreeCPU, n.FreeMemMiB
	for i, g := range []Grant{
		{Shares: []Share{{GPU: 0, Milli: math.MaxInt32}}},
		{Shares: []Share{{GPU: 0, MemMiB: math.MaxInt32}}},
		{CPU: math.MaxInt64},
		{MemMiB: math.MaxInt64},
	} {
		if err := n.Release(g); err == nil {
			t.Errorf("release %d of %+v accepted", i, g)
		}
	}
	if n.GPUs[0] != before || n.FreeCPU != cpu || n.FreeMemMiB != mem {
		t.Fatalf("a refused release changed the node: GPU 0 %+v, CPU %d, memory %d", n.GPUs[0], n.FreeCPU, n.FreeMemMiB)
	}
}
