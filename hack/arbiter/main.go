// Command arbiter sets up gpu-core allocations the way the device plugin does
// (core-limits and core-region per tenant) in a scratch state directory and
// runs the node agent's compute arbiter over them until interrupted. It is
// for hack/gpu-check.sh, which runs real CUDA tenants under the hook without a
// Kubernetes node.
//
//	arbiter -state DIR -uuid GPU-... -tenant NAME:PCT:POLICY:PRIORITY [-tenant ...]
//
// It prints, per tenant, "NAME <core-limits path> <core-region path>", then
// "ready", and runs until SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/arbiter"
	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/statedir"
)

type tenants []string

func (t *tenants) String() string     { return strings.Join(*t, ",") }
func (t *tenants) Set(v string) error { *t = append(*t, v); return nil }

func main() {
	state := flag.String("state", "", "scratch state directory")
	uuid := flag.String("uuid", "", "GPU UUID")
	var ts tenants
	flag.Var(&ts, "tenant", "NAME:PCT:POLICY:PRIORITY (repeatable)")
	flag.Parse()
	if err := run(*state, *uuid, ts); err != nil {
		fmt.Fprintln(os.Stderr, "arbiter:", err)
		os.Exit(1)
	}
}

func run(state, uuid string, ts tenants) error {
	if state == "" || uuid == "" || len(ts) == 0 {
		return fmt.Errorf("-state, -uuid and at least one -tenant are required")
	}
	for _, spec := range ts {
		f := strings.Split(spec, ":")
		if len(f) != 4 {
			return fmt.Errorf("tenant %q: want NAME:PCT:POLICY:PRIORITY", spec)
		}
		pct, err := strconv.ParseUint(f[1], 10, 32)
		if err != nil {
			return fmt.Errorf("tenant %q: share: %w", spec, err)
		}
		pol, err := region.ParsePolicy(f[2])
		if err != nil {
			return fmt.Errorf("tenant %q: %w", spec, err)
		}
		prio, err := strconv.ParseInt(f[3], 10, 32)
		if err != nil {
			return fmt.Errorf("tenant %q: priority: %w", spec, err)
		}
		e := statedir.Entry{Key: "core-" + f[0], Kind: "core", Dir: filepath.Join(statedir.Containers(state), "core-"+f[0])}
		if err := os.MkdirAll(e.Dir, 0o755); err != nil {
			return err
		}
		if err := region.WriteLimits(e.CoreLimits(), []region.DeviceLimit{{UUID: uuid, CoreLimitPct: uint32(pct), Policy: pol, Priority: int32(prio)}}); err != nil {
			return err
		}
		if err := region.CreateRegion(e.CoreRegion()); err != nil {
			return err
		}
		fmt.Println(f[0], e.CoreLimits(), e.CoreRegion())
	}
	d := configv1.DefaultMonitor().Arbiter
	a := &arbiter.Arbiter{StateDir: state, Tick: d.Tick.Duration, Rescan: 100 * time.Millisecond,
		Log:    slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Policy: arbiter.Policy{Quantum: d.Quantum.Duration, IdleAfter: d.IdleAfter.Duration, PriorityHold: d.PriorityHold.Duration}}
	a.Step(time.Now(), arbiter.Monotonic())
	fmt.Println("ready")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	a.Run(ctx)
	return nil
}
