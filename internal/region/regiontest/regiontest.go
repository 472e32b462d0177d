// Package regiontest writes usage regions the way the hook does, for tests of
// the node side that need exact contents without running CUDA processes. The
// offsets follow tessera_abi.h; regiontest_test.go reads every word back
// through internal/region, which a test holds to the C header.
package regiontest

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tessera-gpu/tessera/internal/region"
)

const (
	offHWM     = 24
	offRefused = 32
	offPeak    = offRefused + 8*region.MaxDevices
	offSlots   = offPeak + 8*region.MaxDevices + 16 + 30*8
	slotSize   = 8 + 8 + 8*region.MaxDevices + 6*8
)

// Slot is what one process's slot holds.
type Slot struct {
	PID       uint32
	StartTime uint64
	UsedBytes map[int]uint64 // device index → bytes
}

// Contents is a region's counters and slots.
type Contents struct {
	Refused map[int]uint64
	Peak    map[int]uint64
	Slots   []Slot // written to slots 0..n-1
}

// Write fills an existing region file (made by region.CreateRegion).
func Write(path string, c Contents) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	put := func(off int64, v uint64) {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v)
		if _, werr := f.WriteAt(b[:], off); werr != nil && err == nil {
			err = fmt.Errorf("write %s at %d: %w", path, off, werr)
		}
	}
	for d, v := range c.Refused {
		put(offRefused+int64(8*d), v)
	}
	for d, v := range c.Peak {
		put(offPeak+int64(8*d), v)
	}
	for i, s := range c.Slots {
		base := int64(offSlots + i*slotSize)
		put(base, uint64(s.PID)) // pid and flags (0)
		put(base+8, s.StartTime)
		for d, v := range s.UsedBytes {
			put(base+16+int64(8*d), v)
		}
	}
	// slot_hwm shares its 8 bytes with pad0.
	put(offHWM, uint64(len(c.Slots)))
	return err
}

// MarkReaping leaves slot i as a node reaper killed mid-reap leaves it.
func MarkReaping(path string, i int) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], region.SlotReclaimBit|region.ReaperNode)
	_, err = f.WriteAt(b[:], int64(offSlots+i*slotSize))
	return err
}

// offBalloon is balloon[0] of the region: after the slots and the compute words.
const offBalloon = offSlots + region.MaxProcs*slotSize + region.MaxDevices*64

// WriteBalloonWait leaves device dev's wait-for-reclaim request as a waiting hook
// does: waiters allocations need the container at want bytes, waiting since sinceNs
// (CLOCK_MONOTONIC).
// WriteBalloonPoll stamps device dev's latest waiter poll (balloon[dev].poll_ns).
func WriteBalloonPoll(path string, dev int, pollNs uint64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], pollNs)
	_, err = f.WriteAt(b[:], int64(offBalloon+dev*64+56))
	return err
}

// WriteBalloonEnded leaves device dev's ended-wait words as a hook leaves them:
// the per-wait histogram lanes, the admitted and expired counts and their total
// time.
func WriteBalloonEnded(path string, dev int, hist [region.BalloonWaitLanes]uint16, granted, expired uint32, totalNs uint64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [32]byte
	for k, n := range hist {
		binary.LittleEndian.PutUint16(b[2*k:], n) // lane k at bits 16*(k%4) of word k/4
	}
	binary.LittleEndian.PutUint64(b[16:], uint64(granted)|uint64(expired)<<32)
	binary.LittleEndian.PutUint64(b[24:], totalNs)
	_, err = f.WriteAt(b[:], int64(offBalloon+dev*64+24))
	return err
}

func WriteBalloonWait(path string, dev int, want, waiters, sinceNs uint64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], want)
	binary.LittleEndian.PutUint64(b[8:], waiters)
	binary.LittleEndian.PutUint64(b[16:], sinceNs)
	_, err = f.WriteAt(b[:], int64(offBalloon+dev*64))
	return err
}

// offCompute is compute[0] of the region: right after the slots.
const offCompute = offSlots + region.MaxProcs*slotSize

// Compute maps a region's compute words read-write, as the hooks of a
// container have them, for a test that changes them between steps of the
// node side without allocating (an allocation count would see a file write).
type Compute struct{ mem []byte }

// MapCompute maps the compute words of the region file at path.
func MapCompute(path string) (*Compute, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, offCompute+region.MaxDevices*64, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return &Compute{mem: mem}, nil
}

// Set publishes device dev's cumulative busy time, latest demand stamp and
// in-flight count as a hook does.
func (c *Compute) Set(dev int, busyNs, demandNs, inflight uint64) {
	w := c.mem[offCompute+dev*64:]
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&w[0])), busyNs)
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&w[16])), demandNs)
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&w[56])), inflight)
}

// Close unmaps the words.
func (c *Compute) Close() error { return unix.Munmap(c.mem) }
