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
