package placement

import (
	"fmt"
	"strings"

	"github.com/tessera-gpu/tessera/internal/partition"
)

// Request is what one pod asks for.
type Request struct {
	Name     string
	CPUMilli int64
	MemMiB   int64
	// NumGPU GPUs, each with GPUMilli of its compute (1000 is a whole GPU)
	// and GPUMemMiB of its memory (0: the request is a pure compute share, as
	// in the openb traces).
	NumGPU    int
	GPUMilli  int32
	GPUMemMiB int32
	// Models lists the GPU models the pod accepts; empty accepts any.
	Models []string
	// SameIsland requires a multi-GPU pod's GPUs to share one NVLink island;
	// without it one island is only preferred.
	SameIsland bool
	// SameNUMA requires a multi-GPU pod's GPUs to hang off one host NUMA
	// node (with SameIsland: one island within one NUMA node); without it
	// GPUs of one island (and then of one NUMA node) are only preferred.
	SameNUMA bool
	// NumMIG MIG devices of MIGProfile (tessera.io/mig-<profile>), taken
	// whole from the fixed instances a node lists; a request asks for
	// either GPUs or MIG devices.
	MIGProfile string
	NumMIG     int
	// NodeConstraint names the pod's node constraints (selector, affinity,
	// tolerations) for the cluster's NodeFilter; "" is a pod without any,
	// which the filter may still refuse nodes to (taints).
	NodeConstraint string
}

// Validate rejects requests the engine cannot interpret.
func (r *Request) Validate() error {
	switch {
	case r.CPUMilli < 0 || r.MemMiB < 0:
		return fmt.Errorf("request %s: negative CPU or memory", r.Name)
	case r.NumGPU < 0 || r.NumGPU > 64:
		return fmt.Errorf("request %s: %d GPUs is out of range 0..64", r.Name, r.NumGPU)
	case r.NumGPU > 0 && (r.GPUMilli <= 0 || r.GPUMilli > partition.MilliPerGPU):
		return fmt.Errorf("request %s: GPU share %d is out of range 1..%d", r.Name, r.GPUMilli, partition.MilliPerGPU)
	case r.NumGPU > 1 && r.GPUMilli != partition.MilliPerGPU:
		return fmt.Errorf("request %s: %d GPUs of %d milli each: a multi-GPU request takes whole GPUs (%d)", r.Name, r.NumGPU, r.GPUMilli, partition.MilliPerGPU)
	case r.NumGPU == 0 && (r.GPUMilli != 0 || r.GPUMemMiB != 0):
		return fmt.Errorf("request %s: a GPU share without GPUs", r.Name)
	case r.GPUMemMiB < 0:
		return fmt.Errorf("request %s: negative GPU memory", r.Name)
	}
	return r.validateMIG()
}

func (r *Request) validateMIG() error {
	switch {
	case r.NumMIG < 0 || r.NumMIG > partition.MaxMIGDevices:
		return fmt.Errorf("request %s: %d MIG devices is out of range 0..%d", r.Name, r.NumMIG, partition.MaxMIGDevices)
	case r.NumMIG == 0 && r.MIGProfile != "":
		return fmt.Errorf("request %s: MIG profile %q without a device count", r.Name, r.MIGProfile)
	case r.NumMIG == 0:
		return nil
	case r.NumGPU > 0:
		return fmt.Errorf("request %s: both %d GPUs and %d MIG devices: a request asks for one or the other", r.Name, r.NumGPU, r.NumMIG)
	}
	if err := partition.CheckMIGProfile(r.MIGProfile); err != nil {
		return fmt.Errorf("request %s: %w", r.Name, err)
	}
	return nil
}

// Shape is everything about a request that decides where it fits and how it
// scores; requests of one shape are interchangeable to the engine.
type Shape struct {
	CPUMilli   int64
	MemMiB     int64
	NumGPU     int
	GPUMilli   int32
	GPUMemMiB  int32
	Models     uint64 // bit per cluster model id; 0 with AnyModel false admits nothing
	AnyModel   bool
	SameIsland bool
	SameNUMA   bool
	MIGProfile string
	NumMIG     int
	Constraint uint32 // interned NodeConstraint
}

// ShapeOf resolves a request's model names against the cluster's models.
func (c *Cluster) ShapeOf(r *Request) Shape {
	s := Shape{CPUMilli: r.CPUMilli, MemMiB: r.MemMiB, NumGPU: r.NumGPU, GPUMilli: r.GPUMilli,
		GPUMemMiB: r.GPUMemMiB, SameIsland: r.SameIsland, SameNUMA: r.SameNUMA, AnyModel: len(r.Models) == 0,
		MIGProfile: r.MIGProfile, NumMIG: r.NumMIG}
	s.Models = c.modelMask(r.Models)
	s.Constraint = c.constraintID(r.NodeConstraint)
	return s
}

// Admits reports whether the shape accepts GPU model id m.
func (s *Shape) Admits(m uint8) bool { return s.AnyModel || s.Models&(1<<m) != 0 }

// usesGPUs reports whether the shape asks for GPUs or MIG devices (and so
// for a GPU model).
func (s *Shape) usesGPUs() bool { return s.NumGPU > 0 || s.NumMIG > 0 }

// specKey is the canonical text of a model list, as the trace writes it.
func specKey(models []string) string { return strings.Join(models, "|") }
