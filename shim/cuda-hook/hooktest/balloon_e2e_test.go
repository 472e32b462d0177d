package hooktest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/balloon"
	"github.com/tessera-gpu/tessera/internal/monitor/balloons"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/statedir"
)

// balloonNode is the simulated GPU with a device-plugin state directory and the
// node agent's balloon controller running in-process (killable and restartable).
type balloonNode struct {
	*node
	t        *testing.T
	stateDir string
	mu       sync.Mutex
	pods     map[string]balloons.PodInfo // state key → pod
	procs    map[string]*proc            // state key → its process
	evicted  []string
	cancel   context.CancelFunc
	done     chan struct{}
}

const e2ePhysical = 64 * MiB // what the controller takes the GPU to have

func newBalloonNode(t *testing.T) *balloonNode {
	return &balloonNode{node: newNode(t, ""), t: t, stateDir: t.TempDir(), pods: map[string]balloons.PodInfo{}, procs: map[string]*proc{}}
}

// container writes a memory allocation's files where the plugin would and starts
// a hooked process in it.
func (b *balloonNode) container(key string, capBytes uint64, info balloons.PodInfo) *proc {
	b.t.Helper()
	dir := filepath.Join(statedir.Containers(b.stateDir), key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	limits, reg := filepath.Join(dir, statedir.LimitsFile), filepath.Join(dir, statedir.RegionFile)
	if err := region.WriteLimits(limits, []region.DeviceLimit{{UUID: b.uuids[0], MemLimitBytes: capBytes}}); err != nil {
		b.t.Fatal(err)
	}
	if err := region.CreateRegion(reg); err != nil {
		b.t.Fatal(err)
	}
	b.mu.Lock()
	b.pods[key] = info
	b.mu.Unlock()
	p := b.run(b.t, []string{"TESSERA_REGION=" + reg, "TESSERA_LIMITS=" + limits}, "direct", true)
	p.ok("init")
	p.ok("ctx 0")
	b.mu.Lock()
	b.procs[key] = p
	b.mu.Unlock()
	return p
}

func (b *balloonNode) Info(_ context.Context, o identity.Owner) (balloons.PodInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pods[o.Pod], nil
}

// Confirm is Info: this fake API server has no cache to bypass.
func (b *balloonNode) Confirm(ctx context.Context, o identity.Owner) (balloons.PodInfo, error) {
	return b.Info(ctx, o)
}

// Evict is the fake Eviction API: the pod's process is killed (its grace period is
// 0 here) and, as kubelet and the plugin would, its state directory goes.
func (b *balloonNode) Evict(_ context.Context, o identity.Owner) error {
	b.mu.Lock()
	p := b.procs[o.Pod]
	delete(b.pods, o.Pod)
	b.evicted = append(b.evicted, o.Pod)
	b.mu.Unlock()
	if p != nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
	return os.RemoveAll(filepath.Join(statedir.Containers(b.stateDir), o.Pod))
}

// startAgent runs a fresh controller (no memory of any earlier one).
func (b *balloonNode) startAgent() {
	pol := balloon.Policy{Window: 5 * time.Second, Settle: 300 * time.Millisecond, MarginFraction: 0.1, MinFloorBytes: MiB, WaitMS: 3000}
	c := &balloons.Controller{StateDir: b.stateDir, Policy: pol, Pods: b, Evictor: b,
		Owner: func(key string) (identity.Owner, bool) {
			b.mu.Lock()
			defer b.mu.Unlock()
			_, ok := b.pods[key]
			return identity.Owner{Namespace: "ns", Pod: key, Container: "main"}, ok
		},
		Physical: func(string) (uint64, bool) { return e2ePhysical, true },
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)), EvictRetry: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel, b.done = cancel, make(chan struct{})
	go func() { defer close(b.done); c.Run(ctx, 20*time.Millisecond) }()
	b.t.Cleanup(b.killAgent)
}

func (b *balloonNode) killAgent() {
	if b.cancel != nil {
		b.cancel()
		<-b.done
		b.cancel = nil
	}
}

func (b *balloonNode) capOf(key string) (uint64, region.Balloon) {
	b.t.Helper()
	l, err := region.OpenLimits(filepath.Join(statedir.Containers(b.stateDir), key, statedir.LimitsFile))
	if err != nil {
		b.t.Fatal(err)
	}
	defer l.Close()
	bal, _ := l.Balloon(b.uuids[0])
	return l.Devices()[0].MemLimitBytes, bal
}

func (b *balloonNode) eventually(what string, cond func() bool) {
	b.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			b.t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBalloonEndToEnd: an owner settles and is inflated for a borrower, the borrower
// runs in the reclaimed memory, the owner grows back, the borrower is evicted and
// the owner's allocation succeeds within the wait bound. With restart, the node
// agent is killed after inflating and a new one is started only once the owner is
// already waiting.
func TestBalloonEndToEnd(t *testing.T) {
	for _, restart := range []bool{false, true} {
		name := "agent runs throughout"
		if restart {
			name = "agent killed and restarted"
		}
		t.Run(name, func(t *testing.T) { balloonEndToEnd(t, restart) })
	}
}

func balloonEndToEnd(t *testing.T, restart bool) {
	b := newBalloonNode(t)
	b.startAgent()
	owner := b.container("mem-owner", 48*MiB, balloons.PodInfo{OptedIn: true, Priority: 100})
	owner.ok("alloc a 16777216")
	time.Sleep(400 * time.Millisecond) // settle
	if c, bal := b.capOf("mem-owner"); c != 48*MiB || bal.Inflated() {
		t.Fatalf("owner inflated with no borrower: cap %d %+v", c, bal)
	}
	borrower := b.container("mem-borrower", 40*MiB, balloons.PodInfo{Borrower: true, Priority: 1})
	b.eventually("owner inflated", func() bool { _, bal := b.capOf("mem-owner"); return bal.Inflated() })
	capLowered, bal := b.capOf("mem-owner")
	if bal.CeilingBytes != 48*MiB || capLowered >= 48*MiB || capLowered < 16*MiB || capLowered+40*MiB > e2ePhysical {
		t.Fatalf("owner cap %d MiB, balloon %+v: want a floor between its 16 MiB use and what fits beside the borrower", capLowered/MiB, bal)
	}
	borrower.ok("alloc x 33554432") // runs inside the reclaimed memory
	if restart {
		b.killAgent()
	}
	start := time.Now()
	res := make(chan string, 1)
	go func() {
		out, err := owner.send("alloc g 25165824") // grows back: 16 + 24 MiB > the lowered cap
		if err != nil {
			out = err.Error()
		}
		res <- out
	}()
	if restart {
		time.Sleep(500 * time.Millisecond) // the owner waits with no agent at all
		b.startAgent()
	}
	var out string
	select {
	case out = <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("owner allocation never returned")
	}
	took := time.Since(start)
	if !strings.HasPrefix(out, "ok") {
		t.Fatalf("owner allocation after %v: %q (stderr: %s)", took, out, owner.stderr)
	}
	if took > 3*time.Second {
		t.Errorf("owner waited %v, past its 3 s bound", took)
	}
	b.mu.Lock()
	evicted := append([]string(nil), b.evicted...)
	b.mu.Unlock()
	if len(evicted) != 1 || evicted[0] != "mem-borrower" {
		t.Fatalf("evicted %v, want the borrower", evicted)
	}
	if c, bal := b.capOf("mem-owner"); c != 48*MiB || bal.Inflated() {
		t.Fatalf("owner not back at its ceiling: %d MiB %+v", c/MiB, bal)
	}
	r, err := region.OpenRegion(filepath.Join(statedir.Containers(b.stateDir), "mem-owner", statedir.RegionFile))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w := r.BalloonWait(0)
	if w.Waits() != 1 || w.WaitsGranted != 1 || w.WaitsExpired != 0 {
		t.Errorf("owner waits %+v: want one, granted", w)
	}
	if u := r.Usage().UsedBytes[0]; u != 40*MiB {
		t.Errorf("owner charged %d MiB, want 40", u/MiB)
	}
	t.Logf("owner waited %v for its memory (lowered cap %d MiB)", took, capLowered/MiB)
	owner.exit()
}
