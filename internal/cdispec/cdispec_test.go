package cdispec

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/gpu"
	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

// node discovers a simulated 8×H200 through go-nvml's mock and makes a
// device directory of character devices 1:3 (/dev/null's numbers), which
// the CDI library stats as it stats the driver's nodes. mknod needs root
// (CI runs as root; elsewhere the test is skipped).
func node(t *testing.T) ([]gpu.GPU, string) {
	t.Helper()
	gpus, err := gpu.Discover(gputest.MustNew(gputest.DGXH200), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	dev := t.TempDir()
	names := slices.Clone(controlNodes)
	for _, g := range gpus {
		names = append(names, filepath.Base(g.DevicePath()))
	}
	for _, n := range names {
		err := unix.Mknod(filepath.Join(dev, n), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
		if errors.Is(err, unix.EPERM) && os.Getenv("CI") == "" {
			t.Skip("mknod needs root")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return gpus, dev
}

func options(dev string) Options {
	return Options{
		Kind:      "nvidia.com/gpu",
		DevRoot:   dev,
		Libraries: LibraryMounts("/opt/driver/lib", "/usr/lib/x86_64-linux-gnu", "libcuda.so.1", "libnvidia-ml.so.1"),
		Files:     []Mount{{HostPath: "/run/fakegpu/state", ContainerPath: "/run/fakegpu/state"}},
		Env:       map[string]string{"FAKEGPU_STATE": "/run/fakegpu/state", "FAKEGPU_DEVICES": "NVIDIA H200:143771:132"},
	}
}

// TestSpecInjectsWhatTheDevicePluginNames writes the spec, loads it back
// with the CDI library (as containerd does), and injects the very names the
// device plugin's CDI strategy produces for GPU 2, then "all": the container
// gets its GPU's node, the control nodes, the libraries read-only, the state
// file read-write and the environment.
func TestSpecInjectsWhatTheDevicePluginNames(t *testing.T) {
	gpus, dev := node(t)
	spec, err := Generate(gpus, options(dev))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path, err := Write(spec, dir)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "nvidia.com-gpu.yaml" {
		t.Errorf("spec file %s", path)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("spec errors: %v", errs)
	}
	if got := len(cache.ListDevices()); got != len(gpus)+1 {
		t.Fatalf("%d devices, want %d GPUs + all: %v", got, len(gpus), cache.ListDevices())
	}

	names, err := allocation.CDIDeviceNames("nvidia.com/gpu", []string{gpus[2].UUID})
	if err != nil {
		t.Fatal(err)
	}
	c := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(c, names...); err != nil {
		t.Fatalf("inject %v: %v (unresolved %v)", names, err, unresolved)
	}
	var devs []string
	for _, d := range c.Linux.Devices {
		devs = append(devs, d.Path)
		if d.Type != "c" || d.Major != 1 || d.Minor != 3 {
			t.Errorf("%s: type %s %d:%d, want the host node's c 1:3", d.Path, d.Type, d.Major, d.Minor)
		}
	}
	slices.Sort(devs)
	if want := []string{"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia2", "/dev/nvidiactl"}; !slices.Equal(devs, want) {
		t.Errorf("device nodes %v, want %v", devs, want)
	}
	mounts := map[string]oci.Mount{}
	for _, m := range c.Mounts {
		mounts[m.Destination] = m
	}
	for dst, mode := range map[string]string{"/usr/lib/x86_64-linux-gnu/libcuda.so.1": "ro", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1": "ro", "/run/fakegpu/state": "rw"} {
		if m, ok := mounts[dst]; !ok || !slices.Contains(m.Options, mode) {
			t.Errorf("mount %s = %+v, want %s", dst, m, mode)
		}
	}
	if !slices.Contains(c.Process.Env, "FAKEGPU_STATE=/run/fakegpu/state") {
		t.Errorf("env %v", c.Process.Env)
	}

	all := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(all, "nvidia.com/gpu=all"); err != nil {
		t.Fatal(err)
	}
	if got := len(all.Linux.Devices); got != len(gpus)+len(controlNodes) {
		t.Errorf("all: %d device nodes, want %d", got, len(gpus)+len(controlNodes))
	}
}

// TestGenerateRefusesWhatNoRuntimeCouldUse: a bad kind, a relative device
// root, no GPU, and a device name the CDI library rejects at write time.
func TestGenerateRefusesWhatNoRuntimeCouldUse(t *testing.T) {
	gpus, dev := node(t)
	for name, o := range map[string]Options{
		"kind":    {Kind: "gpu", DevRoot: dev},
		"devroot": {Kind: "nvidia.com/gpu", DevRoot: "dev"},
	} {
		if _, err := Generate(gpus, o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := Generate(nil, options(dev)); err == nil || !strings.Contains(err.Error(), "no GPUs") {
		t.Errorf("no GPUs: %v", err)
	}
	spec, err := Generate(gpus, options(dev))
	if err != nil {
		t.Fatal(err)
	}
	spec.Devices = append(spec.Devices, specs.Device{Name: "GPU 0", ContainerEdits: spec.Devices[0].ContainerEdits})
	if _, err := Write(spec, t.TempDir()); err == nil || !strings.Contains(err.Error(), "GPU 0") {
		t.Errorf("invalid device name written: %v", err)
	}
}
