package hooktest

import (
	"fmt"
	"testing"
)

// TestEveryLoadingPathIsCapped: programs linked against libcuda, programs that
// dlopen+dlsym it (PyTorch, cudart), and programs that fetch entry points with
// cuGetProcAddress / _v2 (CUDA >= 11.3 runtimes, legacy and per-thread stream) all
// hit the cap at exactly the same point.
func TestEveryLoadingPathIsCapped(t *testing.T) {
	n := newNode(t, "")
	for _, mode := range []string{"direct", "dlsym", "gpa", "gpa-ptsz", "gpa1"} {
		t.Run(mode, func(t *testing.T) {
			c := n.container(t, map[int]uint64{0: 10 * 4 * MiB})
			p := c.ready(mode)
			out := p.ok("fill f 4194304")
			if got := fieldU(t, out, "n"); got != 10 || field(t, out, "last") != "CUDA_ERROR_OUT_OF_MEMORY" {
				t.Fatalf("fill: %s, want n=10 ending in CUDA_ERROR_OUT_OF_MEMORY", out)
			}
			info := p.ok("info")
			if fieldU(t, info, "total") != 40*MiB || fieldU(t, info, "free") != 0 {
				t.Fatalf("info at the cap: %s", info)
			}
			c.wantUsed(40*MiB, "at the cap")
			p.ok("freeall")
			c.wantUsed(0, "after freeing")
			p.exit()
		})
	}
}

// TestLaunchThroughEveryPath: the launch wrapper forwards to the driver on every path.
func TestLaunchThroughEveryPath(t *testing.T) {
	n := newNode(t, "")
	for _, mode := range []string{"direct", "dlsym", "gpa", "gpa-ptsz"} {
		c := n.container(t, map[int]uint64{0: 64 * MiB})
		p := c.ready(mode)
		p.ok(fmt.Sprintf("launch %d", 1000))
		p.ok("launch 3 1000")
		p.ok("sync")
		p.exit()
	}
}
