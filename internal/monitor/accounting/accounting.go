// Package accounting reads the node's state directories into per-container,
// per-GPU views: what each container is allowed (limits, core-limits) and what
// its processes hold (region). Files come from containers and may be corrupt,
// truncated, foreign or of another ABI version: such a file is skipped with a
// reason, never trusted and never a crash.
package accounting

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/statedir"
)

// Reasons a file is skipped (the "reason" label of the skip counter).
const (
	SkipTruncated  = "truncated"  // shorter than the layout, or shrunk while mapped
	SkipForeign    = "foreign"    // wrong magic: not a tessera file
	SkipVersion    = "version"    // another ABI version
	SkipCorrupt    = "corrupt"    // size/count fields that do not match the layout
	SkipUnreadable = "unreadable" // cannot be opened or mapped
)

// Reason classifies a read error.
func Reason(err error) string {
	switch {
	case errors.Is(err, region.ErrTruncated):
		return SkipTruncated
	case errors.Is(err, region.ErrBadMagic):
		return SkipForeign
	case errors.Is(err, region.ErrBadVersion):
		return SkipVersion
	case errors.Is(err, region.ErrBadSize):
		return SkipCorrupt
	}
	return SkipUnreadable
}

// GPU is one container's share of one GPU.
type GPU struct {
	UUID string
	// Memory (from the memory allocation's limits and region).
	HasMemory     bool
	MemLimitBytes uint64 // 0 = uncapped
	UsedBytes     uint64 // summed over the region's live slots
	PeakBytes     uint64
	Refused       uint64
	// Compute (from the core allocation's core-limits).
	HasCore      bool
	CoreLimitPct uint32
	Priority     int32
	Hard         bool // compute policy hard (else guaranteed)
	// From the core region, when the allocation has one (HasCompute): the
	// GPU time its hooks measured and the time launches waited for a grant.
	HasCompute  bool
	BusyNs      uint64
	ThrottledNs uint64
}

// Proc is one occupied slot of a region.
type Proc struct {
	PID       uint32 // as the container sees it
	StartTime uint64
	UsedBytes []uint64 // per GPU, in the allocation's GPU order
}

// Allocation is what one state directory says.
type Allocation struct {
	Entry statedir.Entry
	GPUs  []GPU  // in file order (region device index)
	Procs []Proc // memory allocations only
	// Dead processes whose slots were cleared, by anyone, over the region's life.
	ReapedProcs, ReapedBytes uint64
}

// Skip is one file that could not be used.
type Skip struct {
	Key, File, Reason string
	Err               error
}

// Reader reads state directories. It logs each skipped file once per reason
// (a scrape every few seconds must not flood the log) and counts every skip.
type Reader struct {
	StateDir string
	Log      *slog.Logger
	// OnSkip is called for every skipped file (the metric).
	OnSkip func(Skip)
	// OnNewSkip is called when a file is first skipped for a reason (when
	// it is logged): the Event on its pod.
	OnNewSkip func(Skip)

	mu     sync.Mutex
	logged map[string]string // key/file → reason last logged
	maps   mappings
	// reading serialises whole reads: one read must not unmap a file
	// another is reading.
	reading sync.Mutex
}

// ReadAll reads every entry; entries whose files are unusable are left out.
func (r *Reader) ReadAll() ([]Allocation, error) {
	r.reading.Lock()
	defer r.reading.Unlock()
	entries, err := statedir.List(r.StateDir)
	if err != nil {
		return nil, r.skip("", statedir.ContainersDir, err) // counted and logged like a bad file
	}
	r.clear("")
	out := make([]Allocation, 0, len(entries))
	for _, e := range entries {
		a, ok := r.Read(e)
		if ok {
			out = append(out, a)
		}
	}
	r.forget(entries)
	r.maps.keepOnly(entries)
	return out, nil
}

// Read reads one entry.
func (r *Reader) Read(e statedir.Entry) (Allocation, bool) {
	a := Allocation{Entry: e}
	var err error
	switch e.Kind {
	case "mem":
		err = r.readMemory(&a)
	case "core":
		err = r.readCore(&a)
	default:
		return a, false // not an allocation kind with files (or a stray directory)
	}
	if err != nil {
		return a, false
	}
	r.clear(e.Key)
	return a, true
}

func (r *Reader) readMemory(a *Allocation) error {
	limits, err := r.readLimits(a.Entry.Limits())
	if err != nil {
		return r.skip(a.Entry.Key, statedir.LimitsFile, err)
	}
	var u region.Usage
	path := a.Entry.Region()
	reg, err := r.maps.region(path)
	if err != nil {
		return r.skip(a.Entry.Key, statedir.RegionFile, err)
	}
	if err := region.Guard(path, func() {
		if err = reg.Check(); err == nil {
			u = reg.Usage()
		}
	}); err != nil {
		r.maps.drop(path)
		return r.skip(a.Entry.Key, statedir.RegionFile, err)
	}
	if err != nil {
		return r.skip(a.Entry.Key, statedir.RegionFile, err)
	}
	for i, l := range limits {
		a.GPUs = append(a.GPUs, GPU{UUID: l.UUID, HasMemory: true, MemLimitBytes: l.MemLimitBytes,
			UsedBytes: u.UsedBytes[i], PeakBytes: u.PeakBytes[i], Refused: u.Refused[i], Priority: l.Priority})
	}
	for _, p := range u.Procs {
		a.Procs = append(a.Procs, Proc{PID: p.PID, StartTime: p.StartTime, UsedBytes: append([]uint64(nil), p.UsedBytes[:len(limits)]...)})
	}
	a.ReapedProcs, a.ReapedBytes = u.ReapedProcs, u.ReapedBytes
	return nil
}

func (r *Reader) readCore(a *Allocation) error {
	limits, err := r.readLimits(a.Entry.CoreLimits())
	if err != nil {
		return r.skip(a.Entry.Key, statedir.CoreLimitsFile, err)
	}
	var comp [region.MaxDevices]region.Compute
	hasCompute := false
	path := a.Entry.CoreRegion()
	if reg, err := r.maps.region(path); err == nil {
		// Optional: allocations from a plugin before compute time slices have
		// none. A bad one is skipped like any region, the limits still count.
		if gerr := region.Guard(path, func() {
			if err = reg.Check(); err == nil {
				for i := range limits {
					comp[i] = reg.Compute(i)
				}
			}
		}); gerr != nil {
			r.maps.drop(path)
			err = gerr
		}
		if err != nil {
			r.skip(a.Entry.Key, statedir.CoreRegionFile, err)
		} else {
			hasCompute = true
		}
	}
	for i, l := range limits {
		a.GPUs = append(a.GPUs, GPU{UUID: l.UUID, HasCore: true, CoreLimitPct: l.CoreLimitPct, Priority: l.Priority,
			Hard: l.Policy == region.PolicyHard, HasCompute: hasCompute, BusyNs: comp[i].BusyNs, ThrottledNs: comp[i].ThrottledNs})
	}
	return nil
}

// readLimits reads a limits file under Guard.
func (r *Reader) readLimits(path string) ([]region.DeviceLimit, error) {
	l, err := r.maps.limits(path)
	if err != nil {
		return nil, err
	}
	var devs []region.DeviceLimit
	if gerr := region.Guard(path, func() {
		if err = l.Check(); err == nil {
			devs = l.Devices()
		}
	}); gerr != nil {
		r.maps.drop(path)
		return nil, gerr
	}
	if err != nil {
		return nil, err
	}
	for i, d := range devs {
		// The UUID becomes a label value: it must be printable UTF-8.
		if d.UUID == "" || !utf8.ValidString(d.UUID) || strings.ContainsFunc(d.UUID, func(r rune) bool { return !unicode.IsPrint(r) }) {
			return nil, fmt.Errorf("%s: device %d: UUID %q is empty or not printable UTF-8: %w", path, i, d.UUID, region.ErrBadSize)
		}
	}
	return devs, nil
}

func (r *Reader) skip(key, file string, err error) error {
	s := Skip{Key: key, File: file, Reason: Reason(err), Err: err}
	if r.OnSkip != nil {
		r.OnSkip(s)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.logged == nil {
		r.logged = map[string]string{}
	}
	id := key + "/" + file
	if r.logged[id] == s.Reason {
		return err
	}
	r.logged[id] = s.Reason
	r.Log.Warn("state file skipped", "key", key, "file", file, "reason", s.Reason, "err", err)
	if r.OnNewSkip != nil {
		r.OnNewSkip(s)
	}
	return err
}

// clear forgets what was logged for a key once its files read again.
func (r *Reader) clear(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range []string{statedir.LimitsFile, statedir.RegionFile, statedir.CoreLimitsFile, statedir.CoreRegionFile, statedir.ContainersDir} {
		delete(r.logged, key+"/"+f)
	}
}

// forget drops log memory of entries that no longer exist.
func (r *Reader) forget(entries []statedir.Entry) {
	present := make(map[string]bool, len(entries))
	for _, e := range entries {
		present[e.Key] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.logged {
		key, _, _ := cut(id)
		if key != "" && !present[key] {
			delete(r.logged, id)
		}
	}
}

func cut(id string) (string, string, bool) {
	for i := len(id) - 1; i >= 0; i-- {
		if id[i] == '/' {
			return id[:i], id[i+1:], true
		}
	}
	return id, "", false
}
