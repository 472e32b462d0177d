package reconcile

import (
	"fmt"
	"testing"

	annotations "github.com/tessera-gpu/tessera/api/annotations/v1"
)

func TestMismatched(t *testing.T) {
	want := &annotations.ContainerAssignment{Name: "c", GPUs: []annotations.GPUShare{{UUID: "GPU-a", MemoryMiB: 3000, CorePercent: 30}}}
	cases := []struct {
		got  []annotations.GPUAllocation
		want string
	}{
		{[]annotations.GPUAllocation{{UUID: "GPU-a", MemoryMiB: 3072, CorePercent: 30}}, "[]"},
		{[]annotations.GPUAllocation{{UUID: "GPU-a", MemoryMiB: 2048, CorePercent: 30}}, "[tessera.io/gpu-mem]"},
		{[]annotations.GPUAllocation{{UUID: "GPU-b", MemoryMiB: 3072, CorePercent: 30}}, "[tessera.io/gpu-mem tessera.io/gpu-core]"},
		{[]annotations.GPUAllocation{{UUID: "GPU-a", MemoryMiB: 3072, CorePercent: 30}, {UUID: "GPU-b", Slots: 1}}, "[tessera.io/gpu]"},
	}
	for i, c := range cases {
		got := Mismatched(want, &annotations.ContainerAllocation{Name: "c", GPUs: c.got}, 1<<30)
		if fmt.Sprint(got) != c.want {
			t.Errorf("case %d: %v, want %s", i, got, c.want)
		}
	}
}
