package partition

import "fmt"

// MIGProfile is one kind of MIG instance: how many compute and memory slices
// it takes and at which memory-slice positions the hardware lets it start.
type MIGProfile struct {
	Name          string
	ComputeSlices int8
	MemSlices     int8
	Starts        []int8
}

// MIGGeometry is the slice layout of one GPU family in MIG mode.
type MIGGeometry struct {
	ComputeSlices int8
	MemSlices     int8
	Profiles      []MIGProfile
}

// Profile looks a profile up by name.
func (g *MIGGeometry) Profile(name string) (MIGProfile, bool) {
	for _, p := range g.Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return MIGProfile{}, false
}

// A100_40GB is the geometry NVIDIA documents for the A100 40 GB: 7 compute and
// 8 memory slices; each profile may only start at the listed memory slices.
// The 80 GB A100 and the H100 have the same shape with doubled memory names.
var A100_40GB = MIGGeometry{
	ComputeSlices: 7, MemSlices: 8,
	Profiles: []MIGProfile{
		{Name: "1g.5gb", ComputeSlices: 1, MemSlices: 1, Starts: []int8{0, 1, 2, 3, 4, 5, 6}},
		{Name: "1g.10gb", ComputeSlices: 1, MemSlices: 2, Starts: []int8{0, 2, 4, 6}},
		{Name: "2g.10gb", ComputeSlices: 2, MemSlices: 2, Starts: []int8{0, 2, 4}},
		{Name: "3g.20gb", ComputeSlices: 3, MemSlices: 4, Starts: []int8{0, 4}},
		{Name: "4g.20gb", ComputeSlices: 4, MemSlices: 4, Starts: []int8{0}},
		{Name: "7g.40gb", ComputeSlices: 7, MemSlices: 8, Starts: []int8{0}},
	},
}

// MIGInstance is one instance placed on a GPU.
type MIGInstance struct {
	Profile string
	Start   int8
}

// MIGLayout is the state of one GPU in MIG mode: which memory slices and how
// many compute slices its instances hold.
type MIGLayout struct {
	Geometry    *MIGGeometry
	memUsed     uint16 // bit i: memory slice i is held
	computeUsed int8
	Instances   []MIGInstance
}

// NewMIGLayout puts a GPU of the given geometry into MIG mode with no instances.
func NewMIGLayout(g *MIGGeometry) *MIGLayout { return &MIGLayout{Geometry: g} }

// Empty reports whether no instance is placed.
func (l *MIGLayout) Empty() bool { return len(l.Instances) == 0 }

// FreeComputeSlices is how many compute slices no instance holds.
func (l *MIGLayout) FreeComputeSlices() int8 { return l.Geometry.ComputeSlices - l.computeUsed }

// Fit returns the first start position where an instance of the profile
// fits, or -1.
func (l *MIGLayout) Fit(p MIGProfile) int8 {
	if p.ComputeSlices > l.FreeComputeSlices() {
		return -1
	}
	for _, s := range p.Starts {
		if l.memUsed&sliceMask(s, p.MemSlices) == 0 {
			return s
		}
	}
	return -1
}

// Place creates an instance of the named profile at the first position it
// fits and returns that position.
func (l *MIGLayout) Place(profile string) (int8, error) {
	p, ok := l.Geometry.Profile(profile)
	if !ok {
		return -1, fmt.Errorf("MIG profile %q is not offered by this GPU", profile)
	}
	s := l.Fit(p)
	if s < 0 {
		return -1, fmt.Errorf("MIG profile %s does not fit: %d compute slices free, memory slices held %08b", profile, l.FreeComputeSlices(), l.memUsed)
	}
	l.memUsed |= sliceMask(s, p.MemSlices)
	l.computeUsed += p.ComputeSlices
	l.Instances = append(l.Instances, MIGInstance{Profile: profile, Start: s})
	return s, nil
}

// Remove destroys the instance of the profile that starts at the position.
func (l *MIGLayout) Remove(profile string, start int8) error {
	for i, in := range l.Instances {
		if in.Profile != profile || in.Start != start {
			continue
		}
		p, _ := l.Geometry.Profile(profile)
		l.memUsed &^= sliceMask(start, p.MemSlices)
		l.computeUsed -= p.ComputeSlices
		l.Instances = append(l.Instances[:i], l.Instances[i+1:]...)
		return nil
	}
	return fmt.Errorf("no MIG instance %s at slice %d", profile, start)
}

func sliceMask(start, n int8) uint16 { return uint16((1<<uint(n))-1) << uint(start) }
