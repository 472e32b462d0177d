package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// TestSpecOfTheSimulatedNode runs the command against the simulated driver
// (lib/fakegpu) for a 4-GPU node: the spec the CDI library reads back names
// exactly the UUIDs the driver reports (fakegpu.UUID), plus all, and mounts
// its libraries and state file.
func TestSpecOfTheSimulatedNode(t *testing.T) {
	lib, err := fakegpu.LibDir()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	state := filepath.Join(t.TempDir(), "state")
	devs := "NVIDIA H200:143771:132;NVIDIA H200:143771:132;NVIDIA H200:143771:132;NVIDIA H200:143771:132"
	path, err := run([]string{"--devices", devs, "--uuid-seed", "cdi", "--state", state, "--lib-dir", lib, "--dev-root", "/run/fakegpu/dev", "--output", out}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cdi.ReadSpec(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range raw.Devices {
		names = append(names, d.Name)
	}
	want := []string{fakegpu.UUID("cdi", 0), fakegpu.UUID("cdi", 1), fakegpu.UUID("cdi", 2), fakegpu.UUID("cdi", 3), "all"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("devices %v, want %v", names, want)
	}
	if raw.Devices[1].ContainerEdits.DeviceNodes[0].HostPath != "/run/fakegpu/dev/nvidia1" {
		t.Errorf("GPU 1 node %+v", raw.Devices[1].ContainerEdits.DeviceNodes[0])
	}
	if st, err := os.Stat(state); err != nil || st.Mode().Perm() != 0o666 {
		t.Errorf("state file %s: %v, %v; want mode 0666 (containers run as any user)", state, st, err)
	}
	body, _ := os.ReadFile(path)
	for _, s := range []string{filepath.Join(lib, "libcuda.so.1"), "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "FAKEGPU_STATE=" + state, "FAKEGPU_UUID_SEED=cdi"} {
		if !strings.Contains(string(body), s) {
			t.Errorf("spec lacks %s:\n%s", s, body)
		}
	}
}

func TestNodeMustBeNamed(t *testing.T) {
	t.Setenv("FAKEGPU_DEVICES", "")
	if _, err := run([]string{"--state", "/tmp/x"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--devices") {
		t.Fatalf("err = %v", err)
	}
}
