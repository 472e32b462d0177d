package demo

import (
	"context"
	"fmt"
	"io"
)

// RealNode runs the scenario on a real node (kubelet, containerd, the
// tessera chart installed with Helm) and accounts for it. It needs root.
type RealNode interface {
	Run(ctx context.Context, progress io.Writer) (*Account, error)
}

// Config is what `make demo` runs.
type Config struct {
	Reduced Options
	// Real is the real-node scenario; nil when this tree has none.
	Real RealNode
	// EUID is the effective user ID (os.Geteuid; a parameter for tests).
	EUID int
	// OpenB runs the scheduler simulator; nil skips it.
	OpenB *OpenBOptions
}

// Run runs the real-node scenario when it can (root and a scenario), else
// says why not and runs the reduced form; then the simulator.
func Run(ctx context.Context, c Config) (*Account, error) {
	progress := c.Reduced.Progress
	if progress == nil {
		progress = io.Discard
	}
	var acc *Account
	var err error
	switch why := whyReduced(c); why {
	case "":
		fmt.Fprintln(progress, "demo: running as root: the scenario runs on a real node (kubelet, containerd, Helm)")
		if acc, err = c.Real.Run(ctx, progress); err != nil {
			return nil, fmt.Errorf("real node: %w", err)
		}
		acc.Form = "real node"
	default:
		fmt.Fprintf(progress, "demo: %s\n", why)
		if acc, err = Reduced(ctx, c.Reduced); err != nil {
			return nil, fmt.Errorf("reduced form: %w", err)
		}
		acc.Why = why
	}
	if c.OpenB != nil {
		fmt.Fprintln(progress, "demo: replaying the openb trace with the scheduler simulator (fgd and tessera)")
		if acc.OpenB, err = RunOpenB(ctx, *c.OpenB); err != nil {
			return nil, err
		}
	}
	return acc, nil
}

// whyReduced says why the real node cannot run ("" when it can).
func whyReduced(c Config) string {
	switch {
	case c.EUID != 0:
		return fmt.Sprintf("not root (euid %d): a real node needs root (a network namespace, kubelet's cgroups and mounts, containerd), so this is the reduced form: the same components as processes, without kubelet and containers", c.EUID)
	case c.Real == nil:
		return "root, but this tree has no real-node scenario yet: the reduced form runs instead"
	}
	return ""
}
