// Command tessera-demo is `make demo`: the scenario of docs/architecture.md
// on a real node as root, its reduced form otherwise, then the scheduler
// simulator on the openb trace. It prints a readable account and leaves
// nothing running.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/tessera-gpu/tessera/test/e2e/demo"
)

func main() {
	root := flag.String("root", ".", "repository root (lib/, bin/, build/)")
	openbDir := flag.String("openb-dir", os.Getenv("OPENB_DIR"), "openb directory with fgd_expected_results/ (optional)")
	seeds := flag.String("seeds", "42-51", "simulator seeds")
	available := flag.Bool("real-node-available", false, "exit 0 when this build has the real-node scenario, 1 otherwise")
	flag.Parse()
	if *available {
		if realNode() == nil {
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	r, err := filepath.Abs(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	cfg := demo.Config{
		EUID: os.Geteuid(),
		Real: realNode(),
		Reduced: demo.Options{
			LibDir:   filepath.Join(r, "lib"),
			Cudash:   filepath.Join(r, "build", "hook", "cudash"),
			Monitor:  filepath.Join(r, "bin", "vgpu-monitor"),
			Progress: os.Stdout,
		},
		OpenB: &demo.OpenBOptions{
			Scheduler: filepath.Join(r, "bin", "cluster-scheduler"),
			Shipped:   filepath.Join(r, "internal", "placement", "testdata", "openb"),
			OpenBDir:  *openbDir,
			Seeds:     *seeds,
		},
	}
	acc, err := demo.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
	acc.Print(os.Stdout)
}

// realNode is the real-node scenario; this tree has none yet.
func realNode() demo.RealNode { return nil }
