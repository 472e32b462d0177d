package fakegpu

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
)

// Defaults of the simulated node when neither FAKEGPU_DEVICES nor FAKEGPU_CONFIG is set.
const (
	DefaultName     = "NVIDIA H200"
	DefaultMemMiB   = 143771
	DefaultSMCount  = 132
	DriverVersion   = "570.124.06"
	CUDAVersion     = 12080
	PCIDeviceID     = 0x233510de
	firstBus        = 0x18
	busStride       = 8
	uuidHashPrefix  = "fakegpu"
	uuidStringShape = "GPU-%08x-%04x-%04x-%04x-%012x"
)

// UUIDBytes is the 16-byte UUID of device index under seed (FAKEGPU_UUID_SEED,
// "" when unset): FNV-1a-64 of "fakegpu/<seed>/<index>/a" and of ".../b",
// big-endian, one after the other.
func UUIDBytes(seed string, index int) [16]byte {
	var u [16]byte
	for half, tag := range []string{"a", "b"} {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s/%s/%d/%s", uuidHashPrefix, seed, index, tag)
		binary.BigEndian.PutUint64(u[half*8:], h.Sum64())
	}
	return u
}

// UUID is the string NVML reports for device index under seed ("GPU-" + 8-4-4-4-12 hex).
func UUID(seed string, index int) string {
	u := UUIDBytes(seed, index)
	return fmt.Sprintf(uuidStringShape,
		binary.BigEndian.Uint32(u[0:4]), binary.BigEndian.Uint16(u[4:6]), binary.BigEndian.Uint16(u[6:8]),
		binary.BigEndian.Uint16(u[8:10]), binary.BigEndian.Uint64(append([]byte{0, 0}, u[10:16]...)))
}

// BusID is the PCI bus id of device index: domain 0, bus 0x18 + 8*index.
func BusID(index int) string {
	return fmt.Sprintf("%08x:%02x:00.0", 0, firstBus+busStride*index)
}
