package arbiterproc

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/arbiter"
)

// parentCheck is how often the arbiter's process looks whether its parent
// is still the supervisor that started it (the parent-death signal is the
// first line; this catches a parent that died before it was armed).
const parentCheck = 100 * time.Millisecond

// MainIfSubcommand runs the arbiter's process and exits when this program
// was started as it (os.Args[1] is Subcommand), and returns otherwise.
// vgpu-monitor's main calls it first, and so does the TestMain of a test
// binary whose agents start the process from /proc/self/exe.
func MainIfSubcommand() {
	if len(os.Args) < 2 || os.Args[1] != Subcommand {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := RunChild(ctx, os.Args[2:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vgpu-monitor:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// RunChild is the arbiter's process (`vgpu-monitor arbiter ARGS`): it runs
// the control loop over the state directory until ctx ends (SIGTERM) or its
// parent is gone.
func RunChild(ctx context.Context, args []string) error {
	cfg, err := Parse(args)
	if err != nil {
		return err
	}
	log := configv1.LogConfig{Level: cfg.LogLevel, Format: cfg.LogFormat}.Logger("tessera-arbiter").With("pid", os.Getpid())
	if ppid := os.Getppid(); ppid != cfg.ParentPID {
		return fmt.Errorf("%s: the supervisor (pid %d) is gone: parent is %d", Subcommand, cfg.ParentPID, ppid)
	}
	// No collection in steady state: a step allocates nothing, and a
	// stop-the-world would be a gap in the loop. The limit is when it
	// collects after all (each rescan allocates a little).
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(cfg.MemoryLimit)
	// The loop holds one P; one more serves signals and the parent check.
	runtime.GOMAXPROCS(2)
	st, err := openStatus()
	if err != nil {
		return err
	}
	defer st.close()
	if cfg.RealtimePriority > 0 {
		if got, err := raiseThreads(cfg.RealtimePriority); err != nil {
			log.Warn("arbiter process: priority not raised (needs CAP_SYS_NICE); grants may come late on a busy node", "err", err)
		} else {
			log.Info("arbiter process: every thread raised", "scheduling", got)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	publishGC(st.GC(), make([]metrics.Sample, len(gcMetrics)))
	go watchParent(ctx, cancel, cfg.ParentPID, func(ppid int) {
		log.Warn("arbiter process: the supervisor is gone; exiting", "supervisor", cfg.ParentPID, "parent", ppid)
	}, st.GC())
	a := &arbiter.Arbiter{StateDir: cfg.StateDir, Policy: cfg.Policy, Tick: cfg.Tick, HandOverPoll: cfg.HandOverPoll, Rescan: cfg.Rescan,
		RealtimePriority: cfg.RealtimePriority, Raised: true, Log: log, Stats: st.Stats()}
	log.Info("arbiter process running", "stateDir", cfg.StateDir, "tick", cfg.Tick, "supervisor", cfg.ParentPID,
		"memoryLimit", cfg.MemoryLimit)
	a.Run(ctx)
	if ppid := os.Getppid(); ppid != cfg.ParentPID {
		return fmt.Errorf("%s: the supervisor (pid %d) is gone", Subcommand, cfg.ParentPID)
	}
	return nil
}

// watchParent cancels once this process's parent is no longer pid; on the
// way it publishes what the collector did.
func watchParent(ctx context.Context, cancel func(), pid int, gone func(ppid int), gc *gcWords) {
	t := time.NewTicker(parentCheck)
	defer t.Stop()
	samples := make([]metrics.Sample, len(gcMetrics))
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if ppid := unix.Getppid(); ppid != pid {
				gone(ppid)
				cancel()
				return
			}
			publishGC(gc, samples)
		}
	}
}

// gcMetrics are what publishGC reads, in gcWords' order.
var gcMetrics = [...]string{"/gc/cycles/total:gc-cycles", "/gc/gogc:percent", "/gc/gomemlimit:bytes"}

// publishGC reads the collector's setting and work into gc (samples: a
// buffer of len(gcMetrics), reused so that this allocates nothing).
func publishGC(gc *gcWords, samples []metrics.Sample) {
	for i, name := range gcMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	value := func(i int) uint64 {
		if samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return samples[i].Value.Uint64()
	}
	gc.Cycles.Store(value(0))
	gc.Percent.Store(int64(value(1)))
	gc.MemoryLimit.Store(int64(value(2)))
}
