package partition

import (
	"fmt"
	"math/bits"
)

// MaxMIGDevices bounds the MIG devices one node lists (8 GPUs of 7
// instances are 56): a node's free devices are one 64-bit mask.
const MaxMIGDevices = 64

// MIGDevice is one MIG instance a node's inventory lists: a fixed device,
// created by the operator (or the GPU operator's MIG manager) and
// advertised by the device plugin as tessera.io/mig-<Profile>. The engine
// hands such devices out whole; it does not create or destroy instances
// (MIGLayout models that, for a later dynamic mode).
type MIGDevice struct {
	UUID    string
	Profile string
	// GPU is the parent GPU's index on the node; Parent its UUID.
	GPU    int
	Parent string
}

// CheckMIGProfile rejects a profile name that cannot be the suffix of a
// tessera.io/mig-<profile> resource name ("1g.5gb", "3g.40gb", "1g.10gb.me").
func CheckMIGProfile(p string) error {
	if p == "" || len(p) > 56 {
		return fmt.Errorf("MIG profile %q: want 1..56 characters", p)
	}
	for _, r := range p {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' || r == '+'
		if !ok {
			return fmt.Errorf("MIG profile %q: character %q is not allowed (letters, digits, . - _ +)", p, r)
		}
	}
	return nil
}

// addMIG checks a spec's MIG GPUs and devices and puts them on the node:
// MIG GPUs serve no shares; every device names a MIG GPU of the node, a
// valid profile and a UUID no other device has.
func (n *Node) addMIG(s NodeSpec) error {
	if len(s.MIG) > MaxMIGDevices {
		return fmt.Errorf("node %s: %d MIG devices (at most %d)", s.Name, len(s.MIG), MaxMIGDevices)
	}
	for _, g := range s.MIGGPUs {
		if g < 0 || g >= len(n.GPUs) {
			return fmt.Errorf("node %s: MIG GPU %d: no such GPU", s.Name, g)
		}
		n.GPUs[g].FixedMIG = true
	}
	seen := map[string]bool{}
	for i, d := range s.MIG {
		f := fmt.Sprintf("node %s: mig[%d]", s.Name, i)
		switch {
		case d.UUID == "":
			return fmt.Errorf("%s.uuid: empty", f)
		case seen[d.UUID]:
			return fmt.Errorf("%s.uuid: %q listed twice", f, d.UUID)
		case d.GPU < 0 || d.GPU >= len(n.GPUs) || !n.GPUs[d.GPU].FixedMIG:
			return fmt.Errorf("%s.gpu: %d is not a MIG-enabled GPU of the node", f, d.GPU)
		}
		if err := CheckMIGProfile(d.Profile); err != nil {
			return fmt.Errorf("%s.profile: %w", f, err)
		}
		seen[d.UUID] = true
	}
	n.MIG = append([]MIGDevice(nil), s.MIG...)
	return nil
}

// FreeMIG counts the node's free MIG devices of a profile.
func (n *Node) FreeMIG(profile string) int {
	k := 0
	for i := range n.MIG {
		if n.MIG[i].Profile == profile && n.MIGUsed&(1<<uint(i)) == 0 {
			k++
		}
	}
	return k
}

// PickMIG chooses k free devices of a profile (indices into n.MIG), or nil
// when fewer are free. It takes them from the GPUs that already have the
// fewest free devices, so that partly used GPUs fill up first and whole
// free GPUs stay free for pods that need several instances of one GPU's
// worth.
func (n *Node) PickMIG(profile string, k int) []int {
	if k <= 0 || n.FreeMIG(profile) < k {
		return nil
	}
	freeOn := map[int]int{}
	for i := range n.MIG {
		if n.MIGUsed&(1<<uint(i)) == 0 {
			freeOn[n.MIG[i].GPU]++
		}
	}
	var out []int
	var taken uint64
	for len(out) < k {
		best := -1
		for i := range n.MIG {
			if n.MIG[i].Profile != profile || (n.MIGUsed|taken)&(1<<uint(i)) != 0 {
				continue
			}
			if best < 0 || freeOn[n.MIG[i].GPU] < freeOn[n.MIG[best].GPU] {
				best = i
			}
		}
		taken |= 1 << uint(best)
		out = append(out, best)
	}
	return out
}

// MIGIndex is the index in n.MIG of the device with the UUID, or -1.
func (n *Node) MIGIndex(uuid string) int {
	for i := range n.MIG {
		if n.MIG[i].UUID == uuid {
			return i
		}
	}
	return -1
}

// migMask checks a grant's MIG devices against the node and returns them
// as a mask: each must exist and appear once.
func (n *Node) migMask(devs []int) (uint64, error) {
	var m uint64
	for _, d := range devs {
		if d < 0 || d >= len(n.MIG) {
			return 0, fmt.Errorf("node %s: no MIG device %d", n.Name, d)
		}
		if m&(1<<uint(d)) != 0 {
			return 0, fmt.Errorf("node %s: MIG device %s granted twice", n.Name, n.MIG[d].UUID)
		}
		m |= 1 << uint(d)
	}
	return m, nil
}

// checkMIGFree checks that a grant's MIG devices are free.
func (n *Node) checkMIGFree(m uint64) error {
	if busy := m & n.MIGUsed; busy != 0 {
		return fmt.Errorf("node %s: MIG device %s is already held", n.Name, n.MIG[bits.TrailingZeros64(busy)].UUID)
	}
	return nil
}

// checkMIGHeld checks that a grant's MIG devices are held.
func (n *Node) checkMIGHeld(m uint64) error {
	if idle := m &^ n.MIGUsed; idle != 0 {
		return fmt.Errorf("node %s: release of MIG device %s, which is not held", n.Name, n.MIG[bits.TrailingZeros64(idle)].UUID)
	}
	return nil
}
