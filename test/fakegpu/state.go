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
	StateVersion  = 2
	MaxDevices    = 16
	MaxSlots      = 256
	HeaderSize    = 64
	DeviceRecSize = 64
	SlotSize      = 384
	ownerReaping  = 1 << 63

	// The timeline (fg_sched.h): per slot a launch ring and snapshot buffers.
	RingEntries   = 512
	RingEntrySize = 32
	SnapBufs      = 4
	SnapCtxSize   = 32
	SnapSize      = 64 + MaxSlots*SnapCtxSize
	SchedSlotSize = 64 + RingEntries*RingEntrySize + SnapBufs*SnapSize
	schedOffset   = HeaderSize + MaxDevices*DeviceRecSize + MaxSlots*SlotSize
	StateSize     = schedOffset + MaxSlots*SchedSlotSize
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
	SliceNs           uint64
}

type rawDevice struct {
	MemBytes    uint64
	Reserved0   uint64
	BusyTotalNs uint64
	XidSeq      uint64
	XidLast     uint64
	Sched       uint64
	Reserved    [2]uint64
}

type rawSlot struct {
	Owner     uint64
	ClaimedNs uint64
	Used      [MaxDevices]uint64
	BusyNs    [MaxDevices]uint64
	Contexts  [MaxDevices]uint32
	Reserved  [6]uint64
}

// rawState is the file up to the timeline, which ReadState reads separately.
type rawState struct {
	Header  rawHeader
	Devices [MaxDevices]rawDevice
	Slots   [MaxSlots]rawSlot
}

type rawSnapCtx struct {
	Tag     uint64
	DonePos uint64
	BusyNs  uint64
	Next    uint64
}

type rawSnap struct {
	Gen      uint64
	SimNs    uint64
	Dev      int32
	Cur      int32
	SliceEnd uint64
	BusyNs   uint64
	NCtx     uint64
	Reserved [2]uint64
	Ctx      [MaxSlots]rawSnapCtx
}

// Device is one simulated GPU's node-wide record.
type Device struct {
	MemBytes    uint64 // physical capacity
	BusyTotalNs uint64 // kernel time ever queued on it
	// The committed timeline: at CLOCK_MONOTONIC SchedNs the device had run
	// RunNs of kernels in all. Exact at that instant; a commit happens at most
	// every 2 ms while processes synchronise or launch (0 before the first).
	SchedNs uint64
	RunNs   uint64
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
	RunNs      []uint64 // kernel time run per device, at that device's SchedNs
	Contexts   []uint32 // live contexts per device
}

// State is a snapshot of the node state file. Memory used on a device is the sum
// over Processes (dead ones count until a reaper zeroes their slot).
type State struct {
	SliceNs   uint64 // time slice of a context on a shared device
	Devices   []Device
	Processes []Process
}

// ReadState parses the state file at path (FAKEGPU_STATE of the processes). It
// reads only what is in use (the claimed slots, each device's committed
// timeline up to its last context): tests sample it every few milliseconds.
func ReadState(path string) (*State, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read fakegpu state: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read fakegpu state: %w", err)
	}
	if fi.Size() != StateSize {
		return nil, fmt.Errorf("fakegpu state %s: size %d, want %d", path, fi.Size(), StateSize)
	}
	b := make([]byte, schedOffset)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("read fakegpu state %s: %w", path, err)
	}
	var h rawHeader
	var devs [MaxDevices]rawDevice
	if err := binary.Read(bytes.NewReader(b), binary.LittleEndian, &h); err != nil {
		return nil, fmt.Errorf("decode fakegpu state %s: %w", path, err)
	}
	if h.Magic != StateMagic || h.Version != StateVersion || h.SlotSize != SlotSize || h.MaxSlots != MaxSlots {
		return nil, fmt.Errorf("fakegpu state %s: magic %#x version %d slot size %d: not a version %d state file",
			path, h.Magic, h.Version, h.SlotSize, StateVersion)
	}
	if h.DeviceCount > MaxDevices {
		return nil, fmt.Errorf("fakegpu state %s: device count %d > %d", path, h.DeviceCount, MaxDevices)
	}
	if err := binary.Read(bytes.NewReader(b[HeaderSize:]), binary.LittleEndian, &devs); err != nil {
		return nil, fmt.Errorf("decode fakegpu state %s: %w", path, err)
	}
	st := &State{SliceNs: h.SliceNs}
	snaps := make([]snapView, h.DeviceCount)
	for d := 0; d < int(h.DeviceCount); d++ {
		r := devs[d]
		if err := readSnap(f, d, &snaps[d]); err != nil {
			return nil, fmt.Errorf("fakegpu state %s: device %d timeline: %w", path, d, err)
		}
		st.Devices = append(st.Devices, Device{MemBytes: r.MemBytes, BusyTotalNs: r.BusyTotalNs,
			SchedNs: snaps[d].simNs, RunNs: snaps[d].busyNs})
	}
	n := int(h.DeviceCount)
	for i := 0; i < int(h.SlotHWM) && i < MaxSlots; i++ {
		s := decodeSlot(b[HeaderSize+MaxDevices*DeviceRecSize+i*SlotSize:])
		if s.Owner == 0 {
			continue
		}
		run := make([]uint64, n)
		for d := range run {
			if i < len(snaps[d].ctx) && snaps[d].ctx[i].Tag == s.Owner {
				run[d] = snaps[d].ctx[i].BusyNs
			}
		}
		st.Processes = append(st.Processes, Process{
			RunNs:      run,
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

var le = binary.LittleEndian

// decodeSlot decodes one rawSlot from b (SlotSize bytes) field by field:
// reflection-based decoding of every slot was most of a ReadState.
func decodeSlot(b []byte) rawSlot {
	var s rawSlot
	used, busy, ctxs := unsafe.Offsetof(s.Used), unsafe.Offsetof(s.BusyNs), unsafe.Offsetof(s.Contexts)
	s.Owner, s.ClaimedNs = le.Uint64(b), le.Uint64(b[unsafe.Offsetof(s.ClaimedNs):])
	for d := uintptr(0); d < MaxDevices; d++ {
		s.Used[d] = le.Uint64(b[used+8*d:])
		s.BusyNs[d] = le.Uint64(b[busy+8*d:])
		s.Contexts[d] = le.Uint32(b[ctxs+4*d:])
	}
	return s
}

// snapView is the part of a committed snapshot ReadState reports.
type snapView struct {
	simNs, busyNs uint64
	ctx           []rawSnapCtx // records [0, nctx)
}

// readSnap decodes the snapshot device dev's sched word names (none yet: the
// empty timeline). The file changes while we read: a copy whose generation is
// not the word's, or read while the word moved, is read again.
func readSnap(f *os.File, dev int, out *snapView) error {
	wordAt := int64(HeaderSize + dev*DeviceRecSize + int(unsafe.Offsetof(rawDevice{}.Sched)))
	var w [8]byte
	buf := make([]byte, SnapSize)
	for tries := 0; tries < 1000; tries++ {
		if _, err := f.ReadAt(w[:], wordAt); err != nil {
			return err
		}
		word := le.Uint64(w[:])
		if word&0xffff == 0 {
			*out = snapView{}
			return nil
		}
		b := int64(word&0xffff) - 1
		if b/SnapBufs >= MaxSlots {
			return fmt.Errorf("sched word %#x names no buffer", word)
		}
		off := schedOffset + (b/SnapBufs)*SchedSlotSize + 64 + RingEntries*RingEntrySize + (b%SnapBufs)*SnapSize
		if _, err := f.ReadAt(buf[:64], off); err != nil {
			return err
		}
		nctx := le.Uint64(buf[unsafe.Offsetof(rawSnap{}.NCtx):])
		if nctx > MaxSlots {
			nctx = MaxSlots
		}
		if _, err := f.ReadAt(buf[64:64+nctx*SnapCtxSize], off+64); err != nil {
			return err
		}
		var again [8]byte
		if _, err := f.ReadAt(again[:], wordAt); err != nil {
			return err
		}
		if le.Uint64(buf) != word>>16 || le.Uint64(again[:]) != word {
			continue
		}
		out.simNs = le.Uint64(buf[unsafe.Offsetof(rawSnap{}.SimNs):])
		out.busyNs = le.Uint64(buf[unsafe.Offsetof(rawSnap{}.BusyNs):])
		out.ctx = make([]rawSnapCtx, nctx)
		for i := range out.ctx {
			c := buf[64+i*SnapCtxSize:]
			out.ctx[i] = rawSnapCtx{Tag: le.Uint64(c), DonePos: le.Uint64(c[8:]), BusyNs: le.Uint64(c[16:]), Next: le.Uint64(c[24:])}
		}
		return nil
	}
	return fmt.Errorf("timeline snapshot kept changing while read")
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
