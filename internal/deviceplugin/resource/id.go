// Package resource defines the tessera extended resources and their device
// IDs, and keeps the node's advertised devices with their health. It is the
// device plugin's resource manager: the gRPC servers only translate.
package resource

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Resource names.
const (
	Domain    = "tessera.io/"
	GPU       = Domain + "gpu"
	Memory    = Domain + "gpu-mem"
	Core      = Domain + "gpu-core"
	MIGPrefix = Domain + "mig-"
)

// Kind is what one device ID stands for.
type Kind string

// Device ID kinds.
const (
	KindSlot Kind = "gpu"  // one time-shared slot of a GPU
	KindMem  Kind = "mem"  // one memory unit of a GPU
	KindCore Kind = "core" // one percent of a GPU's compute
	KindMIG  Kind = "mig"  // one MIG device
)

const sep = "::"

// ID is a parsed device ID. Every ID names its physical GPU, so Allocate
// derives the container's GPUs and limits from the IDs alone.
type ID struct {
	GPU  string
	Kind Kind
	// N is the unit number for slot, mem and core IDs.
	N int
	// MIG is the MIG device UUID for mig IDs.
	MIG string
}

// String formats the ID: "<gpu-uuid>::<kind>::<n>" or "<gpu-uuid>::mig::<mig-uuid>".
func (id ID) String() string {
	if id.Kind == KindMIG {
		return id.GPU + sep + string(id.Kind) + sep + id.MIG
	}
	return id.GPU + sep + string(id.Kind) + sep + strconv.Itoa(id.N)
}

// ParseID parses a device ID written by String.
func ParseID(s string) (ID, error) {
	parts := strings.Split(s, sep)
	if len(parts) != 3 || parts[0] == "" || parts[2] == "" {
		return ID{}, fmt.Errorf("device ID %q: want <gpu-uuid>::<kind>::<n>", s)
	}
	id := ID{GPU: parts[0], Kind: Kind(parts[1])}
	switch id.Kind {
	case KindMIG:
		id.MIG = parts[2]
		return id, nil
	case KindSlot, KindMem, KindCore:
		n, err := strconv.Atoi(parts[2])
		if err != nil || n < 0 {
			return ID{}, fmt.Errorf("device ID %q: bad unit number %q", s, parts[2])
		}
		id.N = n
		return id, nil
	}
	return ID{}, fmt.Errorf("device ID %q: unknown kind %q", s, parts[1])
}

// KindOf returns the ID kind a resource name advertises.
func KindOf(resourceName string) (Kind, bool) {
	switch {
	case resourceName == GPU:
		return KindSlot, true
	case resourceName == Memory:
		return KindMem, true
	case resourceName == Core:
		return KindCore, true
	case strings.HasPrefix(resourceName, MIGPrefix) && len(resourceName) > len(MIGPrefix):
		return KindMIG, true
	}
	return "", false
}

// MIGResource is the resource name of a MIG profile.
func MIGResource(profile string) string { return MIGPrefix + profile }

// GPUsOf returns the sorted, distinct GPU UUIDs that device IDs name.
// Unparsable IDs are skipped.
func GPUsOf(keys []string) []string {
	set := map[string]bool{}
	var out []string
	for _, k := range keys {
		id, err := ParseID(k)
		if err != nil || set[id.GPU] {
			continue
		}
		set[id.GPU] = true
		out = append(out, id.GPU)
	}
	sort.Strings(out)
	return out
}
