// Package gputest builds simulated DGX nodes on go-nvml's mock servers for
// tests and benchmarks. The mock servers leave topology, NVLink, NUMA,
// attributes, events, processes and MIG device handles unset; this package
// fills them so discovery, health and placement run their real code paths.
package gputest

import (
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/uuid"
)

// Node is a simulated GPU node.
type Node struct {
	*server.Server
	// Events delivers NVML events to every event set the code under test
	// creates (tests inject Xid errors through it).
	Events chan nvml.EventData

	mu   sync.Mutex
	sms  int
	migs map[int][]nvml.Device // GPU index → MIG device handles
}

// Models the simulated nodes can have.
const (
	DGXA100 = "dgxa100"
	DGXH100 = "dgxh100"
	DGXH200 = "dgxh200"
)

// New returns an 8-GPU node of the given model with every GPU NVLinked to
// every other (NVSwitch), GPUs 0-3 on NUMA node 0 and 4-7 on node 1. Its
// GPU UUIDs are random (go-nvml's mock draws them), so every call is a
// different machine.
func New(model string) (*Node, error) {
	return newNode(model, "")
}

// NewForNode is New for the node called name: its GPU UUIDs (and the MIG
// UUIDs of the instances later created on them) are derived from the name
// and the GPU's index, so a simulated plugin restarted on the same node
// advertises the same devices, as a real node's GPUs keep their UUIDs.
func NewForNode(model, name string) (*Node, error) {
	if name == "" {
		return nil, fmt.Errorf("simulated node: empty name")
	}
	return newNode(model, name)
}

// simulatedUUIDs is the name space of the UUIDs of simulated GPUs and MIG
// devices (a fixed random UUID; RFC 9562 name-based UUIDs).
var simulatedUUIDs = uuid.MustParse("ffbb688d-7155-4523-a096-69d6dfc87552")

// simulatedUUID formats a name-based UUID the way NVML writes GPU
// ("GPU-") and MIG ("MIG-") UUIDs.
func simulatedUUID(prefix, name string) string {
	return prefix + uuid.NewSHA1(simulatedUUIDs, []byte(name)).String()
}

func newNode(model, name string) (*Node, error) {
	var s *server.Server
	sms := 0
	switch model {
	case DGXA100:
		s, sms = dgxa100.New(), 108
	case DGXH100:
		s, sms = dgxh100.New(), 132
	case DGXH200:
		s, sms = dgxh200.New(), 132
	default:
		return nil, fmt.Errorf("unknown simulated node model %q (want %s, %s or %s)", model, DGXA100, DGXH100, DGXH200)
	}
	n := &Node{Server: s, Events: make(chan nvml.EventData, 64), sms: sms, migs: map[int][]nvml.Device{}}
	n.EventSetCreateFunc = n.newEventSet
	byUUID := s.DeviceGetHandleByUUIDFunc
	s.DeviceGetHandleByUUIDFunc = func(uuid string) (nvml.Device, nvml.Return) {
		if m := n.migByUUID(uuid); m != nil {
			return m, nvml.SUCCESS
		}
		return byUUID(uuid)
	}
	for i, d := range s.Devices {
		if name != "" {
			d.(*server.Device).UUID = simulatedUUID("GPU-", fmt.Sprintf("node/%s/gpu/%d", name, i))
		}
		n.completeDevice(d.(*server.Device), i)
	}
	return n, nil
}

// MustNew is New for tests with a known-good model.
func MustNew(model string) *Node {
	n, err := New(model)
	if err != nil {
		panic(err)
	}
	return n
}

// Device returns GPU i.
func (n *Node) Device(i int) *server.Device { return n.Devices[i].(*server.Device) }

func busID(i int) [32]int8 {
	var b [32]int8
	for j, c := range fmt.Sprintf("00000000:%02X:00.0", 0x10+i) {
		b[j] = int8(c)
	}
	return b
}

func (n *Node) completeDevice(d *server.Device, i int) {
	pci := nvml.PciInfo{BusId: busID(i), PciDeviceId: d.Config.PciDeviceId}
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return pci, nvml.SUCCESS }
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return i / 4, nvml.SUCCESS }
	d.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
		return nvml.DeviceAttributes{MultiprocessorCount: uint32(n.sms), MemorySizeMB: d.Config.MemoryMB}, nvml.SUCCESS
	}
	d.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		if n.indexOf(other)/4 == i/4 {
			return nvml.TOPOLOGY_NODE, nvml.SUCCESS
		}
		return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
	}
	// One NVLink to every other GPU: link l of GPU i reaches GPU l (skipping i).
	d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
		if link >= len(n.Devices)-1 {
			return nvml.FEATURE_DISABLED, nvml.ERROR_INVALID_ARGUMENT
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkRemotePciInfoFunc = func(link int) (nvml.PciInfo, nvml.Return) {
		peer := link
		if peer >= i {
			peer++
		}
		return nvml.PciInfo{BusId: busID(peer)}, nvml.SUCCESS
	}
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
	}
	d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(idx int) (nvml.Device, nvml.Return) { return n.migDevice(i, idx) }
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) { return gpuInstanceByID(d, id) }
}

func (n *Node) newEventSet() (nvml.EventSet, nvml.Return) {
	es := &mock.EventSet{}
	es.WaitFunc = func(timeoutMs uint32) (nvml.EventData, nvml.Return) {
		select {
		case e := <-n.Events:
			return e, nvml.SUCCESS
		default:
		}
		// Short waits keep tests fast while exercising the timeout path.
		select {
		case e := <-n.Events:
			return e, nvml.SUCCESS
		case <-timeAfter(timeoutMs):
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
	es.FreeFunc = func() nvml.Return { return nvml.SUCCESS }
	return es, nvml.SUCCESS
}

// InjectXid delivers an Xid critical error event for GPU i.
func (n *Node) InjectXid(i int, xid uint64) {
	n.Events <- nvml.EventData{Device: n.Devices[i], EventType: nvml.EventTypeXidCriticalError, EventData: xid}
}

// indexOf finds a device by UUID: callers may hand back wrapped handles.
func (n *Node) indexOf(d nvml.Device) int {
	uuid, _ := d.GetUUID()
	for i := range n.Devices {
		if n.Device(i).UUID == uuid {
			return i
		}
	}
	return -1
}
