// Package csrc compiles the simulated GPU's device-list parser and state-file
// header into Go, for tests only: fuzzing the parser and holding the Go mirror of
// the state layout (package fakegpu) to the C one. cgo cannot be used in _test.go
// files, hence this package.
package csrc

/*
#cgo CFLAGS: -std=c11 -D_GNU_SOURCE -I${SRCDIR}/../src
#include <stddef.h>
#include <stdlib.h>
#include "fg_config.c"
#include "fg_state.h"

static size_t state_size(void) { return sizeof(struct fg_state); }
static size_t header_size(void) { return sizeof(struct fg_state_header); }
static size_t device_size(void) { return sizeof(struct fg_state_device); }
static size_t slot_size(void) { return sizeof(struct fg_state_slot); }
static size_t off_hwm(void) { return offsetof(struct fg_state_header, slot_hwm); }
static size_t off_fingerprint(void) { return offsetof(struct fg_state_header, config_fingerprint); }
static size_t off_dev_busy(void) { return offsetof(struct fg_state_device, busy_total_ns); }
static size_t off_dev_xid_seq(void) { return offsetof(struct fg_state_device, xid_seq); }
static size_t off_dev_xid_last(void) { return offsetof(struct fg_state_device, xid_last); }
static size_t off_slot_used(void) { return offsetof(struct fg_state_slot, used); }
static size_t off_slot_busy(void) { return offsetof(struct fg_state_slot, busy_ns); }
static size_t off_slot_contexts(void) { return offsetof(struct fg_state_slot, contexts); }
static size_t off_slots(void) { return offsetof(struct fg_state, slot); }
static unsigned long long state_magic(void) { return FG_STATE_MAGIC; }
static size_t off_slice(void) { return offsetof(struct fg_state_header, slice_ns); }
static size_t off_dev_sched(void) { return offsetof(struct fg_state_device, sched); }
static size_t off_sched(void) { return offsetof(struct fg_state, sched); }
static size_t sched_slot_size(void) { return sizeof(struct fg_sched_slot); }
static size_t off_sched_ring(void) { return offsetof(struct fg_sched_slot, ring); }
static size_t off_sched_snap(void) { return offsetof(struct fg_sched_slot, snap); }
static size_t entry_size(void) { return sizeof(struct fg_sched_entry); }
static size_t snap_size(void) { return sizeof(struct fg_sched_snap); }
static size_t off_snap_ctx(void) { return offsetof(struct fg_sched_snap, ctx); }
static size_t off_snap_busy(void) { return offsetof(struct fg_sched_snap, busy_ns); }
static size_t off_snapctx_busy(void) { return offsetof(struct fg_sched_ctx, busy_ns); }

static struct fg_config *new_config(void) { return calloc(1, sizeof(struct fg_config)); }
static const struct fg_device_cfg *config_dev(const struct fg_config *c, int i) { return &c->dev[i]; }
*/
import "C"

import (
	"errors"
	"unsafe"
)

// Device is one parsed device spec with the identity derived for it.
type Device struct {
	Name     string
	MemBytes uint64
	SMCount  int
	UUID     string
	BusID    string
}

// ParseDevices runs the C parser on text with entries separated by sep (';' for
// FAKEGPU_DEVICES, '\n' for a FAKEGPU_CONFIG file), naming origin in errors.
func ParseDevices(text string, sep byte, origin string) ([]Device, error) {
	ctext, corigin := C.CString(text), C.CString(origin)
	defer C.free(unsafe.Pointer(ctext))
	defer C.free(unsafe.Pointer(corigin))
	cfg := C.new_config()
	defer C.free(unsafe.Pointer(cfg))
	var errbuf [512]C.char
	if C.fg_config_parse_list(cfg, ctext, C.char(sep), corigin, &errbuf[0], C.uint(len(errbuf))) != 0 {
		return nil, errors.New(C.GoString(&errbuf[0]))
	}
	var devs []Device
	for i := 0; i < int(cfg.count); i++ {
		d := C.config_dev(cfg, C.int(i))
		devs = append(devs, Device{
			Name:     C.GoString(&d.name[0]),
			MemBytes: uint64(d.mem_bytes),
			SMCount:  int(d.sm_count),
			UUID:     C.GoString(&d.uuid_str[0]),
			BusID:    C.GoString(&d.bus_id[0]),
		})
	}
	return devs, nil
}

// Layout returns sizes and offsets of the state file's C structs by name.
func Layout() map[string]uint64 {
	return map[string]uint64{
		"state":              uint64(C.state_size()),
		"header":             uint64(C.header_size()),
		"device":             uint64(C.device_size()),
		"slot":               uint64(C.slot_size()),
		"header.slot_hwm":    uint64(C.off_hwm()),
		"header.fingerprint": uint64(C.off_fingerprint()),
		"device.busy_total":  uint64(C.off_dev_busy()),
		"device.xid_seq":     uint64(C.off_dev_xid_seq()),
		"device.xid_last":    uint64(C.off_dev_xid_last()),
		"slot.used":          uint64(C.off_slot_used()),
		"slot.busy_ns":       uint64(C.off_slot_busy()),
		"slot.contexts":      uint64(C.off_slot_contexts()),
		"state.slots":        uint64(C.off_slots()),
		"magic":              uint64(C.state_magic()),
		"header.slice_ns":    uint64(C.off_slice()),
		"device.sched":       uint64(C.off_dev_sched()),
		"state.sched":        uint64(C.off_sched()),
		"sched_slot":         uint64(C.sched_slot_size()),
		"sched_slot.ring":    uint64(C.off_sched_ring()),
		"sched_slot.snap":    uint64(C.off_sched_snap()),
		"ring_entry":         uint64(C.entry_size()),
		"snap":               uint64(C.snap_size()),
		"snap.ctx":           uint64(C.off_snap_ctx()),
		"snap.busy_ns":       uint64(C.off_snap_busy()),
		"snap_ctx.busy_ns":   uint64(C.off_snapctx_busy()),
	}
}
