package mig

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MinorsFile is where the NVIDIA driver lists the minor numbers of its
// capability device nodes, relative to the proc root.
const MinorsFile = "driver/nvidia-caps/mig-minors"

// CapsDir is the directory of capability device nodes, relative to the dev root.
const CapsDir = "nvidia-caps"

// Minors maps capability names from the driver's mig-minors file
// ("config", "monitor", "gpu0/gi1/access", "gpu0/gi1/ci0/access") to the
// minor number of their /dev/nvidia-caps/nvidia-cap<N> node.
//
// A process can use a MIG device only if it can open the access
// capabilities of both its GPU instance and its compute instance; without
// the NVIDIA container runtime, the plugin must hand those nodes over.
type Minors map[string]int

// maxMinorsFile bounds what ParseMinors reads: the real file has a few
// thousand short lines (8 GPUs × 7 GIs × 8 CIs).
const maxMinorsFile = 1 << 20

// ReadMinors reads <procRoot>/driver/nvidia-caps/mig-minors.
func ReadMinors(procRoot string) (Minors, error) {
	path := filepath.Join(procRoot, MinorsFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("MIG capability minors: %w", err)
	}
	defer f.Close()
	return ParseMinors(f, path)
}

// ParseMinors parses the mig-minors format: one "<name> <minor>" per line.
// name is used in errors (the file's path). Every malformed line is an
// error naming its line number: a wrong minor would hand a container
// another tenant's MIG device.
func ParseMinors(r io.Reader, name string) (Minors, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxMinorsFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(data) > maxMinorsFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, maxMinorsFile)
	}
	m := Minors{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxMinorsFile)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		capName, minor, err := parseMinorLine(text)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %q: %w", name, line, text, err)
		}
		if _, dup := m[capName]; dup {
			return nil, fmt.Errorf("%s:%d: %q: capability %s listed twice", name, line, text, capName)
		}
		m[capName] = minor
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

func parseMinorLine(text string) (string, int, error) {
	fields := strings.Fields(text)
	if len(fields) != 2 {
		return "", 0, fmt.Errorf("want \"<capability> <minor>\"")
	}
	minor, err := strconv.Atoi(fields[1])
	if err != nil || minor < 0 || minor > 1<<20 {
		return "", 0, fmt.Errorf("bad minor number %q", fields[1])
	}
	if err := checkCapName(fields[0]); err != nil {
		return "", 0, err
	}
	return fields[0], minor, nil
}

// checkCapName accepts "config", "monitor" and gpu<N>/gi<N>[/ci<N>]/access.
func checkCapName(name string) error {
	if name == "config" || name == "monitor" {
		return nil
	}
	parts := strings.Split(name, "/")
	if len(parts) < 3 || len(parts) > 4 || parts[len(parts)-1] != "access" {
		return fmt.Errorf("unknown capability %q (want config, monitor, gpuN/giN/access or gpuN/giN/ciN/access)", name)
	}
	for i, prefix := range []string{"gpu", "gi", "ci"}[:len(parts)-1] {
		if _, ok := number(parts[i], prefix); !ok {
			return fmt.Errorf("unknown capability %q: bad %q component %q", name, prefix, parts[i])
		}
	}
	return nil
}

func number(s, prefix string) (int, bool) {
	digits, ok := strings.CutPrefix(s, prefix)
	if !ok || digits == "" {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil && n >= 0 && strconv.Itoa(n) == digits
}

// GIAccess is the capability name of a GPU instance's access node.
func GIAccess(gpuMinor, gi int) string { return fmt.Sprintf("gpu%d/gi%d/access", gpuMinor, gi) }

// CIAccess is the capability name of a compute instance's access node.
func CIAccess(gpuMinor, gi, ci int) string {
	return fmt.Sprintf("gpu%d/gi%d/ci%d/access", gpuMinor, gi, ci)
}

// CapDevicePath is the device node of capability minor under devRoot.
func CapDevicePath(devRoot string, minor int) string {
	return filepath.Join(devRoot, CapsDir, "nvidia-cap"+strconv.Itoa(minor))
}

// AccessMinors returns the minors of the GPU-instance and compute-instance
// access capabilities of the MIG device at loc.
func (m Minors) AccessMinors(loc Location) ([]int, error) {
	var out []int
	for _, name := range []string{GIAccess(loc.ParentMinor, loc.GI), CIAccess(loc.ParentMinor, loc.GI, loc.CI)} {
		minor, ok := m[name]
		if !ok {
			return nil, fmt.Errorf("capability %s not in %s", name, MinorsFile)
		}
		out = append(out, minor)
	}
	return out, nil
}
