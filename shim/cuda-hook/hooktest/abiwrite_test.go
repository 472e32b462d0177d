package hooktest

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/internal/region"
)

// TestABIWriteFilesOpenInGo: the files hack/gpu-check.sh writes with abi_write
// (from the C header, on machines without Go) are what internal/region expects;
// a bad cap is refused with a message.
func TestABIWriteFilesOpenInGo(t *testing.T) {
	root, dir := repoRoot(), t.TempDir()
	bin := filepath.Join(dir, "abi_write")
	cc := exec.Command("gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror",
		"-I", filepath.Join(root, "shim/cuda-hook/include"), "-I", filepath.Join(root, "shim/cuda-hook/test"),
		"-o", bin, filepath.Join(root, "shim/cuda-hook/test/abi_write.c"))
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("build abi_write: %v\n%s", err, out)
	}
	reg, lim := filepath.Join(dir, "region"), filepath.Join(dir, "limits")
	if out, err := exec.Command(bin, reg, lim, "GPU-abc", "8589934592").CombinedOutput(); err != nil {
		t.Fatalf("abi_write: %v\n%s", err, out)
	}
	l, err := region.OpenLimits(lim)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if d := l.Devices(); len(d) != 1 || d[0].UUID != "GPU-abc" || d[0].MemLimitBytes != 8<<30 {
		t.Fatalf("limits read back: %+v", d)
	}
	r, err := region.OpenRegion(reg)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	out, err := exec.Command(bin, reg, lim, "GPU-abc", "8G").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `"8G" is not a number`) {
		t.Fatalf("bad cap accepted: %v %s", err, out)
	}
}

// TestBalloonSetLowersAndRaisesInPlace: the tool hack/gpu-check.sh lowers and raises
// a running PyTorch's cap with writes the words as internal/region reads them.
func TestBalloonSetLowersAndRaisesInPlace(t *testing.T) {
	root, dir := repoRoot(), t.TempDir()
	bin := filepath.Join(dir, "balloon_set")
	cc := exec.Command("gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror",
		"-I", filepath.Join(root, "shim/cuda-hook/include"), "-o", bin, filepath.Join(root, "shim/cuda-hook/test/balloon_set.c"))
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("build balloon_set: %v\n%s", err, out)
	}
	lim := filepath.Join(dir, "limits")
	if err := region.WriteLimits(lim, []region.DeviceLimit{{UUID: "GPU-abc", MemLimitBytes: 8 << 30}}); err != nil {
		t.Fatal(err)
	}
	l, err := region.OpenLimits(lim)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	gen := l.Generation()
	if out, err := exec.Command(bin, lim, "4294967296", "8589934592", "5000").CombinedOutput(); err != nil {
		t.Fatalf("lower: %v %s", err, out)
	}
	b, _ := l.Balloon("GPU-abc")
	if l.Devices()[0].MemLimitBytes != 4<<30 || b != (region.Balloon{CeilingBytes: 8 << 30, WaitMS: 5000, FloorBytes: 4 << 30}) || l.Generation() <= gen {
		t.Fatalf("after lowering: cap %d, %+v", l.Devices()[0].MemLimitBytes, b)
	}
	if out, err := exec.Command(bin, lim, "8589934592", "0", "0").CombinedOutput(); err != nil {
		t.Fatalf("raise: %v %s", err, out)
	}
	if b, _ := l.Balloon("GPU-abc"); l.Devices()[0].MemLimitBytes != 8<<30 || b.Inflated() {
		t.Fatalf("after raising: cap %d, %+v", l.Devices()[0].MemLimitBytes, b)
	}
	if out, err := exec.Command(bin, lim, "4G", "0", "0").CombinedOutput(); err == nil || !strings.Contains(string(out), "not a number") {
		t.Fatalf("bad cap accepted: %v %s", err, out)
	}
}
