//go:build diag

package computetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/arbiter"
	"github.com/tessera-gpu/tessera/internal/region"
)

// TestDiag10 is a diagnostic, not a test: it asserts nothing and is built
// only with the diag build tag (make test never builds it). Two tenants, 10 %
// and 90 %, saturate the device with kernels of DIAG_KERNEL µs (default 10000; DIAG_HARD=1:
// hard policy; DIAG_ARGS: more tenant arguments, e.g. host=6000); after
// DIAG_WARM (default 400ms, as the share tests) it writes a timeline, one
// line per ~1 ms sample, to DIAG_OUT (default /tmp/diag10/diag.txt):
//
//	ms holder S[run+ bill+ dem inf thr chg] B[...]
//
// holder: which tenant's verdict is go (S small, B big, - none: a hand-over
// draining); run+: device time the simulated GPU ran for it since the last
// sample (ms); bill+: what its hook billed (busy_ns); dem: its demand stamp
// relative to now (+ ahead); inf: launch sequences in flight; thr: throttled
// (stopped with demand); chg: what the scheduler has charged it so far (ms,
// Verdict.Charged). It showed the stale demand stamps with work in flight
// and the two-kernel turns of issue 10 (docs/hook.md "Compute time slices").
//
//	TESSERA_LIB_DIR=$PWD/lib DIAG_KERNEL=10000 go test -tags diag -count=1 -run TestDiag10 ./shim/cuda-hook/computetest/
func TestDiag10(t *testing.T) {
	kernel := os.Getenv("DIAG_KERNEL")
	if kernel == "" {
		kernel = "10000"
	}
	hard := os.Getenv("DIAG_HARD") != ""
	n := newNode(t)
	n.startArbiterAs(defaultPolicy(), arbiterDefault)
	small := n.container("t0", 10, hard, 2)
	big := n.container("t1", 90, hard, 2)
	args := append([]string{"kernel", kernel, "3.5"}, strings.Fields(os.Getenv("DIAG_ARGS"))...)
	ps := n.start(small, args...)
	pb := n.start(big, args...)
	rs, _ := region.OpenRegion(small.entry.CoreRegion())
	rb, _ := region.OpenRegion(big.entry.CoreRegion())
	warm := 400 * time.Millisecond // as the share tests (DIAG_WARM=0: from the start)
	if w, err := time.ParseDuration(os.Getenv("DIAG_WARM")); err == nil {
		warm = w
	}
	time.Sleep(warm)
	var lines []string
	var s0, b0 uint64
	var rs0, rb0 uint64
	start := time.Now()
	for time.Since(start) < 2*time.Second {
		s := n.sample()
		cs, cb := rs.Compute(0), rb.Compute(0)
		vs, _ := n.arb.Verdict(small.entry.Key, n.uuid)
		vb, _ := n.arb.Verdict(big.entry.Key, n.uuid)
		h := "-"
		if vs.Go {
			h = "S"
		}
		if vb.Go {
			h += "B"
		}
		mono := arbiter.Monotonic()
		dem := func(d uint64) string {
			if d > mono {
				return fmt.Sprintf("+%d", (d-mono)/1e6)
			}
			return fmt.Sprintf("-%d", (mono-d)/1e6)
		}
		lines = append(lines, fmt.Sprintf("%5.0f %-2s S[run+%.1f bill+%.1f dem%s inf%d thr%v chg%.1f] B[run+%.1f bill+%.1f dem%s inf%d chg%.1f]",
			float64(time.Since(start).Microseconds())/1000, h,
			float64(s.byPID[ps.pid]-rs0)/1e6, float64(cs.BusyNs-s0)/1e6, dem(cs.DemandNs), cs.Inflight, vs.Throttled, vs.Charged*1e3,
			float64(s.byPID[pb.pid]-rb0)/1e6, float64(cb.BusyNs-b0)/1e6, dem(cb.DemandNs), cb.Inflight, vb.Charged*1e3))
		rs0, rb0, s0, b0 = s.byPID[ps.pid], s.byPID[pb.pid], cs.BusyNs, cb.BusyNs
		time.Sleep(time.Millisecond)
	}
	out := os.Getenv("DIAG_OUT")
	if out == "" {
		out = "/tmp/diag10/diag.txt"
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	ps.wait(t)
	pb.wait(t)
}
