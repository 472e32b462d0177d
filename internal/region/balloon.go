package region

import (
	"fmt"
	"sync/atomic"
)

// Balloon is a device's balloon words in a limits file (tessera_abi.h, "Memory
// balloons"). The zero value means the cap is not lowered.
type Balloon struct {
	CeilingBytes uint64 // the cap the container was given; 0 = not ballooned
	WaitMS       uint64 // the hook's wait bound; 0 = BalloonDefaultWaitMS
	FloorBytes   uint64 // the floor the cap was lowered to
}

// Inflated says whether the cap is lowered below a ceiling.
func (b Balloon) Inflated() bool { return b.CeilingBytes != 0 }

// Balloon returns one device's balloon words.
func (l *Limits) Balloon(uuid string) (Balloon, error) {
	i, err := l.index(uuid)
	if err != nil {
		return Balloon{}, err
	}
	w := &l.raw.Devices[i].BalloonWords
	return Balloon{
		CeilingBytes: atomic.LoadUint64(&w[BalloonCeilingWord]),
		WaitMS:       atomic.LoadUint64(&w[BalloonWaitMSWord]),
		FloorBytes:   atomic.LoadUint64(&w[BalloonFloorWord]),
	}, nil
}

// SetBalloonCap lowers or raises one device's cap together with its balloon words,
// in the order that keeps the hook right at every instant: on the way down the
// ceiling is stored before the cap is lowered (a hook that sees the lowered cap also
// sees that it may wait), on the way back up the cap is raised before the ceiling is
// cleared. A zero Balloon with cap = the old ceiling deflates.
func (l *Limits) SetBalloonCap(uuid string, capBytes uint64, b Balloon) error {
	i, err := l.index(uuid)
	if err != nil {
		return err
	}
	if b.Inflated() && (capBytes == 0 || capBytes > b.CeilingBytes) {
		return fmt.Errorf("limits %s: device %s: lowered cap %d must be 1..ceiling %d", l.m.path, uuid, capBytes, b.CeilingBytes)
	}
	d := &l.raw.Devices[i]
	w := &d.BalloonWords
	if b.Inflated() {
		atomic.StoreUint64(&w[BalloonWaitMSWord], b.WaitMS)
		atomic.StoreUint64(&w[BalloonFloorWord], b.FloorBytes)
		atomic.StoreUint64(&w[BalloonCeilingWord], b.CeilingBytes)
		atomic.StoreUint64(&d.MemLimitBytes, capBytes)
	} else {
		atomic.StoreUint64(&d.MemLimitBytes, capBytes)
		atomic.StoreUint64(&w[BalloonCeilingWord], 0)
		atomic.StoreUint64(&w[BalloonFloorWord], 0)
		atomic.StoreUint64(&w[BalloonWaitMSWord], b.WaitMS)
	}
	atomic.AddUint64(&l.raw.Generation, 1)
	return nil
}

// BalloonWait is a device's wait-for-reclaim words in a usage region.
type BalloonWait struct {
	WantBytes    uint64 // container usage the waiting allocations need; 0 = none
	Waiters      uint64 // allocations waiting now
	WaitSinceNs  uint64 // CLOCK_MONOTONIC start of the current waits; 0 = none
	WaitsGranted uint32 // waits that ended admitted (modulo 2^32)
	WaitsExpired uint32 // waits that ended in CUDA_ERROR_OUT_OF_MEMORY (modulo 2^32)
	WaitNsTotal  uint64 // nanoseconds spent in ended waits
	PollNs       uint64 // CLOCK_MONOTONIC of the latest poll by any waiter
	// Hist counts ended waits by duration, modulo 2^16 per lane: lane k those
	// of at most BalloonWaitBoundsUs[k], the last lane longer ones.
	Hist [BalloonWaitLanes]uint16
}

// Ended is how many waits ended (admitted or not), modulo 2^32 per kind.
func (w BalloonWait) Ended() uint64 { return uint64(w.WaitsGranted) + uint64(w.WaitsExpired) }

// Waits is how many waits were seen: ended plus waiting now.
func (w BalloonWait) Waits() uint64 { return w.Ended() + w.Waiters }

// Since is what happened between an earlier reading prev of the same device and
// w: ended waits per lane, admitted and expired (each lane wraps on its own: the
// differences are taken modulo its width) and the time spent in them.
func (w BalloonWait) Since(prev BalloonWait) (lanes [BalloonWaitLanes]uint64, granted, expired uint64, ns uint64) {
	for k := range lanes {
		lanes[k] = uint64(w.Hist[k] - prev.Hist[k])
	}
	return lanes, uint64(w.WaitsGranted - prev.WaitsGranted), uint64(w.WaitsExpired - prev.WaitsExpired), w.WaitNsTotal - prev.WaitNsTotal
}

// Waiting says whether an owner allocation waits for memory now.
func (w BalloonWait) Waiting() bool { return w.Waiters > 0 && w.WantBytes > 0 }

// BalloonWait reads device d's wait-for-reclaim words.
func (r *Region) BalloonWait(d int) BalloonWait {
	b := &r.raw.Balloon[d]
	ended := atomic.LoadUint64(&b.WaitsEnded)
	w := BalloonWait{
		WantBytes:    atomic.LoadUint64(&b.WantBytes),
		Waiters:      atomic.LoadUint64(&b.Waiters),
		WaitSinceNs:  atomic.LoadUint64(&b.WaitSinceNs),
		WaitsGranted: uint32(ended),
		WaitsExpired: uint32(ended >> 32),
		WaitNsTotal:  atomic.LoadUint64(&b.WaitNsTotal),
		PollNs:       atomic.LoadUint64(&b.PollNs),
	}
	const perWord = 64 / BalloonWaitLaneBits
	for i := range b.WaitHist {
		word := atomic.LoadUint64(&b.WaitHist[i])
		for j := range perWord {
			w.Hist[i*perWord+j] = uint16(word >> (j * BalloonWaitLaneBits))
		}
	}
	return w
}

// LastSignNs is when a waiter last showed itself: its latest poll, or the start of
// the waits if none polled yet.
func (w BalloonWait) LastSignNs() uint64 { return max(w.PollNs, w.WaitSinceNs) }

// ClearBalloonWait drops device d's wait request, for the node agent when no waiter
// has polled for seconds (its waiters were killed mid-wait). seen is the reading the
// decision was made on: if a waiter polled since, nothing is cleared (false). A live
// waiter cleared in the remaining instant counts itself again at its next poll.
// Counters stay.
func (r *Region) ClearBalloonWait(d int, seen BalloonWait) bool {
	b := &r.raw.Balloon[d]
	if !atomic.CompareAndSwapUint64(&b.PollNs, seen.PollNs, 0) {
		return false
	}
	atomic.CompareAndSwapUint64(&b.Waiters, seen.Waiters, 0)
	atomic.CompareAndSwapUint64(&b.WantBytes, seen.WantBytes, 0)
	atomic.CompareAndSwapUint64(&b.WaitSinceNs, seen.WaitSinceNs, 0)
	return true
}
