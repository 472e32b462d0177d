package hooktest

import (
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/region"
)

// inflate lowers device 0's cap to capBytes under a ceiling, as the node agent does.
func (c *container) inflate(capBytes, ceiling, waitMS uint64) {
	c.t.Helper()
	l, err := region.OpenLimits(c.limits)
	if err != nil {
		c.t.Fatal(err)
	}
	defer l.Close()
	b := region.Balloon{CeilingBytes: ceiling, WaitMS: waitMS, FloorBytes: capBytes}
	if err := l.SetBalloonCap(c.n.uuids[0], capBytes, b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *container) balloonWait() region.BalloonWait {
	c.t.Helper()
	r, err := region.OpenRegion(c.region)
	if err != nil {
		c.t.Fatal(err)
	}
	defer r.Close()
	return r.BalloonWait(0)
}

// TestOwnerWaitsForReclaimThenProceeds: an allocation above the lowered cap but within
// the ceiling waits, its request visible in the region; when the node raises the cap
// the allocation proceeds, counted as granted and not as refused.
func TestOwnerWaitsForReclaimThenProceeds(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 64 * MiB})
	c.inflate(16*MiB, 64*MiB, 10000)
	p := c.ready("direct")
	p.ok("alloc a 8388608")
	done := make(chan string, 1)
	go func() {
		out, err := p.send("alloc b 16777216")
		if err != nil {
			out = err.Error()
		}
		done <- out
	}()
	deadline := time.Now().Add(5 * time.Second)
	var w region.BalloonWait
	for !w.Waiting() && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
		w = c.balloonWait()
	}
	if !w.Waiting() || w.WantBytes != 24*MiB || w.WaitSinceNs == 0 {
		t.Fatalf("no wait request visible in the region: %+v", w)
	}
	select {
	case out := <-done:
		t.Fatalf("allocation returned %q before the cap was raised", out)
	default:
	}
	c.inflate(32*MiB, 64*MiB, 10000) // reclaimed enough for the owner
	select {
	case out := <-done:
		if out[:2] != "ok" {
			t.Fatalf("after the cap was raised: %q (stderr: %s)", out, p.stderr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the allocation did not proceed after the cap was raised")
	}
	c.wantUsed(24*MiB, "after the granted wait")
	w = c.balloonWait()
	if w.Waiting() || w.Waits() != 1 || w.WaitsGranted != 1 || w.WaitsExpired != 0 || w.WaitNsTotal == 0 {
		t.Errorf("after the grant: %+v", w)
	}
	checkWaitLane(t, w)
	if got := c.usage().Refused[0]; got != 0 {
		t.Errorf("a granted wait counted %d refusals", got)
	}
	p.exit()
}

// checkWaitLane: the region's only ended wait is counted once in its per-wait
// histogram, in the lane its duration (the region's total) falls in.
func checkWaitLane(t *testing.T, w region.BalloonWait) {
	t.Helper()
	lane := 0
	for lane < len(region.BalloonWaitBoundsUs) && w.WaitNsTotal > region.BalloonWaitBoundsUs[lane]*1000 {
		lane++
	}
	var want [region.BalloonWaitLanes]uint16
	want[lane] = 1
	if w.Hist != want {
		t.Errorf("wait of %v counted in lanes %v, want lane %d only", time.Duration(w.WaitNsTotal), w.Hist, lane)
	}
}

// TestOwnerWaitIsBoundedThenOOM: nobody reclaims; after the wait bound the owner gets
// CUDA_ERROR_OUT_OF_MEMORY exactly as at the cap (nothing charged, one refusal).
func TestOwnerWaitIsBoundedThenOOM(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 64 * MiB})
	c.inflate(16*MiB, 64*MiB, 150)
	p := c.ready("direct")
	start := time.Now()
	p.fails("alloc a 33554432", "CUDA_ERROR_OUT_OF_MEMORY")
	took := time.Since(start)
	if took < 140*time.Millisecond || took > 3*time.Second {
		t.Errorf("the refused allocation took %v, want about the 150 ms bound", took)
	}
	c.wantUsed(0, "after the expired wait")
	w := c.balloonWait()
	if w.Waiting() || w.Waits() != 1 || w.WaitsExpired != 1 || w.WantBytes != 0 || w.WaitSinceNs != 0 {
		t.Errorf("after the expired wait: %+v", w)
	}
	checkWaitLane(t, w)
	if got := c.usage().Refused[0]; got != 1 {
		t.Errorf("refused = %d, want 1", got)
	}
	p.exit()
}

// TestNoWaitBeyondCeilingOrWithoutBalloon: an allocation the ceiling would not admit
// either, or one at a cap that is not lowered, is refused at once.
func TestNoWaitBeyondCeilingOrWithoutBalloon(t *testing.T) {
	n := newNode(t, "")
	for _, tc := range []struct {
		name    string
		inflate bool
		alloc   string
	}{
		{"beyond the ceiling", true, "alloc a 134217728"},
		{"no balloon", false, "alloc a 134217728"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := n.container(t, map[int]uint64{0: 64 * MiB})
			if tc.inflate {
				c.inflate(16*MiB, 64*MiB, 10000)
			}
			p := c.ready("direct")
			start := time.Now()
			p.fails(tc.alloc, "CUDA_ERROR_OUT_OF_MEMORY")
			// A wait would last its 10 s bound; half of it leaves a loaded
			// machine's round trip to the process its slack (Waits is the
			// exact check).
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("refused after %v: it waited", took)
			}
			if w := c.balloonWait(); w.Waits() != 0 || w.Hist != [region.BalloonWaitLanes]uint16{} {
				t.Errorf("a wait was started: %+v", w)
			}
			p.exit()
		})
	}
}

// TestWaitSurvivesTheAgentClearingIt: the node agent clears a request it takes for
// orphaned (a killed waiter's). A live waiter must show itself again at once, so the
// agent still reclaims for it, and its leaving must not wrap the waiter count (a
// count of 2^64-1 reads as a waiting owner forever after).
func TestWaitSurvivesTheAgentClearingIt(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 64 * MiB})
	c.inflate(16*MiB, 64*MiB, 10000)
	p := c.ready("direct")
	done := make(chan string, 1)
	go func() {
		out, err := p.send("alloc a 33554432")
		if err != nil {
			out = err.Error()
		}
		done <- out
	}()
	waitFor := func(what string, cond func(region.BalloonWait) bool) region.BalloonWait {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		w := c.balloonWait()
		for !cond(w) && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond)
			w = c.balloonWait()
		}
		if !cond(w) {
			t.Fatalf("%s: %+v", what, w)
		}
		return w
	}
	waitFor("no wait request visible", region.BalloonWait.Waiting)
	r, err := region.OpenRegion(c.region)
	if err != nil {
		t.Fatal(err)
	}
	r.ClearBalloonWait(0, r.BalloonWait(0)) // the agent, wrongly, as if orphaned
	r.Close()
	waitFor("the live waiter did not show itself again after the clear", region.BalloonWait.Waiting)
	c.inflate(48*MiB, 64*MiB, 10000)
	if out := <-done; out[:2] != "ok" {
		t.Fatalf("after the cap was raised: %q (stderr: %s)", out, p.stderr)
	}
	if w := c.balloonWait(); w.Waiters != 0 || w.Waiting() {
		t.Fatalf("after the only waiter left: %+v", w)
	}
	p.exit()
}
