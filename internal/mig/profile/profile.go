// Package profile knows what a MIG profile takes of its GPU: its compute
// and memory slices out of the GPU's, per GPU family, as NVIDIA's MIG user
// guide tables them. Quota accounting counts a MIG device as that fraction
// of a GPU (internal/quota): a 1g.10gb instance of an H100 80 GB is 1/7 of
// its compute and 1/8 (10 of 80 GB) of its memory.
//
// Names are go-nvlib's (and nvidia-smi's): "<g>g.<gb>gb", optionally a
// compute instance "<c>c.<g>g.<gb>gb", optionally attributes after "+" or
// "-" ("1g.10gb+me", "1g.10gb-me"); attributes take no slices of their
// own. go-nvlib parses names only against a live NVML (ParseMigProfile asks
// the driver which profiles exist), which a cluster scheduler has not, so
// the tables are here. The package is apart from internal/mig so that
// importing it does not link NVML.
package profile

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Family is the MIG geometry of a GPU family: its memory, its compute and
// memory slices, and the profiles it offers.
type Family struct {
	Name          string
	MemoryGB      int
	ComputeSlices int
	MemorySlices  int
	Profiles      []Slices
}

// Slices is one profile of a family: the GPU instance's compute and memory
// slices.
type Slices struct {
	Name            string // without attributes: "1g.10gb"
	Compute, Memory int
}

// sevenBy8 lists the profiles of the 7-compute, 8-memory-slice families
// (A100, H100, H200): what differs between them is the memory per slice,
// and so the names.
func sevenBy8(name string, memGB int, gb [5]int) Family {
	f := func(g, mem, gbs int) Slices {
		return Slices{Name: fmt.Sprintf("%dg.%dgb", g, gbs), Compute: g, Memory: mem}
	}
	return Family{Name: name, MemoryGB: memGB, ComputeSlices: 7, MemorySlices: 8, Profiles: []Slices{
		f(1, 1, gb[0]), f(1, 2, gb[1]), f(2, 2, gb[1]), f(3, 4, gb[2]), f(4, 4, gb[3]), f(7, 8, gb[4]),
	}}
}

// Families are NVIDIA's MIG-capable data-centre GPUs (MIG user guide,
// "Supported MIG Profiles").
var Families = []Family{
	{Name: "A30-24GB", MemoryGB: 24, ComputeSlices: 4, MemorySlices: 4, Profiles: []Slices{
		{"1g.6gb", 1, 1}, {"2g.12gb", 2, 2}, {"4g.24gb", 4, 4},
	}},
	sevenBy8("A100-40GB", 40, [5]int{5, 10, 20, 20, 40}),
	sevenBy8("A100-80GB", 80, [5]int{10, 20, 40, 40, 80}), // also H100 80 GB, H800
	sevenBy8("H100-94GB", 94, [5]int{12, 24, 47, 47, 94}),
	sevenBy8("H100-96GB", 96, [5]int{12, 24, 48, 48, 96}),
	sevenBy8("H200-141GB", 141, [5]int{18, 35, 71, 71, 141}),
}

// Share is what one instance of a profile takes of one GPU.
type Share struct {
	// ComputeMilli is its compute in thousandths of the GPU's, rounded
	// down (1g of 7: 142; a whole-GPU profile: 1000).
	ComputeMilli int32
	// MemMiB is its memory: its memory slices' part of the GPU's memory.
	MemMiB int32
	// Family is the table the share was read from; "" when the profile is
	// in no table and the share was read from its name alone (compute
	// slices of 7, the named memory).
	Family string
}

// Of is the share an instance of profile takes of a GPU with gpuMemMiB of
// memory (0: unknown, the family's own memory is used). A name several
// families offer ("1g.10gb": 2 of the A100 40 GB's 8 memory slices, 1 of
// the 80 GB GPUs') is read from the family whose memory is nearest the
// GPU's. A name that does not parse is an error naming it.
func Of(profile string, gpuMemMiB int32) (Share, error) {
	p, err := parse(profile)
	if err != nil {
		return Share{}, err
	}
	fam, sl, ok := lookup(p.base, gpuMemMiB)
	if !ok {
		// Not tabled (a GPU newer than the tables): the name says the
		// instance's slices and memory; 7 compute slices is every
		// MIG-capable GPU's but the A30's.
		mem := int64(p.gb) * 1024
		if gpuMemMiB > 0 {
			mem = min(mem, int64(gpuMemMiB))
		}
		return Share{ComputeMilli: milli(p.compute, 7), MemMiB: int32(min(mem, math.MaxInt32))}, nil
	}
	mem := int64(gpuMemMiB)
	if mem <= 0 {
		mem = int64(fam.MemoryGB) * 1024
	}
	compute := sl.Compute
	if p.compute < p.g { // a compute instance of part of the GPU instance
		compute = p.compute
	}
	return Share{ComputeMilli: milli(compute, fam.ComputeSlices), MemMiB: int32(mem * int64(sl.Memory) / int64(fam.MemorySlices)), Family: fam.Name}, nil
}

// milli rounds down, so the instances of one GPU never add up to more
// than the GPU (seven 1g of 7: 994, not 1001).
func milli(slices, of int) int32 {
	return int32(min(1000, slices*1000/of))
}

type parsed struct {
	base           string // "<g>g.<gb>gb"
	compute, g, gb int
}

// parse reads "[<c>c.]<g>g.<gb>gb[(+|-)attributes]".
func parse(profile string) (parsed, error) {
	name := profile
	if i := strings.IndexAny(name, "+-"); i >= 0 {
		name = name[:i]
	}
	fields := strings.Split(name, ".")
	if len(fields) == 3 {
		c, err := field(fields[0], "c")
		if err != nil {
			return parsed{}, fmt.Errorf("MIG profile %q: %w", profile, err)
		}
		p, err := parse(strings.Join(fields[1:], "."))
		if err != nil {
			return parsed{}, fmt.Errorf("MIG profile %q: %w", profile, err)
		}
		if c > p.g {
			return parsed{}, fmt.Errorf("MIG profile %q: %d compute slices of a %d-slice instance", profile, c, p.g)
		}
		p.compute = c
		return p, nil
	}
	if len(fields) != 2 {
		return parsed{}, fmt.Errorf("MIG profile %q: want <g>g.<gb>gb or <c>c.<g>g.<gb>gb", profile)
	}
	g, err := field(fields[0], "g")
	if err != nil {
		return parsed{}, fmt.Errorf("MIG profile %q: %w", profile, err)
	}
	gb, err := field(fields[1], "gb")
	if err != nil {
		return parsed{}, fmt.Errorf("MIG profile %q: %w", profile, err)
	}
	if g > 8 {
		return parsed{}, fmt.Errorf("MIG profile %q: %d compute slices (no GPU has more than 7)", profile, g)
	}
	return parsed{base: name, compute: g, g: g, gb: gb}, nil
}

// field reads "<n><unit>" with 1 <= n <= 1024.
func field(s, unit string) (int, error) {
	digits, ok := strings.CutSuffix(s, unit)
	if !ok {
		return 0, fmt.Errorf("%q is not <n>%s", s, unit)
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 1 || n > 1024 || strconv.Itoa(n) != digits {
		return 0, fmt.Errorf("%q is not <n>%s with n in 1..1024", s, unit)
	}
	return n, nil
}

// lookup finds base in the tables: of the families offering it, the one
// whose memory is nearest gpuMemMiB (the first when unknown).
func lookup(base string, gpuMemMiB int32) (Family, Slices, bool) {
	var best Family
	var bestSl Slices
	bestDist, found := int64(math.MaxInt64), false
	for _, f := range Families {
		for _, sl := range f.Profiles {
			if sl.Name != base {
				continue
			}
			dist := int64(0)
			if gpuMemMiB > 0 {
				dist = int64(f.MemoryGB)*1024 - int64(gpuMemMiB)
				if dist < 0 {
					dist = -dist
				}
			}
			if dist < bestDist {
				best, bestSl, bestDist, found = f, sl, dist, true
			}
		}
	}
	return best, bestSl, found
}
