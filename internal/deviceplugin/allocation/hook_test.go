package allocation_test

import (
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/gpu"
	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// libDir holds libtessera-hook.so and fakegpu/ (TESSERA_LIB_DIR from make,
// or built here).
func libDir(t *testing.T) string {
	dir, err := fakegpu.HookLibDir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// hookNode is the simulated GPU node a test runs containers on: the plugin's
// view of it (go-nvml mock) and the simulated driver agree on UUIDs and
// memory (the same 8 H200s).
type hookNode struct {
	tmp, fake, cudash string
	specs             []string
	gpus              []gpu.GPU
	builder           *allocation.Builder
}

func newHookNode(t *testing.T) *hookNode {
	lib := libDir(t)
	fake, err := fakegpu.LibDir()
	if err != nil {
		t.Fatal(err)
	}
	n := &hookNode{tmp: t.TempDir(), fake: fake}
	n.cudash = filepath.Join(n.tmp, "cudash")
	if err := fakegpu.BuildCudash(n.cudash); err != nil {
		t.Fatal(err)
	}
	node := gputest.MustNew(gputest.DGXH200)
	n.specs = make([]string, 8)
	for i := range n.specs {
		node.Device(i).UUID = fakegpu.UUID("", i)
		node.Device(i).MemoryInfo = nvml.Memory{Total: fakegpu.DefaultMemMiB << 20}
		n.specs[i] = fmt.Sprintf("%s:%d:%d", fakegpu.DefaultName, fakegpu.DefaultMemMiB, fakegpu.DefaultSMCount)
	}
	n.gpus, err = gpu.Discover(node, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := resource.NewManager(n.gpus, resource.Options{SplitCount: 10, MemoryUnit: 1 << 30})
	n.builder = &allocation.Builder{Manager: m, HookLibrary: filepath.Join(lib, "libtessera-hook.so"), StateDir: filepath.Join(n.tmp, "state"), HookLogLevel: "warn"}
	if err := n.builder.Prepare(); err != nil {
		t.Fatal(err)
	}
	return n
}

// allocate4GiB is Allocate's response for 4 GiB of GPU 1.
func (n *hookNode) allocate4GiB(t *testing.T) *pluginapi.ContainerAllocateResponse {
	var ids []string
	for i := 10; i < 14; i++ {
		ids = append(ids, fmt.Sprintf("%s::mem::%d", n.gpus[1].UUID, i))
	}
	resp, err := n.builder.Container(resource.Memory, ids)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// driverEnv is what the simulated driver needs to find its node.
func (n *hookNode) driverEnv() []string {
	return []string{"LD_LIBRARY_PATH=" + n.fake, "FAKEGPU_STATE=" + filepath.Join(n.tmp, "fakegpu.state"),
		"FAKEGPU_DEVICES=" + strings.Join(n.specs, ";")}
}

// capScript allocates 3 GiB, then 2 GiB, then 1 GiB on GPU 1.
// The container's CUDA_VISIBLE_DEVICES lists only its GPU (the node's GPU
// 1), so the driver enumerates it as ordinal 0, as NVIDIA's does.
const capScript = "init\nuuid 0\nctx 0\ninfo\nalloc a 3221225472\nalloc b 2147483648\nalloc c 1073741824\nexit\n"

// wantCap checks cudash's answers to capScript under a 4 GiB cap.
func (n *hookNode) wantCap(t *testing.T, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{"ok", "ok uuid=" + n.gpus[1].UUID, "ok", fmt.Sprintf("ok free=%d total=%d", 4<<30, 4<<30), "ok", "err 2", "ok"}
	if len(lines) < len(want) {
		t.Fatalf("cudash said:\n%s", out)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d = %q, want %q…\nfull output:\n%s", i, lines[i], w, out)
		}
	}
}

// TestHookEnforcesWhatAllocateHandsOver runs a CUDA program under the real
// hook on the simulated GPU with exactly the files and environment an
// Allocate response gives a container (container paths mapped back to the
// host paths of its mounts), and checks the cap the device IDs imply.
func TestHookEnforcesWhatAllocateHandsOver(t *testing.T) {
	n := newHookNode(t)
	resp := n.allocate4GiB(t)
	env := append(n.driverEnv(), "LD_PRELOAD="+n.builder.HookLibrary)
	for k, v := range resp.Envs {
		for _, mnt := range resp.Mounts {
			if mnt.ContainerPath == v {
				v = mnt.HostPath
			}
		}
		env = append(env, k+"="+v)
	}
	cmd := exec.Command(n.cudash)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(capScript)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cudash: %v\n%s", err, out)
	}
	n.wantCap(t, string(out))
}
