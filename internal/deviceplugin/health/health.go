// Package health turns NVML events into GPU health. Critical Xid errors and
// double-bit ECC errors make a GPU unhealthy, except Xids that applications
// cause (13, 31, 43, 45, 68, 109 by default), which say nothing about the
// hardware. With RecoverAfter set, a GPU that stays quiet that long is
// healthy again.
package health

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Target receives health changes (the resource manager).
type Target interface {
	SetHealth(uuid string, healthy bool, reason string) bool
}

// Watcher watches NVML events for a set of GPUs.
type Watcher struct {
	Lib          nvml.Interface
	GPUs         []string // UUIDs
	Target       Target
	IgnoredXids  []uint64
	RecoverAfter time.Duration
	Log          *slog.Logger
	// WaitMs is the NVML event wait timeout per poll.
	WaitMs uint32
	// OnXid, when set, sees every Xid event, ignored ones included, with the
	// physical GPU it happened on ("" when the driver did not say).
	OnXid func(uuid string, xid uint64)
	now   func() time.Time
}

const watchedEvents = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError

// Run registers for events and handles them until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	if w.now == nil {
		w.now = time.Now
	}
	if w.WaitMs == 0 {
		w.WaitMs = 1000
	}
	es, ret := w.Lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("NVML event set: %v", ret)
	}
	defer es.Free()
	for _, uuid := range w.GPUs {
		w.register(es, uuid)
	}
	ignored := map[uint64]bool{}
	for _, x := range w.IgnoredXids {
		ignored[x] = true
	}
	bad := map[string]time.Time{}
	for ctx.Err() == nil {
		e, ret := es.Wait(w.WaitMs)
		switch ret {
		case nvml.SUCCESS:
			w.handle(e, ignored, bad)
		case nvml.ERROR_TIMEOUT:
		case nvml.ERROR_GPU_IS_LOST:
			// The driver lost a GPU without saying which: all are suspect.
			for _, uuid := range w.GPUs {
				bad[uuid] = w.now()
				w.Target.SetHealth(uuid, false, "NVML: GPU is lost")
			}
			w.Log.Error("NVML reports a lost GPU; all GPUs marked unhealthy")
		default:
			w.Log.Warn("NVML event wait failed", "err", ret)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
		w.recover(bad)
	}
	return nil
}

// register subscribes to the events the GPU supports. A GPU that supports
// none is still advertised; only its health is not watched.
func (w *Watcher) register(es nvml.EventSet, uuid string) {
	dev, ret := w.Lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		w.Log.Warn("health: no NVML handle", "gpu", uuid, "err", ret)
		return
	}
	supported, ret := dev.GetSupportedEventTypes()
	if ret != nvml.SUCCESS {
		w.Log.Warn("health: supported events unknown; not watching", "gpu", uuid, "err", ret)
		return
	}
	if ret := dev.RegisterEvents(watchedEvents&supported, es); ret != nvml.SUCCESS {
		w.Log.Warn("health: event registration failed; not watching", "gpu", uuid, "err", ret)
	}
}

func (w *Watcher) handle(e nvml.EventData, ignored map[uint64]bool, bad map[string]time.Time) {
	var reason string
	switch {
	case e.EventType&nvml.EventTypeXidCriticalError != 0:
		if w.OnXid != nil {
			w.OnXid(w.eventGPU(e), e.EventData)
		}
		if ignored[e.EventData] {
			w.Log.Info("application Xid ignored", "xid", e.EventData)
			return
		}
		reason = fmt.Sprintf("Xid %d", e.EventData)
	case e.EventType&nvml.EventTypeDoubleBitEccError != 0:
		reason = "double-bit ECC error"
	default:
		return
	}
	targets := w.GPUs // an event without a device affects every GPU
	if e.Device != nil {
		uuid, ret := e.Device.GetUUID()
		if ret == nvml.SUCCESS {
			targets = []string{w.parentOf(e.Device, uuid)}
		}
	}
	for _, uuid := range targets {
		bad[uuid] = w.now()
		if w.Target.SetHealth(uuid, false, reason) {
			w.Log.Warn("GPU unhealthy", "gpu", uuid, "reason", reason)
		}
	}
}

// eventGPU is the physical GPU an event names, "" when it names none.
func (w *Watcher) eventGPU(e nvml.EventData) string {
	if e.Device == nil {
		return ""
	}
	uuid, ret := e.Device.GetUUID()
	if ret != nvml.SUCCESS {
		return ""
	}
	return w.parentOf(e.Device, uuid)
}

// parentOf maps a MIG device's event to its physical GPU.
func (w *Watcher) parentOf(d nvml.Device, uuid string) string {
	if isMig, ret := d.IsMigDeviceHandle(); ret == nvml.SUCCESS && isMig {
		if p, ret := d.GetDeviceHandleFromMigDeviceHandle(); ret == nvml.SUCCESS {
			if pu, ret := p.GetUUID(); ret == nvml.SUCCESS {
				return pu
			}
		}
	}
	return uuid
}

func (w *Watcher) recover(bad map[string]time.Time) {
	if w.RecoverAfter <= 0 {
		return
	}
	for uuid, at := range bad {
		if w.now().Sub(at) >= w.RecoverAfter {
			delete(bad, uuid)
			if w.Target.SetHealth(uuid, true, "") {
				w.Log.Info("GPU healthy again", "gpu", uuid, "quietFor", w.RecoverAfter)
			}
		}
	}
}
