package computetest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/arbiter"
	"github.com/tessera-gpu/tessera/internal/region"
)

func TestDiag10(t *testing.T) {
	kernel := os.Getenv("DIAG_KERNEL")
	if kernel == "" {
		t.Skip("diag")
	}
	hard := os.Getenv("DIAG_HARD") != ""
	n := newNode(t)
	n.startArbiterAs(defaultPolicy(), arbiterDefault)
	small := n.container("t0", 10, hard, 2)
	big := n.container("t1", 90, hard, 2)
	ps := n.start(small, "kernel", kernel, "3.5")
	pb := n.start(big, "kernel", kernel, "3.5")
	rs, _ := region.OpenRegion(small.entry.CoreRegion())
	rb, _ := region.OpenRegion(big.entry.CoreRegion())
	time.Sleep(400 * time.Millisecond)
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
		lines = append(lines, fmt.Sprintf("%5.0f %-2s S[run+%.1f bill+%.1f dem%s inf%d thr%v] B[run+%.1f bill+%.1f dem%s inf%d]",
			float64(time.Since(start).Microseconds())/1000, h,
			float64(s.byPID[ps.pid]-rs0)/1e6, float64(cs.BusyNs-s0)/1e6, dem(cs.DemandNs), cs.Inflight, vs.Throttled,
			float64(s.byPID[pb.pid]-rb0)/1e6, float64(cb.BusyNs-b0)/1e6, dem(cb.DemandNs), cb.Inflight))
		rs0, rb0, s0, b0 = s.byPID[ps.pid], s.byPID[pb.pid], cs.BusyNs, cb.BusyNs
		time.Sleep(time.Millisecond)
	}
	os.WriteFile("/tmp/m10/diag.txt", []byte(strings.Join(lines, "\n")), 0o644)
	ps.wait(t)
	pb.wait(t)
}
