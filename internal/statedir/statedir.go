// Package statedir is the node's directory of per-container allocation files,
// shared by the device plugin (which creates them at Allocate and restores them)
// and the node monitor (which reads and reaps them). It owns the layout and the
// one rule that decides when a directory is removed (Collector), so that the two
// binaries can never disagree about it.
//
// Layout: <stateDir>/containers/<key>/ with key "<kind>-<hash of the device IDs>"
// (allocation.Key); a "mem" directory holds "limits" and "region", a "core"
// directory holds "core-limits".
package statedir

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// File names inside a container directory.
const (
	ContainersDir  = "containers"
	RegionFile     = "region"
	LimitsFile     = "limits"
	CoreLimitsFile = "core-limits"
	CoreRegionFile = "core-region"
)

// Entry is one container allocation directory.
type Entry struct {
	Key  string // directory name, e.g. "mem-0123456789abcdef"
	Kind string // the part before the first '-': "mem" or "core"
	Dir  string // absolute path
}

// Region, Limits and CoreLimits are the paths of the entry's files.
func (e Entry) Region() string     { return filepath.Join(e.Dir, RegionFile) }
func (e Entry) Limits() string     { return filepath.Join(e.Dir, LimitsFile) }
func (e Entry) CoreLimits() string { return filepath.Join(e.Dir, CoreLimitsFile) }

// CoreRegion is where a core allocation's hooks publish their GPU time.
func (e Entry) CoreRegion() string { return filepath.Join(e.Dir, CoreRegionFile) }

// Containers is the directory holding the entries.
func Containers(stateDir string) string { return filepath.Join(stateDir, ContainersDir) }

// List returns the entries sorted by key. A missing containers directory is
// an empty list (no container allocated yet); anything that is not a
// directory is skipped.
func List(stateDir string) ([]Entry, error) {
	dir := Containers(stateDir)
	des, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state directory %s: %w", dir, err)
	}
	out := make([]Entry, 0, len(des))
	for _, de := range des {
		if !de.IsDir() {
			continue
		}
		kind, _, _ := strings.Cut(de.Name(), "-")
		out = append(out, Entry{Key: de.Name(), Kind: kind, Dir: filepath.Join(dir, de.Name())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}
