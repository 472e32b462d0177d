// Package region reads and writes the shared-memory files through which the CUDA
// hook, the device plugin and the node monitor cooperate: the per-container limits
// file (written only by the node side) and the usage region (shared by the
// container's processes). The layout is defined once, in
// shim/cuda-hook/include/tessera_abi.h; the types here mirror it field for field and
// a test compares every offset with what the C compiler makes of that header.
package region

// ABI constants; see tessera_abi.h for their meaning.
const (
	ABIVersion     = 2
	MaxDevices     = 16
	MaxProcs       = 1024
	UUIDLen        = 96
	LimitsMagic    = 0x53544d494c535354 // "TSSLIMTS"
	RegionMagic    = 0x4e4f494745525354 // "TSREGION"
	SlotReclaimBit = 0x80000000
	ReaperNode     = 0x7fffffff

	PolicyGuaranteed = 0
	PolicyHard       = 1

	GrantRateMask    = 0xffffffff
	GrantUnpaced     = 0xffffffff
	GrantPPMMax      = 1000000
	GrantArbitrated  = 1 << 32
	GrantSolo        = 1 << 33
	GrantUntilShift  = 40
	GrantUntilUsMax  = 0xffffff
	HeartbeatStaleNs = 1000000000

	SeqRecords = 6   // launch-sequence words per process slot (core region only)
	SeqDevMask = 0xf // low bits of a launch-sequence word: the device
)

// Indices of a device limit's balloon words and the default wait (tessera_abi.h).
const (
	BalloonCeilingWord   = 0
	BalloonWaitMSWord    = 1
	BalloonFloorWord     = 2
	BalloonDefaultWaitMS = 3000
	BalloonWaitLanes     = 8
	BalloonWaitLaneBits  = 16
)

// BalloonWaitBoundsUs are the upper bounds (inclusive, µs) of the hook's per-wait
// histogram lanes 0..6; lane 7 counts longer waits (TESSERA_BALLOON_WAIT_BOUND_US_k).
var BalloonWaitBoundsUs = [BalloonWaitLanes - 1]uint64{1000, 10000, 50000, 200000, 500000, 1000000, 2500000}

type rawDeviceLimit struct {
	UUID          [UUIDLen]byte
	MemLimitBytes uint64
	CoreLimitPct  uint32
	Priority      int32
	ComputePolicy uint64    // PolicyGuaranteed or PolicyHard
	ComputeGrant  uint64    // GrantArbitrated | rate in ppm (or GrantUnpaced)
	ComputeBeat   uint64    // CLOCK_MONOTONIC ns of the arbiter's last pass
	BalloonWords  [3]uint64 // reserved for memory balloons
}

type rawLimits struct {
	Magic       uint64
	ABIVersion  uint32
	Size        uint32
	Generation  uint64
	DeviceCount uint32
	Flags       uint32
	Reserved    [8]uint64
	Devices     [MaxDevices]rawDeviceLimit
}

type rawProcSlot struct {
	PID       uint32
	Flags     uint32
	StartTime uint64
	UsedBytes [MaxDevices]uint64
	SeqUntil  [SeqRecords]uint64 // core region: launch sequences counted in flight until then
}

type rawRegion struct {
	Magic       uint64
	ABIVersion  uint32
	Size        uint32
	MaxDevices  uint32
	MaxProcs    uint32
	SlotHWM     uint32
	Pad0        uint32
	Refused     [MaxDevices]uint64
	PeakBytes   [MaxDevices]uint64
	ReapedProcs uint64
	ReapedBytes uint64
	Reserved    [30]uint64
	Slots       [MaxProcs]rawProcSlot
	Compute     [MaxDevices]rawDeviceCompute
	Balloon     [MaxDevices]rawDeviceBalloon
}

// rawDeviceCompute: per-device compute accounting written by the hook.
type rawDeviceCompute struct {
	BusyNs        uint64
	Launches      uint64
	DemandNs      uint64
	TokensNs      uint64
	RefillNs      uint64
	ThrottledNs   uint64
	ThrottleWaits uint64
	Inflight      uint64
}

// rawDeviceBalloon: the hook's per-device wait-for-reclaim request (see
// tessera_abi.h, "Memory balloons").
type rawDeviceBalloon struct {
	WantBytes   uint64
	Waiters     uint64
	WaitSinceNs uint64
	WaitHist    [2]uint64 // 8 lanes of 16 bits, 4 per word
	WaitsEnded  uint64    // admitted (low 32 bits) | expired (high 32 bits)
	WaitNsTotal uint64
	PollNs      uint64
}
