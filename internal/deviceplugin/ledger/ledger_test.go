package ledger

import (
	"testing"
	"time"
)

func TestProposalIsTakenOnceFreshAndSized(t *testing.T) {
	l := New()
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	a := ContainerRef{PodUID: "u", Namespace: "ns", Pod: "p", Container: "a"}
	l.Propose("tessera.io/gpu-mem", a, 4)
	if _, ok := l.TakeProposal("tessera.io/gpu-mem", 5); ok {
		t.Fatal("proposal of another size taken")
	}
	l.Propose("tessera.io/gpu-mem", a, 4)
	if ref, ok := l.TakeProposal("tessera.io/gpu-mem", 4); !ok || ref != a {
		t.Fatal("proposal not taken")
	}
	if _, ok := l.TakeProposal("tessera.io/gpu-mem", 4); ok {
		t.Fatal("proposal taken twice")
	}
	l.Propose("tessera.io/gpu-core", a, 10)
	now = now.Add(2 * proposalTTL)
	if _, ok := l.TakeProposal("tessera.io/gpu-core", 10); ok {
		t.Fatal("stale proposal taken")
	}
}

func TestRecordAndReset(t *testing.T) {
	l := New()
	a := ContainerRef{PodUID: "u", Container: "a"}
	l.Record(a, "tessera.io/gpu", []string{"b", "a"})
	if !l.Has(a, "tessera.io/gpu") || l.Has(a, "tessera.io/gpu-mem") || l.Get(a)["tessera.io/gpu"][0] != "a" {
		t.Fatalf("record: %v", l.Snapshot())
	}
	l.Reset(map[ContainerRef]map[string][]string{{PodUID: "v", Container: "b"}: {"tessera.io/gpu-mem": {"x"}}}, time.Now())
	if l.Has(a, "tessera.io/gpu") || len(l.Snapshot()) != 1 {
		t.Fatalf("reset kept stale state: %v", l.Snapshot())
	}
	// A record newer than kubelet's answer survives the reset.
	asOf := time.Now()
	c := ContainerRef{PodUID: "w", Container: "c"}
	l.now = func() time.Time { return asOf.Add(time.Millisecond) }
	l.Record(c, "tessera.io/gpu", []string{"z"})
	l.Reset(nil, asOf)
	if !l.Has(c, "tessera.io/gpu") {
		t.Fatal("reset dropped a record newer than the read-back")
	}
}

// TestResetKeepsNewerRecordOfAnotherResource: kubelet allocates a
// container's resources one after the other, so a read-back can list its
// gpu-mem while its gpu-core is being allocated. The gpu-core record,
// newer than the read-back, must survive it.
func TestResetKeepsNewerRecordOfAnotherResource(t *testing.T) {
	l := New()
	asOf := time.Now()
	l.now = func() time.Time { return asOf.Add(time.Millisecond) }
	c := ContainerRef{PodUID: "w", Container: "c"}
	l.Record(c, "tessera.io/gpu-mem", []string{"m"})
	l.Record(c, "tessera.io/gpu-core", []string{"k"})
	l.Reset(map[ContainerRef]map[string][]string{c: {"tessera.io/gpu-mem": {"m"}}}, asOf)
	if !l.Has(c, "tessera.io/gpu-core") || !l.Has(c, "tessera.io/gpu-mem") {
		t.Fatalf("reset dropped a record newer than the read-back: %v", l.Snapshot())
	}
	// Older records kubelet does not list are gone.
	l.Reset(map[ContainerRef]map[string][]string{c: {"tessera.io/gpu-mem": {"m"}}}, asOf.Add(time.Second))
	if l.Has(c, "tessera.io/gpu-core") {
		t.Fatalf("reset kept a stale record: %v", l.Snapshot())
	}
}
