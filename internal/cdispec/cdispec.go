// Package cdispec generates a Container Device Interface spec for a node's
// GPUs the way `nvidia-ctk cdi generate --device-name-strategy=uuid` does
// for NVIDIA's driver: one device per GPU UUID plus "all", each carrying its
// /dev/nvidiaN node, and common edits with the control nodes and the
// driver's user-space libraries. The GPUs come from NVML (internal/gpu), so
// the names match the UUIDs the device plugin advertises, whichever driver
// answers NVML — the real one, or the simulated one the end-to-end harness
// points it at (cmd/fakegpu-cdi). The device plugin's CDI strategies name
// these devices; it never reads the spec.
package cdispec

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tessera-gpu/tessera/internal/gpu"
)

// AllDevice is the name of the device that stands for every GPU.
const AllDevice = "all"

// controlNodes are the device nodes every GPU container needs, under /dev.
var controlNodes = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}

// Mount is a host file bind-mounted into containers.
type Mount struct {
	HostPath, ContainerPath string
	ReadOnly                bool
}

// Options describes where the driver's pieces are on the host.
type Options struct {
	// Kind is the spec's vendor/class (nvidia.com/gpu).
	Kind string
	// DevRoot is the host directory holding the device nodes (/dev);
	// containers always see them under /dev.
	DevRoot string
	// Libraries are the driver's user-space libraries (libcuda.so.1,
	// libnvidia-ml.so.1, …), mounted read-only.
	Libraries []Mount
	// Files are other host files the driver needs in containers (the
	// simulated driver's state file, mounted read-write).
	Files []Mount
	// Env is set in every container that gets a device.
	Env map[string]string
}

// Generate builds the spec for gpus. It names devices by GPU UUID, in
// index order, and "all" last.
func Generate(gpus []gpu.GPU, o Options) (*specs.Spec, error) {
	vendor, class := parser.ParseQualifier(o.Kind)
	if err := parser.ValidateVendorName(vendor); err != nil {
		return nil, fmt.Errorf("kind %q: %w", o.Kind, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return nil, fmt.Errorf("kind %q: %w", o.Kind, err)
	}
	if !filepath.IsAbs(o.DevRoot) {
		return nil, fmt.Errorf("device root %q is not an absolute path", o.DevRoot)
	}
	if len(gpus) == 0 {
		return nil, fmt.Errorf("no GPUs: a spec without devices would make every CDI request for %s fail later, at container start", o.Kind)
	}
	sorted := append([]gpu.GPU(nil), gpus...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Index < sorted[j].Index })

	spec := &specs.Spec{Kind: o.Kind}
	var all []*specs.DeviceNode
	for _, g := range sorted {
		node := o.node(filepath.Base(g.DevicePath()))
		all = append(all, node)
		spec.Devices = append(spec.Devices, specs.Device{Name: g.UUID,
			ContainerEdits: specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{node}}})
	}
	spec.Devices = append(spec.Devices, specs.Device{Name: AllDevice, ContainerEdits: specs.ContainerEdits{DeviceNodes: all}})

	common := &spec.ContainerEdits
	for _, n := range controlNodes {
		common.DeviceNodes = append(common.DeviceNodes, o.node(n))
	}
	for _, m := range o.Libraries {
		common.Mounts = append(common.Mounts, bind(Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, ReadOnly: true}))
	}
	for _, m := range o.Files {
		common.Mounts = append(common.Mounts, bind(m))
	}
	keys := make([]string, 0, len(o.Env))
	for k := range o.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		common.Env = append(common.Env, k+"="+o.Env[k])
	}
	version, err := cdi.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("CDI version: %w", err)
	}
	spec.Version = version
	return spec, nil
}

// node is a device node at /dev/<name> whose host side is under DevRoot.
// Type and numbers are left out: the runtime reads them from the host node
// when it injects the device, as it does for nvidia-ctk's spec.
func (o Options) node(name string) *specs.DeviceNode {
	return &specs.DeviceNode{Path: "/dev/" + name, HostPath: filepath.Join(o.DevRoot, name), Permissions: "rw"}
}

func bind(m Mount) *specs.Mount {
	opts := []string{"bind", "nosuid", "nodev"}
	if m.ReadOnly {
		opts = append([]string{"ro"}, opts...)
	} else {
		opts = append([]string{"rw"}, opts...)
	}
	return &specs.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Type: "bind", Options: opts}
}

// Write validates spec with the CDI library (names, version, every edit)
// and writes it into dir (e.g. /etc/cdi or /var/run/cdi), replacing an
// earlier one; it returns the file's path. The file is named after the
// kind, as nvidia-ctk names its own (nvidia.com-gpu.yaml).
func Write(spec *specs.Spec, dir string) (string, error) {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return "", fmt.Errorf("CDI spec directory %s: %w", dir, err)
	}
	name, err := cdi.GenerateNameForSpec(spec)
	if err != nil {
		return "", fmt.Errorf("CDI spec name: %w", err)
	}
	if err := cache.WriteSpec(spec, name); err != nil {
		return "", fmt.Errorf("CDI spec %s: %w", name, err)
	}
	return filepath.Join(dir, name+".yaml"), nil
}

// DeviceNames are the fully qualified names of the spec's devices.
func DeviceNames(spec *specs.Spec) []string {
	names := make([]string, 0, len(spec.Devices))
	for _, d := range spec.Devices {
		names = append(names, spec.Kind+"="+d.Name)
	}
	return names
}

// LibraryMounts mounts each named library of hostDir at the same name in
// containerDir.
func LibraryMounts(hostDir, containerDir string, names ...string) []Mount {
	mounts := make([]Mount, 0, len(names))
	for _, n := range names {
		mounts = append(mounts, Mount{HostPath: filepath.Join(hostDir, n), ContainerPath: strings.TrimSuffix(containerDir, "/") + "/" + n, ReadOnly: true})
	}
	return mounts
}
