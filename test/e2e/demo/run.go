package demo

import (
	"context"
	"fmt"
	"io"
)

// RealNode runs the scenario on a real node (kubelet, containerd, the
// tessera chart installed with Helm) and accounts for it (GPUNode).
type RealNode interface {
	// Unavailable says why the node cannot start here ("" when it can):
	// it needs root.
	Unavailable() string
	// Run runs the scenario; on a failure, the account so far and the error.
	Run(ctx context.Context, progress io.Writer) (*Account, error)
}

// Config is what `make demo` runs.
type Config struct {
	Reduced Options
	// Real is the real-node scenario; nil when this build has none.
	Real RealNode
	// ForceReduced runs the reduced form even where the real node could run.
	ForceReduced bool
	// OpenB runs the scheduler simulator; nil skips it.
	OpenB *OpenBOptions
}

// Run runs the real-node scenario when it can, else says why not and runs
// the reduced form; then the simulator. A failed real node returns its
// account so far with the error (no silent fallback).
func Run(ctx context.Context, c Config) (*Account, error) {
	progress := c.Reduced.Progress
	if progress == nil {
		progress = io.Discard
	}
	var acc *Account
	var err error
	switch why := whyReduced(c); why {
	case "":
		fmt.Fprintln(progress, "demo: the scenario runs on a real node (kubelet, containerd, tessera installed with Helm)")
		if acc, err = c.Real.Run(ctx, progress); err != nil {
			return acc, fmt.Errorf("real node: %w", err)
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
			return acc, fmt.Errorf("openb simulator: %w", err) // the scenario's account still stands
		}
	}
	return acc, nil
}

// whyReduced says why the real node does not run ("" when it does).
func whyReduced(c Config) string {
	const reduced = "; this is the reduced form: the same components as processes, the demo in kubelet's place, no containers"
	switch {
	case c.ForceReduced:
		return "the reduced form was asked for (-reduced)" + reduced
	case c.Real == nil:
		return "this build has no real-node scenario" + reduced
	}
	if why := c.Real.Unavailable(); why != "" {
		return why + reduced
	}
	return ""
}
