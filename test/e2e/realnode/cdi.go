package realnode

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	specs "tags.cncf.io/container-device-interface/specs-go"
)

// The simulated GPU driver reaches containers as the real one does: through
// a CDI spec of kind nvidia.com/gpu that containerd applies.
const (
	// SimulatedGPUKind is the CDI kind of the simulated driver's spec.
	SimulatedGPUKind = "nvidia.com/gpu"
	// SimulatedGPUAll is the fully qualified CDI device of every GPU.
	SimulatedGPUAll = SimulatedGPUKind + "=all"
	// DriverLibDir is where containers find the driver's libraries, as
	// with NVIDIA's driver on Debian.
	DriverLibDir = "/usr/lib/x86_64-linux-gnu"
	// cdiSpecVersion: mounts and env need no newer CDI version, and every
	// CDI library since 2023 reads it.
	cdiSpecVersion = "0.6.0"
)

// DriverLibraries are the simulated driver's libraries the spec mounts.
var DriverLibraries = []string{"libcuda.so.1", "libnvidia-ml.so.1"}

// WriteSimulatedGPUSpec writes the simulated driver's CDI spec into the
// directory containerd reads (CDIDir): device "all" mounting libDir's
// libcuda.so.1 and libnvidia-ml.so.1 read-only at DriverLibDir. It returns
// the spec's path.
//
// Stand-in until the product's generator (internal/cdispec on branch
// deploy: one device per GPU UUID from NVML, device nodes, state file) is
// merged here; the kind and the "all" device are the same.
func (n *Node) WriteSimulatedGPUSpec(libDir string) (string, error) {
	var mounts []*specs.Mount
	for _, lib := range DriverLibraries {
		host := filepath.Join(libDir, lib)
		if _, err := os.Stat(host); err != nil {
			return "", fmt.Errorf("simulated GPU CDI spec: %w", err)
		}
		mounts = append(mounts, &specs.Mount{HostPath: host, ContainerPath: filepath.Join(DriverLibDir, lib),
			Type: "bind", Options: []string{"ro", "bind", "nosuid", "nodev"}})
	}
	spec := specs.Spec{
		Version: cdiSpecVersion,
		Kind:    SimulatedGPUKind,
		Devices: []specs.Device{{Name: "all", ContainerEdits: specs.ContainerEdits{
			Mounts: mounts,
			Env:    []string{"TESSERA_SIMULATED_GPU=1"},
		}}},
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return "", fmt.Errorf("simulated GPU CDI spec: %w", err)
	}
	path := filepath.Join(n.layout.CDIDir(), "tessera-simulated-gpu.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", fmt.Errorf("simulated GPU CDI spec: %w", err)
	}
	return path, nil
}
