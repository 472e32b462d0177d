package v1

import (
	"fmt"
	"strings"
)

// Memory balloons (docs/balloon.md). Companion annotations, so that the assignment,
// allocation and inventory schemas stay as they are and a reader that predates
// balloons is unaffected.
const (
	// BalloonKey on a Pod opts its containers in: "true" lets the node lower their
	// caps to a floor while they do not use their memory. Any other value, or none,
	// is off.
	BalloonKey = "tessera.io/balloon"
	// NodeBalloonsKey on a Node: per GPU, what the node agent could reclaim now and
	// what it has lent; written by vgpu-monitor.
	NodeBalloonsKey = "tessera.io/node-balloons"
	// BorrowedKey on a Pod: written by the scheduler with the assignment when the
	// pod rides on reclaimed memory; per GPU, from which owners. A borrower is
	// preemptible by definition and reclaimed first.
	BorrowedKey = "tessera.io/borrowed"
)

// OptedIn says whether a pod's annotations opt it into ballooning.
func OptedIn(annotations map[string]string) bool { return annotations[BalloonKey] == "true" }

// NodeBalloons is a node's balloon state.
type NodeBalloons struct {
	Version string       `json:"version"`
	GPUs    []GPUBalloon `json:"gpus"`
}

// GPUBalloon is one GPU's balloon state.
type GPUBalloon struct {
	UUID string `json:"uuid"`
	// ReclaimableMiB: memory of settled, opted-in containers above their floors that
	// is not lent yet.
	ReclaimableMiB uint64 `json:"reclaimableMiB"`
	// LentMiB: memory taken from owners (their ceilings minus their lowered caps).
	LentMiB uint64 `json:"lentMiB,omitempty"`
	// Owners is how many opted-in containers the GPU holds.
	Owners int `json:"owners,omitempty"`
	// Lenders are the owners that lend or could lend now, by name: what the
	// scheduler may lower each to (it places borrowers on named owners it does
	// not outrank) and which of them need their memory back.
	Lenders []Lender `json:"lenders,omitempty"`
}

// Lender is one opted-in container on one GPU that is settled or lowered.
type Lender struct {
	// Owner is "namespace/pod/container".
	Owner string `json:"owner"`
	// CeilingMiB is its original cap; FloorMiB the lowest cap the policy allows
	// it now (rounded up).
	CeilingMiB uint64 `json:"ceilingMiB"`
	FloorMiB   uint64 `json:"floorMiB"`
	// LentMiB is how far its cap is lowered now.
	LentMiB uint64 `json:"lentMiB,omitempty"`
	// WantsBackMiB > 0: it grew back (or waits in an allocation) and the node is
	// reclaiming that much of what it lent; the borrowers on it must go.
	WantsBackMiB uint64 `json:"wantsBackMiB,omitempty"`
}

// Pod is the lender's pod as "namespace/name" (the scheduler's key).
func (l Lender) Pod() string {
	i := strings.LastIndexByte(l.Owner, '/')
	if i < 0 {
		return l.Owner
	}
	return l.Owner[:i]
}

// Borrowed records the borrowed memory of a pod.
type Borrowed struct {
	Version string        `json:"version"`
	GPUs    []BorrowedGPU `json:"gpus"`
}

// BorrowedGPU is what a pod borrowed on one GPU.
type BorrowedGPU struct {
	UUID string `json:"uuid"`
	// MemoryMiB is the borrowed part of the pod's memory on this GPU.
	MemoryMiB uint64 `json:"memoryMiB"`
	// From names the owners ("namespace/pod/container") it was reclaimed from.
	From []string `json:"from,omitempty"`
}

// ParseNodeBalloons decodes and validates a NodeBalloonsKey annotation value.
func ParseNodeBalloons(s string) (*NodeBalloons, error) {
	return parse[NodeBalloons](NodeBalloonsKey, s)
}

// ParseBorrowed decodes and validates a BorrowedKey annotation value.
func ParseBorrowed(s string) (*Borrowed, error) { return parse[Borrowed](BorrowedKey, s) }

// Validate checks the node's balloon state; the error names the offending field.
func (n *NodeBalloons) Validate() error {
	if err := checkVersion(n.Version); err != nil {
		return err
	}
	if err := checkGPUs("gpus", len(n.GPUs), func(i int) (string, uint32) { return n.GPUs[i].UUID, 0 }); err != nil {
		return err
	}
	for i, g := range n.GPUs {
		if g.Owners < 0 {
			return fmt.Errorf("gpus[%d].owners: %d is negative", i, g.Owners)
		}
		for j, l := range g.Lenders {
			if err := l.validate(fmt.Sprintf("gpus[%d].lenders[%d]", i, j)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Validate checks a borrower's record; the error names the offending field.
func (b *Borrowed) Validate() error {
	if err := checkVersion(b.Version); err != nil {
		return err
	}
	if err := checkGPUs("gpus", len(b.GPUs), func(i int) (string, uint32) { return b.GPUs[i].UUID, 0 }); err != nil {
		return err
	}
	for i, g := range b.GPUs {
		if g.MemoryMiB == 0 {
			return fmt.Errorf("gpus[%d].memoryMiB: a loan of 0", i)
		}
		for j, f := range g.From {
			if f == "" {
				return fmt.Errorf("gpus[%d].from[%d]: empty", i, j)
			}
		}
	}
	return nil
}

func (l Lender) validate(f string) error {
	if parts := strings.Split(l.Owner, "/"); len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return fmt.Errorf("%s.owner: %q is not namespace/pod/container", f, l.Owner)
	}
	switch {
	case l.FloorMiB > l.CeilingMiB:
		return fmt.Errorf("%s.floorMiB: %d above the ceiling %d", f, l.FloorMiB, l.CeilingMiB)
	case l.LentMiB > l.CeilingMiB:
		return fmt.Errorf("%s.lentMiB: %d above the ceiling %d", f, l.LentMiB, l.CeilingMiB)
	case l.WantsBackMiB > l.LentMiB:
		return fmt.Errorf("%s.wantsBackMiB: %d above what it lent (%d)", f, l.WantsBackMiB, l.LentMiB)
	}
	return nil
}
