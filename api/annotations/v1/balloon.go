package v1

import "fmt"

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
