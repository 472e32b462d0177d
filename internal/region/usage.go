package region

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/tessera-gpu/tessera/internal/hostproc"
)

// Region is an open usage region: the accounting shared by a container's processes.
type Region struct {
	m   *mapping
	raw *rawRegion
}

// ProcUsage is one live slot: a process and what it holds on each device.
type ProcUsage struct {
	Slot      int
	PID       uint32
	StartTime uint64
	UsedBytes [MaxDevices]uint64
}

// Usage is a snapshot of a region.
type Usage struct {
	UsedBytes   [MaxDevices]uint64 // per device, summed over live slots
	Refused     [MaxDevices]uint64
	PeakBytes   [MaxDevices]uint64
	ReapedProcs uint64
	ReapedBytes uint64
	Procs       []ProcUsage
}

// CreateRegion creates an initialised, empty usage region at path. An existing
// valid region is kept as it is (its processes may still be running); an existing
// file that is not a valid region is an error, never silently overwritten.
func CreateRegion(path string) error {
	m, fresh, err := mapFile(path, regionSize, true)
	if err != nil {
		return err
	}
	r := &Region{m: m, raw: (*rawRegion)(unsafe.Pointer(&m.data[0]))}
	defer r.Close()
	if !fresh {
		return r.validate()
	}
	raw := r.raw
	raw.ABIVersion = ABIVersion
	raw.Size = uint32(regionSize)
	raw.MaxDevices = MaxDevices
	raw.MaxProcs = MaxProcs
	atomic.StoreUint64(&raw.Magic, RegionMagic)
	return nil
}

// OpenRegion maps an existing region read-write, checking its header.
func OpenRegion(path string) (*Region, error) {
	m, _, err := mapFile(path, regionSize, false)
	if err != nil {
		return nil, err
	}
	r := &Region{m: m, raw: (*rawRegion)(unsafe.Pointer(&m.data[0]))}
	// The file can shrink between mapFile's size check and this first
	// read (a container truncating its region): fault → error, not a crash.
	if err := guarded(path, r.validate); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (r *Region) validate() error {
	raw := r.raw
	if err := checkHeader(r.m.path, atomic.LoadUint64(&raw.Magic), raw.ABIVersion, raw.Size, RegionMagic, regionSize); err != nil {
		return err
	}
	if raw.MaxDevices != MaxDevices || raw.MaxProcs != MaxProcs {
		return fmt.Errorf("%s: %d devices × %d slots, want %d × %d: %w",
			r.m.path, raw.MaxDevices, raw.MaxProcs, MaxDevices, MaxProcs, ErrBadSize)
	}
	return nil
}

// Close unmaps the region.
func (r *Region) Close() error { return r.m.close() }

func (r *Region) hwm() int {
	n := int(atomic.LoadUint32(&r.raw.SlotHWM))
	return min(n, MaxProcs)
}

// Usage reads the region with atomic loads; slots being reclaimed are skipped.
func (r *Region) Usage() Usage {
	raw := r.raw
	var u Usage
	for d := range MaxDevices {
		u.Refused[d] = atomic.LoadUint64(&raw.Refused[d])
		u.PeakBytes[d] = atomic.LoadUint64(&raw.PeakBytes[d])
	}
	u.ReapedProcs = atomic.LoadUint64(&raw.ReapedProcs)
	u.ReapedBytes = atomic.LoadUint64(&raw.ReapedBytes)
	for i := range r.hwm() {
		s := &raw.Slots[i]
		pid := atomic.LoadUint32(&s.PID)
		if pid == 0 || pid&SlotReclaimBit != 0 {
			continue
		}
		p := ProcUsage{Slot: i, PID: pid, StartTime: atomic.LoadUint64(&s.StartTime)}
		for d := range MaxDevices {
			p.UsedBytes[d] = atomic.LoadUint64(&s.UsedBytes[d])
			u.UsedBytes[d] += p.UsedBytes[d]
		}
		u.Procs = append(u.Procs, p)
	}
	return u
}

// Liveness says whether the process that owns a slot still runs. startTime is 0
// while the owner is still claiming the slot; then only the pid can be checked.
type Liveness func(pid uint32, startTime uint64) bool

// Reap clears the slots of dead processes as the node reaper and returns how many
// it cleared and the bytes they held. It also finishes clears that an earlier
// node reaper (a monitor that was restarted mid-way) left behind.
func (r *Region) Reap(alive Liveness) (procs int, bytes uint64) {
	const mine = SlotReclaimBit | ReaperNode
	for i := range r.hwm() {
		s := &r.raw.Slots[i]
		pid := atomic.LoadUint32(&s.PID)
		switch {
		case pid == 0:
			continue
		case pid == mine:
			// Left behind by a previous node reaper: it is ours to finish.
		case pid&SlotReclaimBit != 0:
			continue // a container process is clearing it
		case alive(pid, atomic.LoadUint64(&s.StartTime)):
			continue
		case !atomic.CompareAndSwapUint32(&s.PID, pid, mine):
			continue // its state changed under us; look again next time
		}
		bytes += r.clearSlot(s)
		atomic.StoreUint64(&s.StartTime, 0)
		atomic.CompareAndSwapUint32(&s.PID, mine, 0)
		procs++
	}
	atomic.AddUint64(&r.raw.ReapedProcs, uint64(procs))
	atomic.AddUint64(&r.raw.ReapedBytes, bytes)
	return procs, bytes
}

// clearSlot zeroes a dead process's slot. Its launch-sequence words (core
// region) are expired first: each still holds one count of in-flight work
// that the process will never take back (tessera_abi.h, "Launch sequences").
func (r *Region) clearSlot(s *rawProcSlot) uint64 {
	for k := range s.SeqUntil {
		if v := atomic.SwapUint64(&s.SeqUntil[k], 0); v != 0 {
			decFloor(&r.raw.Compute[v&SeqDevMask].Inflight)
		}
	}
	var total uint64
	for d := range MaxDevices {
		total += atomic.SwapUint64(&s.UsedBytes[d], 0)
	}
	return total
}

// ProcessAlive is the Liveness of processes in the caller's pid namespace (slots
// hold pids as the container sees them: a reaper in another namespace must map
// them first). A process is alive when its pid exists, is not a zombie (its
// device memory is gone with its address space) and, when startTime is known,
// started at that time (/proc/<pid>/stat field 22), so a reused pid is not
// mistaken for the slot's owner. A process that cannot be read for another
// reason counts as alive: never take a live process's usage away.
func ProcessAlive(pid uint32, startTime uint64) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ESRCH)
	}
	st, err := hostproc.ParseStat(data)
	if err != nil {
		return true
	}
	if st.Finished() {
		return false
	}
	return startTime == 0 || st.StartTime == startTime
}

// parseStat returns the state (field 3), start time (field 22) and thread
// count (field 20) of a /proc/<pid>/stat line (hostproc.ParseStat reads it).
func parseStat(data []byte) (state byte, start, threads uint64, ok bool) {
	st, err := hostproc.ParseStat(data)
	if err != nil {
		return 0, 0, 0, false
	}
	return st.State, st.StartTime, st.Threads, true
}

// decFloor subtracts 1 from *w, never below 0 (a count taken back already).
func decFloor(w *uint64) {
	for {
		cur := atomic.LoadUint64(w)
		if cur == 0 || atomic.CompareAndSwapUint64(w, cur, cur-1) {
			return
		}
	}
}
