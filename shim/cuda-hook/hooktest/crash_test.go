package hooktest

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/region"
)

// TestSIGKILLInAllocFreeLoop kills 1,000 processes at random points of a tight
// alloc/free loop while two survivors hold memory and keep allocating, and the node
// reaper (internal/region, as the monitor will run it) sweeps concurrently with the
// container's own reapers. No survivor ever blocks, and once the dead are reaped the
// region holds exactly what the survivors hold; the survivors can then fill the cap
// exactly.
func TestSIGKILLInAllocFreeLoop(t *testing.T) {
	const (
		kills   = 1000
		workers = 6
		chunk   = 1 * MiB
		capB    = 256 * MiB
	)
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: capB})
	survivors := []*proc{c.ready("direct"), c.ready("direct")}
	for i, s := range survivors {
		for j := 0; j < 10*(i+1); j++ {
			s.ok("alloc k" + string(rune('a'+j)) + " 1048576")
		}
	}
	held := uint64(30 * chunk)

	var done atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	// repeat runs step until stop is closed or step fails.
	repeat := func(step func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := step(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	// The survivors keep allocating and freeing while processes die around them;
	// every answer must come back (send reports a hang as an error).
	for _, s := range survivors {
		repeat(func() error {
			out, err := s.send("alloc tmp 1048576")
			if err == nil && out == "ok" {
				_, err = s.send("free tmp")
			}
			return err
		})
	}
	nodeReaper, err := region.OpenRegion(c.region)
	if err != nil {
		t.Fatal(err)
	}
	defer nodeReaper.Close()
	repeat(func() error {
		time.Sleep(2 * time.Millisecond)
		nodeReaper.Reap(region.ProcessAlive)
		return nil
	})
	var kwg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		kwg.Add(1)
		go func() {
			defer kwg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for done.Add(1) <= kills {
				if err := killOne(n, c, rng); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	kwg.Wait()
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	r := nodeReaper
	r.Reap(region.ProcessAlive)
	u := r.Usage()
	if u.UsedBytes[0] != held || len(u.Procs) != 2 {
		t.Fatalf("after %d kills: region holds %d bytes in %d slots, survivors hold %d", kills, u.UsedBytes[0],
			len(u.Procs), held)
	}
	for i, s := range survivors {
		if got := slotBytes(u, s.pid(), 0); got != uint64(10*(i+1))*chunk {
			t.Errorf("survivor %d: slot %d bytes, holds %d", i, got, 10*(i+1)*chunk)
		}
	}
	if u.ReapedProcs == 0 {
		t.Error("no dead process was ever reaped")
	}
	got := fieldU(t, survivors[0].ok("fill z 1048576"), "n")
	if want := (capB - held) / chunk; got != want {
		t.Fatalf("survivor filled %d chunks up to the cap, want exactly %d", got, want)
	}
	t.Logf("%d kills; reaped %d processes, %d bytes", kills, u.ReapedProcs, u.ReapedBytes)
}

// killOne starts a process in a tight alloc/free loop under the hook and SIGKILLs
// it at a random moment of it.
func killOne(n *node, c *container, rng *rand.Rand) error {
	cmd := exec.Command(cudash)
	cmd.Env = append(n.baseEnv(), c.env...)
	cmd.Env = append(cmd.Env, "LD_PRELOAD="+filepath.Join(libDir, "libtessera-hook.so"))
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	in.Write([]byte("init\nctx 0\nloop 1048576\n"))
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "ok looping" {
	}
	time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
	cmd.Process.Kill()
	cmd.Wait()
	return nil
}

// TestProcessWhoseMainThreadExitedIsAlive: a process whose main thread called
// pthread_exit while other threads go on shows its thread-group leader as a zombie
// in /proc, but it is alive and holds its memory. Neither a container process's
// reaper nor the node reaper may take its usage away.
func TestProcessWhoseMainThreadExitedIsAlive(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 16 * MiB})
	a := c.ready("direct")
	a.ok("alloc a 8388608")
	a.ok("mainexit")
	a.ok("ctx 0") // still running, on its second thread
	a.ok("alloc b 1048576")
	b := c.ready("direct")
	b.fails("alloc x 8388608", "CUDA_ERROR_OUT_OF_MEMORY") // its slot claim reaps the dead first
	c.wantUsed(9*MiB, "after a second process claimed a slot")
	r, err := region.OpenRegion(c.region)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if procs, _ := r.Reap(region.ProcessAlive); procs != 0 {
		t.Errorf("the node reaper cleared %d slots of live processes", procs)
	}
	c.wantUsed(9*MiB, "after the node reaper swept")
	a.ok("free a")
	a.ok("free b")
	c.wantUsed(0, "after the frees")
	a.exit()
	b.exit()
}

// TestExitWhileThreadsAllocate: a process exits (its slot is handed back at once)
// while its other threads go on allocating and freeing. Whatever they charge
// around that moment must not outlive the process: afterwards the container can
// fill its cap exactly.
func TestExitWhileThreadsAllocate(t *testing.T) {
	const capB = 64 * MiB
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: capB})
	for i := range 100 {
		p := c.ready("direct")
		p.ok(fmt.Sprintf("exitrace 6 1048576 %d", 200+i%7*100))
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("exit %d: %v (stderr: %s)", i, err, p.stderr)
		}
	}
	q := c.ready("direct")
	if got := fieldU(t, q.ok("fill z 1048576"), "n"); got != capB/MiB {
		t.Fatalf("after the exits the container could fill %d MiB of its %d MiB cap", got, capB/MiB)
	}
	q.exit()
}
