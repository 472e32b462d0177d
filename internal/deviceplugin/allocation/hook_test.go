package allocation_test

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/gpu"
	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
	"github.com/tessera-gpu/tessera/test/fakegpu"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// libDir holds libtessera-hook.so and fakegpu/ (TESSERA_LIB_DIR from make,
// or built here).
func libDir(t *testing.T) string {
	if dir := os.Getenv("TESSERA_LIB_DIR"); dir != "" {
		return dir
	}
	if out, err := exec.Command("make", "-C", repoRoot(), "hook", "fakegpu").CombinedOutput(); err != nil {
		t.Fatalf("make hook fakegpu: %v\n%s", err, out)
	}
	return filepath.Join(repoRoot(), "lib")
}

// TestHookEnforcesWhatAllocateHandsOver runs a CUDA program under the real
// hook on the simulated GPU with exactly the files and environment an
// Allocate response gives a container (container paths mapped back to the
// host paths of its mounts), and checks the cap the device IDs imply.
func TestHookEnforcesWhatAllocateHandsOver(t *testing.T) {
	lib := libDir(t)
	fake, err := fakegpu.LibDir()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	cudash := filepath.Join(tmp, "cudash")
	cc := exec.Command("gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-I", filepath.Join(repoRoot(), "shim/cuda-hook/include"), "-o", cudash,
		filepath.Join(repoRoot(), "shim/cuda-hook/test/cudash.c"), filepath.Join(fake, "libcuda.so.1"), filepath.Join(fake, "libnvidia-ml.so.1"), "-ldl", "-lpthread")
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("build cudash: %v\n%s", err, out)
	}

	// The plugin's view of the node (go-nvml mock) and the simulated driver
	// agree on UUIDs and memory: the same 8 H200s.
	node := gputest.MustNew(gputest.DGXH200)
	specs := make([]string, 8)
	for i := range specs {
		node.Device(i).UUID = fakegpu.UUID("", i)
		node.Device(i).MemoryInfo = nvml.Memory{Total: fakegpu.DefaultMemMiB << 20}
		specs[i] = fmt.Sprintf("%s:%d:%d", fakegpu.DefaultName, fakegpu.DefaultMemMiB, fakegpu.DefaultSMCount)
	}
	gpus, err := gpu.Discover(node, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := resource.NewManager(gpus, resource.Options{SplitCount: 10, MemoryUnit: 1 << 30})
	b := &allocation.Builder{Manager: m, HookLibrary: filepath.Join(lib, "libtessera-hook.so"), StateDir: filepath.Join(tmp, "state"), HookLogLevel: "warn"}
	if err := b.Prepare(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for n := 10; n < 14; n++ { // 4 GiB on GPU 1
		ids = append(ids, fmt.Sprintf("%s::mem::%d", gpus[1].UUID, n))
	}
	resp, err := b.Container(resource.Memory, ids)
	if err != nil {
		t.Fatal(err)
	}

	env := []string{"LD_LIBRARY_PATH=" + fake, "FAKEGPU_STATE=" + filepath.Join(tmp, "fakegpu.state"),
		"FAKEGPU_DEVICES=" + strings.Join(specs, ";"), "LD_PRELOAD=" + b.HookLibrary}
	for k, v := range resp.Envs {
		for _, mnt := range resp.Mounts {
			if mnt.ContainerPath == v {
				v = mnt.HostPath
			}
		}
		env = append(env, k+"="+v)
	}
	cmd := exec.Command(cudash)
	cmd.Env = env
	cmd.Stdin = strings.NewReader("init\nuuid 1\nctx 1\ninfo\nalloc a 3221225472\nalloc b 2147483648\nalloc c 1073741824\nexit\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cudash: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := []string{"ok", "ok uuid=" + gpus[1].UUID, "ok", fmt.Sprintf("ok free=%d total=%d", 4<<30, 4<<30), "ok", "err 2", "ok"}
	if len(lines) < len(want) {
		t.Fatalf("cudash said:\n%s", out)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d = %q, want %q…\nfull output:\n%s", i, lines[i], w, out)
		}
	}
}
