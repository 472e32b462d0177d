package profile

import (
	"strings"
	"testing"
)

func TestOf(t *testing.T) {
	for _, c := range []struct {
		profile   string
		gpuMemMiB int32
		milli     int32
		memMiB    int32
		family    string
	}{
		// The example: 1/7 of an H100's compute, 10/80 of its memory.
		{"1g.10gb", 81920, 142, 10240, "A100-80GB"},
		{"1g.10gb", 81559, 142, 10194, "A100-80GB"}, // an H100 as NVML reports it
		// The same name on an A100 40 GB is 2 of its 8 memory slices.
		{"1g.10gb", 40960, 142, 10240, "A100-40GB"},
		{"1g.10gb", 0, 142, 10240, "A100-40GB"},
		{"1g.5gb", 40960, 142, 5120, "A100-40GB"},
		{"3g.40gb", 81920, 428, 40960, "A100-80GB"},
		{"4g.40gb", 81920, 571, 40960, "A100-80GB"},
		{"7g.80gb", 81920, 1000, 81920, "A100-80GB"},
		{"1g.10gb+me", 81920, 142, 10240, "A100-80GB"},
		{"1g.10gb-me", 81920, 142, 10240, "A100-80GB"},
		{"1c.3g.40gb", 81920, 142, 40960, "A100-80GB"}, // a compute instance shares its GPU instance's memory
		{"1g.6gb", 24576, 250, 6144, "A30-24GB"},
		{"2g.12gb", 0, 500, 12288, "A30-24GB"},
		{"1g.18gb", 0, 142, 144384 / 8, "H200-141GB"},
		{"3g.47gb", 96256, 428, 48128, "H100-94GB"},
		// In no table: slices of 7 and the memory the name says.
		{"2g.30gb", 0, 285, 30720, ""},
		{"2g.30gb", 16384, 285, 16384, ""},
	} {
		got, err := Of(c.profile, c.gpuMemMiB)
		if err != nil {
			t.Errorf("Of(%q, %d): %v", c.profile, c.gpuMemMiB, err)
			continue
		}
		if got.ComputeMilli != c.milli || got.MemMiB != c.memMiB || got.Family != c.family {
			t.Errorf("Of(%q, %d) = %+v, want %d milli, %d MiB of %q", c.profile, c.gpuMemMiB, got, c.milli, c.memMiB, c.family)
		}
	}
}

func TestOfRefusesWhatIsNotAProfile(t *testing.T) {
	for _, bad := range []string{"", "gpu", "1g", "1g.10", "0g.10gb", "9g.10gb", "1g.0gb", "01g.10gb", "4c.3g.40gb", "1x.1g.5gb", "1g.5gb.me"} {
		_, err := Of(bad, 0)
		if err == nil || !strings.Contains(err.Error(), "MIG profile") {
			t.Errorf("Of(%q): %v, want an error naming the profile", bad, err)
		}
	}
}

// Instances that fill a GPU never count more than the GPU.
func TestInstancesOfOneGPUAddUpToAtMostIt(t *testing.T) {
	for _, mix := range [][]string{
		{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"},
		{"3g.40gb", "4g.40gb"}, {"2g.20gb", "2g.20gb", "3g.40gb"}, {"7g.80gb"},
	} {
		var milli, mem int32
		for _, p := range mix {
			s, err := Of(p, 81920)
			if err != nil {
				t.Fatal(err)
			}
			milli, mem = milli+s.ComputeMilli, mem+s.MemMiB
		}
		if milli > 1000 || milli < 990 || mem > 81920 {
			t.Errorf("%v: %d milli, %d MiB of one 80 GB GPU", mix, milli, mem)
		}
	}
}

// Every tabled profile fits its GPU: at most all of its compute and memory.
func TestTablesAreConsistent(t *testing.T) {
	for _, f := range Families {
		for _, sl := range f.Profiles {
			if sl.Compute < 1 || sl.Compute > f.ComputeSlices || sl.Memory < 1 || sl.Memory > f.MemorySlices {
				t.Errorf("%s %s: %d/%d compute, %d/%d memory slices", f.Name, sl.Name, sl.Compute, f.ComputeSlices, sl.Memory, f.MemorySlices)
			}
			p, err := parse(sl.Name)
			if err != nil || p.g != sl.Compute {
				t.Errorf("%s %s: name parses to %+v, %v", f.Name, sl.Name, p, err)
			}
		}
	}
}

// Whatever the name, a share is a part of one GPU: 1..1000 milli of its
// compute and no more than its memory.
func FuzzOf(f *testing.F) {
	for _, s := range []string{"1g.10gb", "1g.5gb+me", "1c.2g.20gb", "7g.141gb", "4g.24gb", "9g.1gb", "1g.10gb-me", "2g.1024gb"} {
		f.Add(s, int32(81920))
	}
	f.Fuzz(func(t *testing.T, profile string, gpuMemMiB int32) {
		s, err := Of(profile, gpuMemMiB)
		if err != nil {
			if !strings.Contains(err.Error(), "MIG profile") {
				t.Fatalf("error %v does not name the profile", err)
			}
			return
		}
		if s.ComputeMilli < 1 || s.ComputeMilli > 1000 || s.MemMiB < 0 {
			t.Fatalf("Of(%q, %d) = %+v", profile, gpuMemMiB, s)
		}
		if gpuMemMiB > 0 && s.MemMiB > gpuMemMiB {
			t.Fatalf("Of(%q, %d) = %+v: more memory than the GPU has", profile, gpuMemMiB, s)
		}
	})
}
