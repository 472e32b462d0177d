package region

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/tessera-gpu/tessera/internal/region/cabi"
)

// TestLayoutMatchesCHeader holds every size and offset of the Go mirror to the C
// header as the C compiler lays it out.
func TestLayoutMatchesCHeader(t *testing.T) {
	want := cabi.Layout()
	seen := 0
	for _, v := range []any{rawDeviceLimit{}, rawLimits{}, rawProcSlot{}, rawRegion{}, rawDeviceCompute{}, rawDeviceBalloon{}} {
		typ := reflect.TypeOf(v)
		check := func(name string, got uintptr) {
			t.Helper()
			w, ok := want[name]
			if !ok {
				t.Errorf("%s: not described by cabi.Layout", name)
				return
			}
			seen++
			if got != w {
				t.Errorf("%s: Go %d, C %d", name, got, w)
			}
		}
		check(typ.Name(), typ.Size())
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			check(typ.Name()+"."+f.Name, f.Offset)
		}
	}
	if seen != len(want) {
		t.Errorf("checked %d names, cabi.Layout has %d: a field is missing on one side", seen, len(want))
	}
}

func TestConstantsMatchCHeader(t *testing.T) {
	goSide := map[string]uint64{
		"ABIVersion": ABIVersion, "MaxDevices": MaxDevices, "MaxProcs": MaxProcs, "UUIDLen": UUIDLen,
		"LimitsMagic": LimitsMagic, "RegionMagic": RegionMagic,
		"SlotReclaimBit": SlotReclaimBit, "ReaperNode": ReaperNode,
		"BalloonCeilingWord": BalloonCeilingWord, "BalloonWaitMSWord": BalloonWaitMSWord,
		"BalloonFloorWord": BalloonFloorWord, "BalloonDefaultWaitMS": BalloonDefaultWaitMS,
		"BalloonWaitLanes": BalloonWaitLanes, "BalloonWaitLaneBits": BalloonWaitLaneBits,
		"PolicyGuaranteed": PolicyGuaranteed, "PolicyHard": PolicyHard,
		"GrantRateMask": GrantRateMask, "GrantUnpaced": GrantUnpaced, "GrantPPMMax": GrantPPMMax,
		"GrantArbitrated": GrantArbitrated, "GrantSolo": GrantSolo, "HeartbeatStaleNs": HeartbeatStaleNs,
		"GrantUntilShift": GrantUntilShift, "GrantUntilUsMax": GrantUntilUsMax,
		"SeqRecords": SeqRecords, "SeqDevMask": SeqDevMask,
	}
	for i, b := range BalloonWaitBoundsUs {
		goSide[fmt.Sprint("BalloonWaitBoundUs", i)] = b
	}
	c := cabi.Constants()
	if len(c) != len(goSide) {
		t.Fatalf("C side has %d constants, Go side %d", len(c), len(goSide))
	}
	for name, v := range goSide {
		if c[name] != v {
			t.Errorf("%s: Go %#x, C %#x", name, v, c[name])
		}
	}
}
