package statedir

import (
	"encoding/binary"
	"os"
	"testing"
)

// Offsets from tessera_abi.h (held to the header by internal/region's layout test).
const (
	offSlotHWM = 24
	offSlots   = 32 + 16*8*2 + 8*2 + 30*8
)

// claimSlot writes slot 0 as a hook would: pid, start time 1, hwm 1.
func claimSlot(t *testing.T, path string, pid uint32) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [8]byte
	binary.LittleEndian.PutUint32(b[:4], 1)
	f.WriteAt(b[:4], offSlotHWM)
	binary.LittleEndian.PutUint32(b[:4], pid)
	f.WriteAt(b[:4], offSlots)
	binary.LittleEndian.PutUint64(b[:], 1)
	if _, err := f.WriteAt(b[:], offSlots+8); err != nil {
		t.Fatal(err)
	}
}
