package region

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Compute is one device's compute accounting in a region, summed over all
// processes of the container (written by the hook; see tessera_abi.h).
type Compute struct {
	BusyNs        uint64 // GPU time of completed launch bursts, measured with events
	Launches      uint64
	DemandNs      uint64 // CLOCK_MONOTONIC of the latest launch or wait to launch
	ThrottledNs   uint64 // wall time launches waited for the grant
	ThrottleWaits uint64
	Inflight      uint64 // launch sequences with work in flight (all threads and processes)
}

// Compute reads device i's compute words. Index out of range: zero.
func (r *Region) Compute(i int) Compute {
	if i < 0 || i >= MaxDevices {
		return Compute{}
	}
	c := &r.raw.Compute[i]
	return Compute{
		BusyNs:        atomic.LoadUint64(&c.BusyNs),
		Launches:      atomic.LoadUint64(&c.Launches),
		DemandNs:      atomic.LoadUint64(&c.DemandNs),
		ThrottledNs:   atomic.LoadUint64(&c.ThrottledNs),
		ThrottleWaits: atomic.LoadUint64(&c.ThrottleWaits),
		Inflight:      atomic.LoadUint64(&c.Inflight),
	}
}

// ClearInflight sets device i's in-flight count from seen to what the
// launch-sequence words of the region's slots still hold for it (tessera_abi.h,
// "Launch sequences"), unless it changed meanwhile (a hook started or ended a
// launch sequence: then the count is live and nothing is cleared). For the
// arbiter, on a container idle for long: a count left there without a word is
// what processes killed with work in flight left behind, and it would both
// hold hand-overs and divide the container's billing among sequences that no
// longer exist. Words whose time has passed by now (CLOCK_MONOTONIC ns) are
// expired first, as the hooks' sweep does (an idle container sweeps nothing);
// one whose time has not passed keeps its count: its expiry takes that count
// back later, and had it been cleared here, would take a live sequence's
// instead. Reports whether it took anything back.
func (r *Region) ClearInflight(i int, seen, now uint64) bool {
	if i < 0 || i >= MaxDevices || seen == 0 {
		return false
	}
	expired, held := r.expireSeqs(i, now)
	if expired >= seen {
		return expired > 0
	}
	if want := seen - expired; want > held {
		return atomic.CompareAndSwapUint64(&r.raw.Compute[i].Inflight, want, held) || expired > 0
	}
	return expired > 0
}

// expireSeqs expires device dev's launch-sequence words whose time is at or
// before now, taking their counts back (tessera_abi.h, "Launch sequences"),
// and counts those whose time has not passed. Free slots are looked at too: a
// word written as its process gave its slot back still holds a count.
func (r *Region) expireSeqs(dev int, now uint64) (expired, held uint64) {
	n := min(atomic.LoadUint32(&r.raw.SlotHWM), MaxProcs)
	for s := range r.raw.Slots[:n] {
		for k := range r.raw.Slots[s].SeqUntil {
			w := &r.raw.Slots[s].SeqUntil[k]
			for { // again when its owner refreshed it under us
				v := atomic.LoadUint64(w)
				if v == 0 || int(v&SeqDevMask) != dev {
					break
				}
				if v&^SeqDevMask > now {
					held++
					break
				}
				if atomic.CompareAndSwapUint64(w, v, 0) {
					decFloor(&r.raw.Compute[dev].Inflight)
					expired++
					break
				}
			}
		}
	}
	return expired, held
}

// Grant is what the arbiter lets a container use on one device now.
type Grant struct {
	Unpaced bool   // no pacing (in-flight work is still bounded)
	PPM     uint32 // share of the device's time, parts per million, when paced
	Solo    bool   // no other tenant is active on the GPU: a deeper queue is allowed
	// Until is the turn's deadline after the heartbeat written with the
	// grant (0: none): past it the hook stops by itself until the next
	// grant. Rounded up to whole microseconds, at most GrantUntilUsMax.
	Until time.Duration
}

// Word encodes g as the compute_grant word, marked as the arbiter's.
func (g Grant) Word() uint64 {
	w := uint64(GrantArbitrated)
	if g.Solo {
		w |= GrantSolo
	}
	if g.Until > 0 {
		us := (uint64(g.Until) + 999) / 1000
		if us > GrantUntilUsMax {
			us = GrantUntilUsMax
		}
		w |= us << GrantUntilShift
	}
	if g.Unpaced {
		return w | GrantUnpaced
	}
	ppm := uint64(g.PPM)
	if ppm > GrantPPMMax {
		ppm = GrantPPMMax
	}
	return w | ppm
}

// DecodeGrant reads a compute_grant word; ok is false when no arbiter wrote it.
func DecodeGrant(w uint64) (g Grant, ok bool) {
	if w&GrantArbitrated == 0 {
		return Grant{}, false
	}
	rate := w & GrantRateMask
	g = Grant{Solo: w&GrantSolo != 0, Until: time.Duration(w>>GrantUntilShift&GrantUntilUsMax) * time.Microsecond}
	if rate == GrantUnpaced {
		g.Unpaced = true
	} else {
		g.PPM = uint32(rate)
	}
	return g, true
}

// PolicyName is the annotation value of a compute policy word.
func PolicyName(p uint64) string {
	if p == PolicyHard {
		return "hard"
	}
	return "guaranteed"
}

// ParsePolicy reads a tessera.io/compute-policy value ("" = guaranteed).
func ParsePolicy(s string) (uint64, error) {
	switch s {
	case "", "guaranteed":
		return PolicyGuaranteed, nil
	case "hard":
		return PolicyHard, nil
	}
	return 0, fmt.Errorf("compute policy %q: want guaranteed or hard", s)
}

// SetGrant writes device i's grant and the arbiter's heartbeat (one word each,
// read by the hook at every launch burst). It does not bump the generation:
// the arbiter writes every control period and nothing waits on it.
func (l *Limits) SetGrant(i int, g Grant, beatNs uint64) {
	if i < 0 || i >= int(l.raw.DeviceCount) {
		return
	}
	d := &l.raw.Devices[i]
	atomic.StoreUint64(&d.ComputeGrant, g.Word())
	atomic.StoreUint64(&d.ComputeBeat, beatNs)
}

// Grant reads device i's grant word (ok false: no arbiter has written it).
func (l *Limits) Grant(i int) (Grant, bool) {
	if i < 0 || i >= int(l.raw.DeviceCount) {
		return Grant{}, false
	}
	return DecodeGrant(atomic.LoadUint64(&l.raw.Devices[i].ComputeGrant))
}

// Heartbeat is the CLOCK_MONOTONIC instant of the arbiter's last write to
// device i (0: never).
func (l *Limits) Heartbeat(i int) uint64 {
	if i < 0 || i >= int(l.raw.DeviceCount) {
		return 0
	}
	return atomic.LoadUint64(&l.raw.Devices[i].ComputeBeat)
}

// SetScheduling corrects a device's compute policy and priority in place
// (the device plugin's reconciliation, once it knows the pod for sure).
func (l *Limits) SetScheduling(uuid string, policy uint64, priority int32) error {
	if policy != PolicyGuaranteed && policy != PolicyHard {
		return fmt.Errorf("limits %s: compute policy %d unknown", l.m.path, policy)
	}
	if priority < 0 || priority > 3 {
		return fmt.Errorf("limits %s: priority %d outside 0..3", l.m.path, priority)
	}
	i, err := l.index(uuid)
	if err != nil {
		return err
	}
	d := &l.raw.Devices[i]
	if atomic.LoadUint64(&d.ComputePolicy) == policy && atomic.LoadInt32(&d.Priority) == priority {
		return nil
	}
	atomic.StoreUint64(&d.ComputePolicy, policy)
	atomic.StoreInt32(&d.Priority, priority)
	atomic.AddUint64(&l.raw.Generation, 1)
	return nil
}
