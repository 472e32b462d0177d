package gputest

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// printNodeEnv makes the test binary print a simulated node's UUIDs and
// exit, so that a test can compare what separate processes see.
const printNodeEnv = "GPUTEST_PRINT_NODE"

func TestMain(m *testing.M) {
	if name := os.Getenv(printNodeEnv); name != "" {
		uuids, err := nodeUUIDs(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println(strings.Join(uuids, "\n"))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// nodeUUIDs are the GPU UUIDs of a simulated DGX H200 called name, then
// the MIG UUIDs of two instances created on its GPU 3.
func nodeUUIDs(name string) ([]string, error) {
	n, err := NewForNode(DGXH200, name)
	if err != nil {
		return nil, err
	}
	var out []string
	for i := range n.Devices {
		out = append(out, n.Device(i).UUID)
	}
	migs, err := n.EnableMIG(3, nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	if err != nil {
		return nil, err
	}
	return append(out, migs...), nil
}

var (
	gpuUUID = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	migUUID = regexp.MustCompile(`^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// TestNodeUUIDsFollowTheName: go-nvml's mock draws GPU UUIDs at random, so
// a simulated plugin advertised new devices after every restart. A named
// node's UUIDs are the same in every process, formatted as NVML formats
// them, distinct within the node, and different on another node.
func TestNodeUUIDsFollowTheName(t *testing.T) {
	a := runNode(t, "node-a")
	if again := runNode(t, "node-a"); strings.Join(again, ",") != strings.Join(a, ",") {
		t.Fatalf("node-a's UUIDs changed between processes:\n%v\n%v", a, again)
	}
	inProcess, err := nodeUUIDs("node-a")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(inProcess, ",") != strings.Join(a, ",") {
		t.Fatalf("node-a's UUIDs differ in this process:\n%v\n%v", a, inProcess)
	}
	if len(a) != 10 {
		t.Fatalf("%d UUIDs, want 8 GPUs and 2 MIG devices: %v", len(a), a)
	}
	seen := map[string]bool{}
	for i, u := range a {
		if re := map[bool]*regexp.Regexp{true: gpuUUID, false: migUUID}[i < 8]; !re.MatchString(u) {
			t.Errorf("UUID %d %q is not formatted like NVML's", i, u)
		}
		if seen[u] {
			t.Errorf("UUID %q appears twice", u)
		}
		seen[u] = true
	}
	for _, u := range runNode(t, "node-b") {
		if seen[u] {
			t.Errorf("node-b has node-a's UUID %s", u)
		}
	}
}

// runNode prints a node's UUIDs from a separate process.
func runNode(t *testing.T, name string) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), printNodeEnv+"="+name)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child process: %v", err)
	}
	return strings.Fields(string(out))
}

func TestUnnamedNodesDiffer(t *testing.T) {
	a, b := MustNew(DGXH100), MustNew(DGXH100)
	if a.Device(0).UUID == b.Device(0).UUID {
		t.Fatalf("two unnamed nodes share GPU UUID %s", a.Device(0).UUID)
	}
	if _, err := NewForNode(DGXH100, ""); err == nil {
		t.Fatal("empty node name accepted")
	}
}
