package v1

import (
	"fmt"
	"strings"
)

func checkVersion(v string) error {
	if v != Version {
		return fmt.Errorf("version: unsupported %q (want %q)", v, Version)
	}
	return nil
}

func checkUUID(field, uuid string) error {
	if uuid == "" {
		return fmt.Errorf("%s: empty", field)
	}
	if strings.ContainsAny(uuid, " \t\n:") {
		return fmt.Errorf("%s: invalid UUID %q", field, uuid)
	}
	return nil
}

// uniqueNames checks that n containers have non-empty, distinct names.
func uniqueNames(n int, name func(int) string) error {
	seen := map[string]bool{}
	for i := 0; i < n; i++ {
		switch nm := name(i); {
		case nm == "":
			return fmt.Errorf("containers[%d].name: empty", i)
		case seen[nm]:
			return fmt.Errorf("containers[%d].name: duplicate container %q", i, nm)
		default:
			seen[nm] = true
		}
	}
	return nil
}

// checkGPUs checks a list of per-GPU entries under field f: valid and
// distinct UUIDs, core percent within one GPU.
func checkGPUs(f string, n int, entry func(int) (uuid string, corePercent uint32)) error {
	seen := map[string]bool{}
	for j := 0; j < n; j++ {
		gf := fmt.Sprintf("%s[%d]", f, j)
		uuid, core := entry(j)
		if err := checkUUID(gf+".uuid", uuid); err != nil {
			return err
		}
		if seen[uuid] {
			return fmt.Errorf("%s.uuid: duplicate GPU %q", gf, uuid)
		}
		seen[uuid] = true
		if core > MaxCorePercent {
			return fmt.Errorf("%s.corePercent: %d exceeds %d", gf, core, MaxCorePercent)
		}
	}
	return nil
}

// Validate checks the assignment; the error names the offending field.
func (a *Assignment) Validate() error {
	if err := checkVersion(a.Version); err != nil {
		return err
	}
	if len(a.Containers) == 0 {
		return fmt.Errorf("containers: empty")
	}
	if err := uniqueNames(len(a.Containers), func(i int) string { return a.Containers[i].Name }); err != nil {
		return err
	}
	for i, c := range a.Containers {
		f := fmt.Sprintf("containers[%d].gpus", i)
		if len(c.GPUs) == 0 && len(c.MIG) == 0 {
			return fmt.Errorf("%s: empty (and no mig devices)", f)
		}
		if err := checkGPUs(f, len(c.GPUs), func(j int) (string, uint32) { return c.GPUs[j].UUID, c.GPUs[j].CorePercent }); err != nil {
			return err
		}
		if err := checkMIG(fmt.Sprintf("containers[%d].mig", i), c.MIG); err != nil {
			return err
		}
	}
	return nil
}

// Container returns the assignment of the named container, or nil.
func (a *Assignment) Container(name string) *ContainerAssignment {
	for i := range a.Containers {
		if a.Containers[i].Name == name {
			return &a.Containers[i]
		}
	}
	return nil
}

// Validate checks the realized allocation.
func (a *Allocated) Validate() error {
	if err := checkVersion(a.Version); err != nil {
		return err
	}
	if err := uniqueNames(len(a.Containers), func(i int) string { return a.Containers[i].Name }); err != nil {
		return err
	}
	for i, c := range a.Containers {
		f := fmt.Sprintf("containers[%d]", i)
		if err := checkGPUs(f+".gpus", len(c.GPUs), func(j int) (string, uint32) { return c.GPUs[j].UUID, c.GPUs[j].CorePercent }); err != nil {
			return err
		}
		if err := checkMIG(f+".mig", c.MIG); err != nil {
			return err
		}
	}
	return nil
}

// checkMIG checks MIG devices under field f: UUID, parent GPU and profile
// set, no device twice.
func checkMIG(f string, ms []MIGAllocation) error {
	seen := map[string]bool{}
	for j, m := range ms {
		mf := fmt.Sprintf("%s[%d]", f, j)
		if err := checkUUID(mf+".uuid", m.UUID); err != nil {
			return err
		}
		if seen[m.UUID] {
			return fmt.Errorf("%s.uuid: duplicate MIG device %q", mf, m.UUID)
		}
		seen[m.UUID] = true
		if err := checkUUID(mf+".parent", m.Parent); err != nil {
			return err
		}
		if m.Profile == "" || strings.ContainsAny(m.Profile, " \t\n") {
			return fmt.Errorf("%s.profile: %q is not a MIG profile", mf, m.Profile)
		}
	}
	return nil
}

// Validate checks the inventory.
func (n *NodeGPUs) Validate() error {
	if err := checkVersion(n.Version); err != nil {
		return err
	}
	if err := checkGPUs("gpus", len(n.GPUs), func(i int) (string, uint32) { return n.GPUs[i].UUID, 0 }); err != nil {
		return err
	}
	for i, g := range n.GPUs {
		f := fmt.Sprintf("gpus[%d]", i)
		if g.Index < 0 {
			return fmt.Errorf("%s.index: negative", f)
		}
		if g.NUMANode < -1 {
			return fmt.Errorf("%s.numaNode: %d (want -1 for unknown or >= 0)", f, g.NUMANode)
		}
		for j, m := range g.MIG {
			if err := checkUUID(fmt.Sprintf("%s.mig[%d].uuid", f, j), m.UUID); err != nil {
				return err
			}
			if m.Profile == "" {
				return fmt.Errorf("%s.mig[%d].profile: empty", f, j)
			}
		}
	}
	return nil
}
