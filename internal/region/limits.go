package region

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// DeviceLimit is one GPU's entry in a limits file.
type DeviceLimit struct {
	UUID          string // "GPU-…", as NVML reports it
	MemLimitBytes uint64 // 0 = uncapped
	CoreLimitPct  uint32 // 0 = uncapped; 1..100 = share of one GPU
	Priority      int32  // 0 (highest) .. 3: compute arbitration
	Policy        uint64 // PolicyGuaranteed or PolicyHard
}

// Limits is an open limits file. The node side is its only writer.
type Limits struct {
	m   *mapping
	raw *rawLimits
}

// WriteLimits creates the limits file at path, or updates an existing one in place.
// It never replaces the file, because running hooks keep the old inode mapped; for
// the same reason an existing file must list the same GPUs in the same order.
func WriteLimits(path string, devs []DeviceLimit) error {
	if len(devs) > MaxDevices {
		return fmt.Errorf("limits %s: %d devices, at most %d", path, len(devs), MaxDevices)
	}
	for i, d := range devs {
		if d.UUID == "" || len(d.UUID) >= UUIDLen {
			return fmt.Errorf("limits %s: device %d: UUID %q must be 1..%d bytes", path, i, d.UUID, UUIDLen-1)
		}
		if d.CoreLimitPct > 100 {
			return fmt.Errorf("limits %s: device %s: core limit %d%% exceeds 100", path, d.UUID, d.CoreLimitPct)
		}
		if d.Priority < 0 || d.Priority > 3 {
			return fmt.Errorf("limits %s: device %s: priority %d outside 0..3", path, d.UUID, d.Priority)
		}
		if d.Policy != PolicyGuaranteed && d.Policy != PolicyHard {
			return fmt.Errorf("limits %s: device %s: compute policy %d unknown", path, d.UUID, d.Policy)
		}
	}
	m, fresh, err := mapFile(path, limitsSize, true)
	if err != nil {
		return err
	}
	l := &Limits{m: m, raw: (*rawLimits)(unsafe.Pointer(&m.data[0]))}
	defer l.Close()
	if fresh {
		l.initialise(devs)
		return nil
	}
	if err := l.validate(); err != nil {
		return err
	}
	return l.update(devs)
}

// OpenLimits maps an existing limits file, checking its header.
func OpenLimits(path string) (*Limits, error) {
	m, _, err := mapFile(path, limitsSize, false)
	if err != nil {
		return nil, err
	}
	l := &Limits{m: m, raw: (*rawLimits)(unsafe.Pointer(&m.data[0]))}
	if err := guarded(path, l.validate); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func (l *Limits) validate() error {
	r := l.raw
	if err := checkHeader(l.m.path, atomic.LoadUint64(&r.Magic), r.ABIVersion, r.Size, LimitsMagic, limitsSize); err != nil {
		return err
	}
	if r.DeviceCount > MaxDevices {
		return fmt.Errorf("%s: device count %d exceeds %d: %w", l.m.path, r.DeviceCount, MaxDevices, ErrBadSize)
	}
	return nil
}

// initialise fills a fresh (zeroed) file; the magic is stored last so that a
// reader never sees a valid header in front of unwritten entries.
func (l *Limits) initialise(devs []DeviceLimit) {
	r := l.raw
	r.ABIVersion = ABIVersion
	r.Size = uint32(limitsSize)
	r.DeviceCount = uint32(len(devs))
	for i, d := range devs {
		copy(r.Devices[i].UUID[:], d.UUID)
		atomic.StoreUint64(&r.Devices[i].MemLimitBytes, d.MemLimitBytes)
		atomic.StoreUint32(&r.Devices[i].CoreLimitPct, d.CoreLimitPct)
		atomic.StoreInt32(&r.Devices[i].Priority, d.Priority)
		atomic.StoreUint64(&r.Devices[i].ComputePolicy, d.Policy)
	}
	atomic.StoreUint64(&r.Generation, 1)
	atomic.StoreUint64(&r.Magic, LimitsMagic)
}

func (l *Limits) update(devs []DeviceLimit) error {
	r := l.raw
	if int(r.DeviceCount) != len(devs) {
		return fmt.Errorf("limits %s: file lists %d devices, update has %d", l.m.path, r.DeviceCount, len(devs))
	}
	for i, d := range devs {
		if got := uuidString(r.Devices[i].UUID[:]); got != d.UUID {
			return fmt.Errorf("limits %s: device %d is %s in the file, update names %s", l.m.path, i, got, d.UUID)
		}
	}
	for i, d := range devs {
		atomic.StoreUint64(&r.Devices[i].MemLimitBytes, d.MemLimitBytes)
		atomic.StoreUint32(&r.Devices[i].CoreLimitPct, d.CoreLimitPct)
		atomic.StoreInt32(&r.Devices[i].Priority, d.Priority)
		atomic.StoreUint64(&r.Devices[i].ComputePolicy, d.Policy)
	}
	atomic.AddUint64(&r.Generation, 1)
	return nil
}

// DevicesInto is Devices reusing buf (its length is set to the device count):
// a UUID string already in buf[i] that still matches is kept, so a caller
// polling every millisecond allocates nothing once the file is known.
func (l *Limits) DevicesInto(buf []DeviceLimit) []DeviceLimit {
	r := l.raw
	n := int(r.DeviceCount)
	if n > len(r.Devices) {
		n = len(r.Devices)
	}
	if cap(buf) < n {
		buf = append(buf[:cap(buf)], make([]DeviceLimit, n-cap(buf))...)
	}
	buf = buf[:n]
	for i := range buf {
		d := &r.Devices[i]
		raw := d.UUID[:]
		if j := bytes.IndexByte(raw, 0); j >= 0 {
			raw = raw[:j]
		}
		uuid := buf[i].UUID
		if string(raw) != uuid {
			uuid = string(raw)
		}
		buf[i] = DeviceLimit{
			UUID:          uuid,
			MemLimitBytes: atomic.LoadUint64(&d.MemLimitBytes),
			CoreLimitPct:  atomic.LoadUint32(&d.CoreLimitPct),
			Priority:      atomic.LoadInt32(&d.Priority),
			Policy:        atomic.LoadUint64(&d.ComputePolicy),
		}
	}
	return buf
}

// Devices returns the current entries.
func (l *Limits) Devices() []DeviceLimit {
	r := l.raw
	out := make([]DeviceLimit, r.DeviceCount)
	for i := range out {
		d := &r.Devices[i]
		out[i] = DeviceLimit{
			UUID:          uuidString(d.UUID[:]),
			MemLimitBytes: atomic.LoadUint64(&d.MemLimitBytes),
			CoreLimitPct:  atomic.LoadUint32(&d.CoreLimitPct),
			Priority:      atomic.LoadInt32(&d.Priority),
			Policy:        atomic.LoadUint64(&d.ComputePolicy),
		}
	}
	return out
}

// SetMemLimit changes one device's memory cap while hooks run.
func (l *Limits) SetMemLimit(uuid string, bytes uint64) error {
	i, err := l.index(uuid)
	if err != nil {
		return err
	}
	atomic.StoreUint64(&l.raw.Devices[i].MemLimitBytes, bytes)
	atomic.AddUint64(&l.raw.Generation, 1)
	return nil
}

// SetCoreLimit changes one device's compute share while hooks run.
func (l *Limits) SetCoreLimit(uuid string, pct uint32) error {
	if pct > 100 {
		return fmt.Errorf("limits %s: core limit %d%% exceeds 100", l.m.path, pct)
	}
	i, err := l.index(uuid)
	if err != nil {
		return err
	}
	atomic.StoreUint32(&l.raw.Devices[i].CoreLimitPct, pct)
	atomic.AddUint64(&l.raw.Generation, 1)
	return nil
}

// Generation is bumped by every change.
func (l *Limits) Generation() uint64 { return atomic.LoadUint64(&l.raw.Generation) }

// Index returns the position of a GPU in the file, which is its index in the region.
func (l *Limits) Index(uuid string) (int, error) { return l.index(uuid) }

func (l *Limits) index(uuid string) (int, error) {
	for i := 0; i < int(l.raw.DeviceCount); i++ {
		if uuidString(l.raw.Devices[i].UUID[:]) == uuid {
			return i, nil
		}
	}
	return 0, fmt.Errorf("limits %s: no device %s", l.m.path, uuid)
}

// Close unmaps the file.
func (l *Limits) Close() error { return l.m.close() }

func uuidString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
