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

// Validate checks the assignment; the error names the offending field.
func (a *Assignment) Validate() error {
	if err := checkVersion(a.Version); err != nil {
		return err
	}
	if len(a.Containers) == 0 {
		return fmt.Errorf("containers: empty")
	}
	names := map[string]bool{}
	for i, c := range a.Containers {
		f := fmt.Sprintf("containers[%d]", i)
		if c.Name == "" {
			return fmt.Errorf("%s.name: empty", f)
		}
		if names[c.Name] {
			return fmt.Errorf("%s.name: duplicate container %q", f, c.Name)
		}
		names[c.Name] = true
		if len(c.GPUs) == 0 {
			return fmt.Errorf("%s.gpus: empty", f)
		}
		if err := validateShares(f, c.GPUs); err != nil {
			return err
		}
	}
	return nil
}

func validateShares(f string, gpus []GPUShare) error {
	seen := map[string]bool{}
	for j, g := range gpus {
		gf := fmt.Sprintf("%s.gpus[%d]", f, j)
		if err := checkUUID(gf+".uuid", g.UUID); err != nil {
			return err
		}
		if seen[g.UUID] {
			return fmt.Errorf("%s.uuid: duplicate GPU %q", gf, g.UUID)
		}
		seen[g.UUID] = true
		if g.CorePercent > MaxCorePercent {
			return fmt.Errorf("%s.corePercent: %d exceeds %d", gf, g.CorePercent, MaxCorePercent)
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
	names := map[string]bool{}
	for i, c := range a.Containers {
		f := fmt.Sprintf("containers[%d]", i)
		if c.Name == "" {
			return fmt.Errorf("%s.name: empty", f)
		}
		if names[c.Name] {
			return fmt.Errorf("%s.name: duplicate container %q", f, c.Name)
		}
		names[c.Name] = true
		seen := map[string]bool{}
		for j, g := range c.GPUs {
			gf := fmt.Sprintf("%s.gpus[%d]", f, j)
			if err := checkUUID(gf+".uuid", g.UUID); err != nil {
				return err
			}
			if seen[g.UUID] {
				return fmt.Errorf("%s.uuid: duplicate GPU %q", gf, g.UUID)
			}
			seen[g.UUID] = true
			if g.CorePercent > MaxCorePercent {
				return fmt.Errorf("%s.corePercent: %d exceeds %d", gf, g.CorePercent, MaxCorePercent)
			}
		}
		for j, m := range c.MIG {
			mf := fmt.Sprintf("%s.mig[%d]", f, j)
			if err := checkUUID(mf+".uuid", m.UUID); err != nil {
				return err
			}
			if err := checkUUID(mf+".parent", m.Parent); err != nil {
				return err
			}
			if m.Profile == "" {
				return fmt.Errorf("%s.profile: empty", mf)
			}
		}
	}
	return nil
}

// Validate checks the inventory.
func (n *NodeGPUs) Validate() error {
	if err := checkVersion(n.Version); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, g := range n.GPUs {
		f := fmt.Sprintf("gpus[%d]", i)
		if err := checkUUID(f+".uuid", g.UUID); err != nil {
			return err
		}
		if seen[g.UUID] {
			return fmt.Errorf("%s.uuid: duplicate GPU %q", f, g.UUID)
		}
		seen[g.UUID] = true
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
