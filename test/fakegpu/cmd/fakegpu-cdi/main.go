// Command fakegpu-cdi writes the CDI spec of the simulated GPU driver
// (test/fakegpu), as `nvidia-ctk cdi generate` writes NVIDIA's: it loads the
// simulated libnvidia-ml.so.1 through go-nvml, discovers the GPUs the way
// the device plugin does, and writes kind nvidia.com/gpu with one device per
// GPU UUID plus "all" (internal/cdispec). Every device mounts the simulated
// libcuda.so.1 and libnvidia-ml.so.1, the node's state file (read-write:
// all processes of one simulated node share it) and the FAKEGPU_*
// variables that make a container's driver the same node. The end-to-end
// harness runs it before starting containerd with CDI enabled.
//
//	fakegpu-cdi --devices 'NVIDIA H200:143771:132;…' --state /run/fakegpu/state \
//	    --dev-root /run/fakegpu/dev --output /etc/cdi
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tessera-gpu/tessera/internal/cdispec"
	"github.com/tessera-gpu/tessera/internal/gpu"
	"github.com/tessera-gpu/tessera/test/fakegpu"
)

func main() {
	path, err := run(os.Args[1:], os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakegpu-cdi:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

// libraries are the simulated driver's user-space libraries containers need.
var libraries = []string{"libcuda.so.1", "libnvidia-ml.so.1"}

func run(args []string, stderr io.Writer) (string, error) {
	fs := flag.NewFlagSet("fakegpu-cdi", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kind := fs.String("kind", "nvidia.com/gpu", "CDI kind (vendor/class)")
	devices := fs.String("devices", os.Getenv("FAKEGPU_DEVICES"), "FAKEGPU_DEVICES of the simulated node (name:mem_mib:sm_count;…)")
	seed := fs.String("uuid-seed", os.Getenv("FAKEGPU_UUID_SEED"), "FAKEGPU_UUID_SEED of the simulated node")
	state := fs.String("state", os.Getenv("FAKEGPU_STATE"), "host path of the simulated node's state file (FAKEGPU_STATE)")
	stateIn := fs.String("state-in-container", "", "path of the state file in containers (default: the host path)")
	libDir := fs.String("lib-dir", "", "host directory of the simulated libraries (default: lib/fakegpu of this checkout, built if needed)")
	libIn := fs.String("lib-container-dir", "/usr/lib/x86_64-linux-gnu", "directory the libraries are mounted into (a default library directory of glibc images, where the real driver's libraries go)")
	devRoot := fs.String("dev-root", "/dev", "host directory holding nvidia0…, nvidiactl, nvidia-uvm, nvidia-uvm-tools (made by the harness)")
	out := fs.String("output", "/etc/cdi", "CDI spec directory to write into")
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if *devices == "" || *state == "" {
		return "", fmt.Errorf("--devices and --state are required: containers must see the same simulated node as the device plugin")
	}
	if !filepath.IsAbs(*state) {
		return "", fmt.Errorf("--state %q is not an absolute path", *state)
	}
	if *stateIn == "" {
		*stateIn = *state
	}
	if *libDir == "" {
		d, err := fakegpu.LibDir()
		if err != nil {
			return "", fmt.Errorf("simulated GPU libraries: %w", err)
		}
		*libDir = d
	}
	env := map[string]string{"FAKEGPU_DEVICES": *devices, "FAKEGPU_UUID_SEED": *seed, "FAKEGPU_STATE": *stateIn, "FAKEGPU_CONFIG": ""}
	gpus, err := discover(filepath.Join(*libDir, "libnvidia-ml.so.1"), env, *state)
	if err != nil {
		return "", err
	}
	// The state file stands for the driver's device nodes, which are
	// 0666: a container's program runs as any user and must open it
	// read-write (discovery created it with this process's umask).
	if err := os.Chmod(*state, 0o666); err != nil {
		return "", fmt.Errorf("state file: %w", err)
	}
	spec, err := cdispec.Generate(gpus, cdispec.Options{
		Kind:      *kind,
		DevRoot:   *devRoot,
		Libraries: cdispec.LibraryMounts(*libDir, *libIn, libraries...),
		Files:     []cdispec.Mount{{HostPath: *state, ContainerPath: *stateIn}},
		Env:       map[string]string{"FAKEGPU_DEVICES": *devices, "FAKEGPU_UUID_SEED": *seed, "FAKEGPU_STATE": *stateIn},
	})
	if err != nil {
		return "", err
	}
	return cdispec.Write(spec, *out)
}

// discover asks the simulated NVML for the node's GPUs, configured through
// this process's environment as the driver reads it at nvmlInit.
func discover(library string, env map[string]string, state string) ([]gpu.GPU, error) {
	for k, v := range env {
		if err := os.Setenv(k, v); err != nil {
			return nil, err
		}
	}
	// The host process uses the host path of the state file.
	if err := os.Setenv("FAKEGPU_STATE", state); err != nil {
		return nil, err
	}
	lib := nvml.New(nvml.WithLibraryPath(library))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvmlInit of %s: %v", library, ret)
	}
	defer lib.Shutdown()
	gpus, err := gpu.Discover(lib, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, fmt.Errorf("GPU discovery: %w", err)
	}
	return gpus, nil
}
