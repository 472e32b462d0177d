package hooktest

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestProcessesShareOneCap: N processes of one container fill concurrently; together
// they never exceed the cap, and once all are done the cap is used exactly.
func TestProcessesShareOneCap(t *testing.T) {
	for _, procs := range []int{2, 8} {
		t.Run(fmt.Sprint(procs, "procs"), func(t *testing.T) {
			n := newNode(t, "")
			const chunk = 4 * MiB
			const chunks = 50
			c := n.container(t, map[int]uint64{0: chunks * chunk})
			ps := make([]*proc, procs)
			for i := range ps {
				ps[i] = c.ready("direct")
			}
			got := make([]uint64, procs)
			var wg sync.WaitGroup
			for i, p := range ps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out, err := p.send("fill a 4194304")
					if err != nil {
						t.Error(err)
						return
					}
					n, _, _ := strings.Cut(strings.TrimPrefix(out, "ok n="), " ")
					if got[i], err = strconv.ParseUint(n, 10, 64); err != nil || !strings.HasPrefix(out, "ok n=") {
						t.Errorf("fill: %q", out)
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			// Two charges racing for the last bytes may both back off; a second,
			// sequential pass takes whatever such a race left.
			for i, p := range ps {
				got[i] += fieldU(t, p.ok("fill b 4194304"), "n")
			}
			var total uint64
			u := c.usage()
			for i, p := range ps {
				total += got[i]
				if held := slotBytes(u, p.pid(), 0); held != got[i]*chunk {
					t.Errorf("process %d holds %d chunks, its slot says %d bytes", i, got[i], held)
				}
			}
			if total != chunks || u.UsedBytes[0] != chunks*chunk {
				t.Fatalf("processes hold %d chunks (%v), region %d bytes; want exactly %d chunks", total, got,
					u.UsedBytes[0], chunks)
			}
			if u.PeakBytes[0] > chunks*chunk {
				t.Fatalf("peak %d exceeded the cap %d", u.PeakBytes[0], chunks*chunk)
			}
			for _, p := range ps {
				p.ok("freeall")
				p.exit()
			}
			if u := c.usage(); u.UsedBytes[0] != 0 || len(u.Procs) != 0 {
				t.Fatalf("after exit: %+v", u)
			}
		})
	}
}

// TestThreadsShareTheTable: threads of one process allocate and free concurrently;
// nothing fails and nothing is left charged.
func TestThreadsShareTheTable(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 1 << 30})
	p := c.start("direct")
	p.ok("init")
	if out := p.ok("threads 8 1048576 2000"); field(t, out, "failures") != "0" {
		t.Fatalf("threads: %s", out)
	}
	c.wantUsed(0, "after balanced threads")
	p.exit()
}
