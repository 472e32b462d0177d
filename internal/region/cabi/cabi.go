// Package cabi reports the layout of tessera_abi.h as the C compiler sees it, so
// that a test can hold the Go mirror in package region to it. It exists only for
// that test: cgo cannot be used in _test.go files.
package cabi

/*
#cgo CFLAGS: -I${SRCDIR}/../../../shim/cuda-hook/include
#define TESSERA_ATOMIC(t) t
#include <stddef.h>
#include "tessera_abi.h"
*/
import "C"

import "unsafe"

// Constants returns the header's #defines by name.
func Constants() map[string]uint64 {
	return map[string]uint64{
		"ABIVersion":     uint64(C.TESSERA_ABI_VERSION),
		"MaxDevices":     uint64(C.TESSERA_MAX_DEVICES),
		"MaxProcs":       uint64(C.TESSERA_MAX_PROCS),
		"UUIDLen":        uint64(C.TESSERA_UUID_LEN),
		"LimitsMagic":    uint64(C.TESSERA_LIMITS_MAGIC),
		"RegionMagic":    uint64(C.TESSERA_REGION_MAGIC),
		"SlotReclaimBit": uint64(C.TESSERA_SLOT_RECLAIM_BIT),
		"ReaperNode":     uint64(C.TESSERA_REAPER_NODE),
		"SeqRecords":     uint64(C.TESSERA_SEQ_RECORDS),
		"SeqDevMask":     uint64(C.TESSERA_SEQ_DEV_MASK),

		"BalloonCeilingWord":   uint64(C.TESSERA_BALLOON_CEILING),
		"BalloonWaitMSWord":    uint64(C.TESSERA_BALLOON_WAIT_MS),
		"BalloonFloorWord":     uint64(C.TESSERA_BALLOON_FLOOR),
		"BalloonDefaultWaitMS": uint64(C.TESSERA_BALLOON_DEFAULT_WAIT_MS),
		"BalloonWaitLanes":     uint64(C.TESSERA_BALLOON_WAIT_LANES),
		"BalloonWaitLaneBits":  uint64(C.TESSERA_BALLOON_WAIT_LANE_BITS),
		"BalloonWaitBoundUs0":  uint64(C.TESSERA_BALLOON_WAIT_BOUND_US_0),
		"BalloonWaitBoundUs1":  uint64(C.TESSERA_BALLOON_WAIT_BOUND_US_1),
		"BalloonWaitBoundUs2":  uint64(C.TESSERA_BALLOON_WAIT_BOUND_US_2),
		"BalloonWaitBoundUs3":  uint64(C.TESSERA_BALLOON_WAIT_BOUND_US_3),
		"BalloonWaitBoundUs4":  uint64(C.TESSERA_BALLOON_WAIT_BOUND_US_4),
		"BalloonWaitBoundUs5":  uint64(C.TESSERA_BALLOON_WAIT_BOUND_US_5),
		"BalloonWaitBoundUs6":  uint64(C.TESSERA_BALLOON_WAIT_BOUND_US_6),
		"PolicyGuaranteed":     uint64(C.TESSERA_POLICY_GUARANTEED),
		"PolicyHard":           uint64(C.TESSERA_POLICY_HARD),
		"GrantRateMask":        uint64(C.TESSERA_GRANT_RATE_MASK),
		"GrantUnpaced":         uint64(C.TESSERA_GRANT_UNPACED),
		"GrantPPMMax":          uint64(C.TESSERA_GRANT_PPM_MAX),
		"GrantArbitrated":      uint64(C.TESSERA_GRANT_ARBITRATED),
		"GrantSolo":            uint64(C.TESSERA_GRANT_SOLO),
		"GrantUntilShift":      uint64(C.TESSERA_GRANT_UNTIL_SHIFT),
		"GrantUntilUsMax":      uint64(C.TESSERA_GRANT_UNTIL_US_MAX),
		"HeartbeatStaleNs":     uint64(C.TESSERA_HEARTBEAT_STALE_NS),
	}
}

// Layout returns sizes ("T") and field offsets ("T.Field") of the C structs, named
// like the Go mirror's types and fields.
func Layout() map[string]uintptr {
	var dl C.tessera_device_limit
	var l C.tessera_limits
	var s C.tessera_proc_slot
	var r C.tessera_region
	var dc C.tessera_device_compute
	var db C.tessera_device_balloon
	return map[string]uintptr{
		"rawDeviceLimit":               unsafe.Sizeof(dl),
		"rawDeviceLimit.UUID":          unsafe.Offsetof(dl.uuid),
		"rawDeviceLimit.MemLimitBytes": unsafe.Offsetof(dl.mem_limit_bytes),
		"rawDeviceLimit.CoreLimitPct":  unsafe.Offsetof(dl.core_limit_pct),
		"rawDeviceLimit.Priority":      unsafe.Offsetof(dl.priority),
		"rawDeviceLimit.ComputePolicy": unsafe.Offsetof(dl.compute_policy),
		"rawDeviceLimit.ComputeGrant":  unsafe.Offsetof(dl.compute_grant),
		"rawDeviceLimit.ComputeBeat":   unsafe.Offsetof(dl.compute_heartbeat_ns),
		"rawDeviceLimit.BalloonWords":  unsafe.Offsetof(dl.balloon_words),

		"rawLimits":             unsafe.Sizeof(l),
		"rawLimits.Magic":       unsafe.Offsetof(l.magic),
		"rawLimits.ABIVersion":  unsafe.Offsetof(l.abi_version),
		"rawLimits.Size":        unsafe.Offsetof(l.size),
		"rawLimits.Generation":  unsafe.Offsetof(l.generation),
		"rawLimits.DeviceCount": unsafe.Offsetof(l.device_count),
		"rawLimits.Flags":       unsafe.Offsetof(l.flags),
		"rawLimits.Reserved":    unsafe.Offsetof(l.reserved),
		"rawLimits.Devices":     unsafe.Offsetof(l.devices),

		"rawProcSlot":           unsafe.Sizeof(s),
		"rawProcSlot.PID":       unsafe.Offsetof(s.pid),
		"rawProcSlot.Flags":     unsafe.Offsetof(s.flags),
		"rawProcSlot.StartTime": unsafe.Offsetof(s.start_time),
		"rawProcSlot.UsedBytes": unsafe.Offsetof(s.used_bytes),
		"rawProcSlot.SeqUntil":  unsafe.Offsetof(s.seq_until),

		"rawRegion":             unsafe.Sizeof(r),
		"rawRegion.Magic":       unsafe.Offsetof(r.magic),
		"rawRegion.ABIVersion":  unsafe.Offsetof(r.abi_version),
		"rawRegion.Size":        unsafe.Offsetof(r.size),
		"rawRegion.MaxDevices":  unsafe.Offsetof(r.max_devices),
		"rawRegion.MaxProcs":    unsafe.Offsetof(r.max_procs),
		"rawRegion.SlotHWM":     unsafe.Offsetof(r.slot_hwm),
		"rawRegion.Pad0":        unsafe.Offsetof(r.pad0),
		"rawRegion.Refused":     unsafe.Offsetof(r.refused),
		"rawRegion.PeakBytes":   unsafe.Offsetof(r.peak_bytes),
		"rawRegion.ReapedProcs": unsafe.Offsetof(r.reaped_procs),
		"rawRegion.ReapedBytes": unsafe.Offsetof(r.reaped_bytes),
		"rawRegion.Reserved":    unsafe.Offsetof(r.reserved),
		"rawRegion.Slots":       unsafe.Offsetof(r.slots),
		"rawRegion.Compute":     unsafe.Offsetof(r.compute),
		"rawRegion.Balloon":     unsafe.Offsetof(r.balloon),

		"rawDeviceBalloon":               unsafe.Sizeof(db),
		"rawDeviceBalloon.WantBytes":     unsafe.Offsetof(db.want_bytes),
		"rawDeviceBalloon.Waiters":       unsafe.Offsetof(db.waiters),
		"rawDeviceBalloon.WaitSinceNs":   unsafe.Offsetof(db.wait_since_ns),
		"rawDeviceBalloon.WaitHist":      unsafe.Offsetof(db.wait_hist),
		"rawDeviceBalloon.WaitsEnded":    unsafe.Offsetof(db.waits_ended),
		"rawDeviceBalloon.WaitNsTotal":   unsafe.Offsetof(db.wait_ns_total),
		"rawDeviceBalloon.PollNs":        unsafe.Offsetof(db.poll_ns),
		"rawDeviceCompute":               unsafe.Sizeof(dc),
		"rawDeviceCompute.BusyNs":        unsafe.Offsetof(dc.busy_ns),
		"rawDeviceCompute.Launches":      unsafe.Offsetof(dc.launches),
		"rawDeviceCompute.DemandNs":      unsafe.Offsetof(dc.demand_ns),
		"rawDeviceCompute.TokensNs":      unsafe.Offsetof(dc.tokens_ns),
		"rawDeviceCompute.RefillNs":      unsafe.Offsetof(dc.refill_ns),
		"rawDeviceCompute.ThrottledNs":   unsafe.Offsetof(dc.throttled_ns),
		"rawDeviceCompute.ThrottleWaits": unsafe.Offsetof(dc.throttle_waits),
		"rawDeviceCompute.Inflight":      unsafe.Offsetof(dc.inflight),
	}
}
