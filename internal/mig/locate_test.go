package mig

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

// TestLocate: NVML's answer for a MIG UUID matches what Instances listed,
// and a destroyed instance is an error naming it.
func TestLocate(t *testing.T) {
	for _, model := range []string{gputest.DGXA100, gputest.DGXH100, gputest.DGXH200} {
		t.Run(model, func(t *testing.T) {
			node := gputest.MustNew(model)
			uuids, err := node.EnableMIG(6, nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
			if err != nil {
				t.Fatal(err)
			}
			insts, err := Instances(device.New(node), node.Device(6))
			if err != nil {
				t.Fatal(err)
			}
			for _, inst := range insts {
				loc, err := Locate(node, inst.UUID)
				if err != nil {
					t.Fatal(err)
				}
				if loc != (Location{ParentMinor: node.Device(6).Minor, GI: inst.GI, CI: inst.CI}) {
					t.Fatalf("Locate(%s) = %+v, discovery saw %+v", inst.UUID, loc, inst)
				}
			}
			if _, err := node.EnableMIG(6, nvml.GPU_INSTANCE_PROFILE_7_SLICE); err != nil {
				t.Fatal(err)
			}
			if _, err := Locate(node, uuids[0]); err == nil || !strings.Contains(err.Error(), uuids[0]) {
				t.Fatalf("Locate of a destroyed MIG device: %v", err)
			}
		})
	}
}
