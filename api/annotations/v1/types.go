package v1

// Annotation keys.
const (
	AssignmentKey = "tessera.io/assignment"
	AllocatedKey  = "tessera.io/allocated"
	NodeGPUsKey   = "tessera.io/node-gpus"
)

// Version is the only schema version this package reads and writes.
const Version = "v1"

// MaxCorePercent is the compute share of one whole GPU.
const MaxCorePercent = 100

// Assignment is the scheduler's decision for one pod.
type Assignment struct {
	Version    string                `json:"version"`
	Containers []ContainerAssignment `json:"containers"`
}

// ContainerAssignment places one container (init or app) on GPUs.
type ContainerAssignment struct {
	// Name is the container's name in the pod spec.
	Name string     `json:"name"`
	GPUs []GPUShare `json:"gpus"`
	// MIG names the MIG devices the container must get (a pod asking for
	// tessera.io/mig-<profile>): the device, its profile and its parent
	// GPU, as the node's inventory lists them. Added within v1: absent in
	// annotations written before it, which parse as before; a reader that
	// does not know it refuses the annotation (strict decoding) rather
	// than allocate a whole GPU in its place.
	MIG []MIGAllocation `json:"mig,omitempty"`
}

// GPUShare is the part of one physical GPU a container gets.
type GPUShare struct {
	UUID string `json:"uuid"`
	// MemoryMiB is the container's memory cap on this GPU; 0 means none requested.
	MemoryMiB uint64 `json:"memoryMiB,omitempty"`
	// CorePercent is the compute share on this GPU (1-100); 0 means none requested.
	CorePercent uint32 `json:"corePercent,omitempty"`
}

// Allocated is what kubelet really allocated to a pod's containers, as read
// back from kubelet's PodResources API by the device plugin.
type Allocated struct {
	Version    string                `json:"version"`
	Containers []ContainerAllocation `json:"containers"`
}

// ContainerAllocation is the realized allocation of one container.
type ContainerAllocation struct {
	Name string          `json:"name"`
	GPUs []GPUAllocation `json:"gpus,omitempty"`
	// MIG lists MIG device UUIDs with their profile.
	MIG []MIGAllocation `json:"mig,omitempty"`
}

// GPUAllocation is the realized share of one physical GPU.
type GPUAllocation struct {
	UUID        string `json:"uuid"`
	MemoryMiB   uint64 `json:"memoryMiB,omitempty"`
	CorePercent uint32 `json:"corePercent,omitempty"`
	// Slots counts tessera.io/gpu slot IDs on this GPU.
	Slots uint32 `json:"slots,omitempty"`
}

// MIGAllocation is one MIG device given (or, in an assignment, to be
// given) to a container.
type MIGAllocation struct {
	UUID    string `json:"uuid"`
	Profile string `json:"profile"`
	Parent  string `json:"parent"`
}

// NodeGPUs is a node's GPU inventory.
type NodeGPUs struct {
	Version string    `json:"version"`
	GPUs    []NodeGPU `json:"gpus"`
}

// NodeGPU describes one physical GPU.
type NodeGPU struct {
	UUID      string `json:"uuid"`
	Index     int    `json:"index"`
	Model     string `json:"model"`
	MemoryMiB uint64 `json:"memoryMiB"`
	SMCount   int    `json:"smCount,omitempty"`
	// NUMANode is -1 when unknown.
	NUMANode    int           `json:"numaNode"`
	NVLinkPeers []string      `json:"nvlinkPeers,omitempty"`
	MIGEnabled  bool          `json:"migEnabled"`
	MIG         []MIGInstance `json:"mig,omitempty"`
	Healthy     bool          `json:"healthy"`
}

// MIGInstance is one MIG device configured on a GPU.
type MIGInstance struct {
	UUID      string `json:"uuid"`
	Profile   string `json:"profile"`
	MemoryMiB uint64 `json:"memoryMiB"`
}
