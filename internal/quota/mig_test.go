package quota

import (
	"math"
	"testing"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/placement"
)

func migUsage(profile string, n int, gpuMemMiB int32) Usage {
	return UsageOf(&placement.Request{NumMIG: n, MIGProfile: profile}, "H100", gpuMemMiB)
}

// A MIG device counts as its profile's part of a GPU — compute, memory
// and whole GPUs — not as nothing: 1g.10gb of an H100 80 GB is 1/7 of its
// compute (rounded down) and 10 of its 80 GB.
func TestMIGDeviceCountsItsFractionOfAGPU(t *testing.T) {
	u := migUsage("1g.10gb", 2, 81920)
	if u != (Usage{Model: "H100", GPUs: 2, MilliPerGPU: 142, MemMiBPerGPU: 10240, MIG: true}) {
		t.Fatalf("UsageOf(2 × 1g.10gb) = %+v", u)
	}
	b := books(t, func(c *schedv1.Config) { c.ModelWeights = map[string]float64{"H100": 2} },
		schedv1.QueueConfig{Name: "a", Nominal: schedv1.Resources{GPUs: 1, GPUMilli: 2000, GPUMemMiB: 81920}})
	add(t, b, "p", "a", 2, 0, u)
	st, _ := b.Status("a")
	// Weighted: an H100 counts twice in compute and whole GPUs.
	for res, want := range map[string]float64{"gpuMilli": 2 * 2 * 142, "gpus": 2 * 2 * 0.142, "gpuMemMiB": 2 * 10240} {
		if got := st.Usage[res]; math.Abs(got-want) > 1e-9 {
			t.Errorf("usage %s = %v, want %v", res, got, want)
		}
	}
}

// Seven 1g devices are one GPU: a queue with a guarantee of one H100 fits
// all seven and not an eighth, on every resource it sets.
func TestSevenSmallMIGDevicesAreOneGPU(t *testing.T) {
	for _, nominal := range []schedv1.Resources{{GPUs: 1}, {GPUMilli: 1000}, {GPUMemMiB: 81920}} {
		b := books(t, nil, schedv1.QueueConfig{Name: "a", Nominal: nominal, BorrowingLimit: ptr(schedv1.Resources{})})
		one := migUsage("1g.10gb", 1, 81920)
		for i := range 7 {
			if d := b.Decide("a", one); d.Verdict != Fits {
				t.Fatalf("nominal %+v: device %d: %v (%s)", nominal, i+1, d.Verdict, d.Reason)
			}
			add(t, b, string(rune('0'+i)), "a", 2, 0, one)
		}
		// Before placement the GPU's memory is not known: the family's.
		big := UsageOf(&placement.Request{NumMIG: 1, MIGProfile: "7g.80gb"}, "H100", 0)
		if d := b.Decide("a", big); d.Verdict != Held {
			t.Errorf("nominal %+v: an eighth device's worth (7g.80gb) on a full GPU: %v, want held", nominal, d.Verdict)
		}
	}
}

// Fair share sees MIG devices: a queue borrowing with them has a share.
func TestMIGBorrowingHasAFairShare(t *testing.T) {
	b := books(t, nil,
		schedv1.QueueConfig{Name: "a", Cohort: "c", Nominal: schedv1.Resources{GPUMilli: 1000}},
		schedv1.QueueConfig{Name: "b", Cohort: "c", Nominal: schedv1.Resources{GPUMilli: 1000}})
	add(t, b, "big", "a", 2, 0, migUsage("4g.40gb", 1, 81920))
	add(t, b, "more", "a", 2, 0, migUsage("3g.40gb", 2, 81920))
	// a holds 571 + 2×428 = 1427 milli: 427 above its nominal, of a pool of 2000.
	if got, want := b.Share("a"), 427.0/2000; math.Abs(got-want) > 1e-9 {
		t.Errorf("share of a = %v, want %v", got, want)
	}
	if !b.Borrowing("more") && !b.Borrowing("big") {
		t.Errorf("no MIG pod of a is borrowing")
	}
}

// A profile no table or pattern reads counts as a whole GPU.
func TestUnreadableMIGProfileCountsAsAWholeGPU(t *testing.T) {
	u := migUsage("custom", 1, 40960)
	if u.MilliPerGPU != 1000 || u.MemMiBPerGPU != 40960 || !u.MIG {
		t.Errorf("UsageOf(custom) = %+v", u)
	}
}
