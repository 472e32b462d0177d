package fakegpu

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Layout of the node state file (test/fakegpu/src/fg_state.h); a test holds these
// to what the C compiler makes of that header.
const (
	StateMagic    = 0x3145544154534746 // "FGSTATE1"
	StateVersion  = 1
	MaxDevices    = 16
	MaxSlots      = 256
	HeaderSize    = 64
	DeviceRecSize = 64
	SlotSize      = 384
	StateSize     = HeaderSize + MaxDevices*DeviceRecSize + MaxSlots*SlotSize
	ownerReaping  = 1 << 63
)

type rawHeader struct {
	Magic             uint64
	Version           uint32
	HeaderSize        uint32
	DeviceSize        uint32
	SlotSize          uint32
	MaxDevices        uint32
	MaxSlots          uint32
	DeviceCount       uint32
	SlotHWM           uint32
	ConfigFingerprint uint64
	BootID            uint64
	Reserved          uint64
}

type rawDevice struct {
	MemBytes    uint64
	TailNs      uint64
	BusyTotalNs uint64
	XidSeq      uint64
	XidLast     uint64
	Reserved    [3]uint64
}

type rawSlot struct {
	Owner     uint64
	ClaimedNs uint64
	Used      [MaxDevices]uint64
	BusyNs    [MaxDevices]uint64
	Contexts  [MaxDevices]uint32
	Reserved  [6]uint64
}

type rawState struct {
	Header  rawHeader
	Devices [MaxDevices]rawDevice
	Slots   [MaxSlots]rawSlot
}

// Device is one simulated GPU's node-wide record.
type Device struct {
	MemBytes    uint64 // physical capacity
	TailNs      uint64 // CLOCK_MONOTONIC ns when its queued kernels finish
	BusyTotalNs uint64 // kernel time ever queued on it
}

// Process is one claimed slot: a process that has initialised the simulated driver.
type Process struct {
	Slot       int
	Pid        int
	StartTicks uint64 // low 31 bits of /proc/<pid>/stat field 22
	Reaping    bool   // being zeroed after its owner died
	ClaimedNs  uint64
	Used       []uint64 // physical bytes per device
	BusyNs     []uint64 // kernel time queued per device
	Contexts   []uint32 // live contexts per device
}

// State is a snapshot of the node state file. Memory used on a device is the sum
// over Processes (dead ones count until a reaper zeroes their slot).
type State struct {
	Devices   []Device
	Processes []Process
}

// ReadState parses the state file at path (FAKEGPU_STATE of the processes).
func ReadState(path string) (*State, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read fakegpu state: %w", err)
	}
	if len(b) != StateSize {
		return nil, fmt.Errorf("fakegpu state %s: size %d, want %d", path, len(b), StateSize)
	}
	var raw rawState
	if err := binary.Read(bytes.NewReader(b), binary.LittleEndian, &raw); err != nil {
		return nil, fmt.Errorf("decode fakegpu state %s: %w", path, err)
	}
	h := raw.Header
	if h.Magic != StateMagic || h.Version != StateVersion || h.SlotSize != SlotSize || h.MaxSlots != MaxSlots {
		return nil, fmt.Errorf("fakegpu state %s: magic %#x version %d slot size %d: not a version %d state file",
			path, h.Magic, h.Version, h.SlotSize, StateVersion)
	}
	if h.DeviceCount > MaxDevices {
		return nil, fmt.Errorf("fakegpu state %s: device count %d > %d", path, h.DeviceCount, MaxDevices)
	}
	st := &State{}
	for d := 0; d < int(h.DeviceCount); d++ {
		r := raw.Devices[d]
		st.Devices = append(st.Devices, Device{MemBytes: r.MemBytes, TailNs: r.TailNs, BusyTotalNs: r.BusyTotalNs})
	}
	for i := 0; i < int(h.SlotHWM) && i < MaxSlots; i++ {
		s := raw.Slots[i]
		if s.Owner == 0 {
			continue
		}
		n := int(h.DeviceCount)
		st.Processes = append(st.Processes, Process{
			Slot:       i,
			Pid:        int(uint32(s.Owner)),
			StartTicks: (s.Owner >> 32) & 0x7fffffff,
			Reaping:    s.Owner&ownerReaping != 0,
			ClaimedNs:  s.ClaimedNs,
			Used:       append([]uint64(nil), s.Used[:n]...),
			BusyNs:     append([]uint64(nil), s.BusyNs[:n]...),
			Contexts:   append([]uint32(nil), s.Contexts[:n]...),
		})
	}
	return st, nil
}

// UsedBytes is the physical memory in use on device dev by all recorded processes.
func (s *State) UsedBytes(dev int) uint64 {
	var sum uint64
	for _, p := range s.Processes {
		sum += p.Used[dev]
	}
	return sum
}

// Process returns the record of pid, if it has one.
func (s *State) Process(pid int) (Process, bool) {
	for _, p := range s.Processes {
		if p.Pid == pid && !p.Reaping {
			return p, true
		}
	}
	return Process{}, false
}

// StartTicks returns /proc/<pid>/stat's start time as the state file records it.
func StartTicks(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	v, err := strconv.ParseUint(string(fields[19]), 10, 64)
	return v & 0x7fffffff, err
}

// InjectXid makes the simulated GPU report Xid error xid on device dev: NVML event
// sets registered for nvmlEventTypeXidCriticalError on it return one event.
func InjectXid(path string, dev int, xid uint64) error {
	if dev < 0 || dev >= MaxDevices {
		return fmt.Errorf("inject Xid: device %d out of range", dev)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("inject Xid: %w", err)
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, StateSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("inject Xid: mmap %s: %w", path, err)
	}
	defer syscall.Munmap(m)
	var raw rawState
	rec := HeaderSize + dev*DeviceRecSize
	// The C side reads these words with C11 atomics; code first, then the sequence.
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&m[rec+int(unsafe.Offsetof(raw.Devices[0].XidLast))])), xid)
	atomic.AddUint64((*uint64)(unsafe.Pointer(&m[rec+int(unsafe.Offsetof(raw.Devices[0].XidSeq))])), 1)
	return nil
}
