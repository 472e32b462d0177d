// Command tessera-demo is `make demo`: the scenario of docs/architecture.md
// on a real node when it can start one (root: package gpunode), its reduced
// form otherwise (package demo), then the scheduler simulator on the openb
// trace. It prints a readable account and leaves nothing running.
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
	"github.com/tessera-gpu/tessera/test/e2e/gpunode"
)

func main() {
	root := flag.String("root", ".", "repository root (lib/, bin/, build/)")
	openbDir := flag.String("openb-dir", os.Getenv("OPENB_DIR"), "openb directory with fgd_expected_results/ (optional)")
	seeds := flag.String("seeds", "42-51", "simulator seeds")
	reduced := flag.Bool("reduced", false, "run the reduced form even where a real node could start")
	available := flag.Bool("real-node-available", false, "exit 0 when this build has the real-node scenario")
	flag.Parse()
	if *available {
		return // this build has package gpunode
	}
	abs, err := filepath.Abs(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	cfg := config(abs, *openbDir, *seeds, *reduced)
	if *reduced {
		os.Exit(run(cfg))
	}
	// As root: again inside the real node's network namespace (and cleaned
	// up after); otherwise run is called here.
	os.Exit(gpunode.Main(func() int { return run(cfg) }))
}

func config(root, openbDir, seeds string, reduced bool) demo.Config {
	return demo.Config{
		Real:         demo.GPUNode{Options: gpunode.Options{RepoRoot: root}},
		ForceReduced: reduced,
		Reduced: demo.Options{
			LibDir:   filepath.Join(root, "lib"),
			Cudash:   filepath.Join(root, "build", "hook", "cudash"),
			Monitor:  filepath.Join(root, "bin", "vgpu-monitor"),
			Progress: os.Stdout,
		},
		OpenB: &demo.OpenBOptions{
			Scheduler: filepath.Join(root, "bin", "cluster-scheduler"),
			Shipped:   filepath.Join(root, "internal", "placement", "testdata", "openb"),
			OpenBDir:  openbDir,
			Seeds:     seeds,
		},
	}
}

func run(cfg demo.Config) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	acc, err := demo.Run(ctx, cfg)
	if acc != nil {
		acc.Print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		return 1
	}
	// The claim that nothing is left running is checked, not assumed.
	left, err := demo.LiveChildren()
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo: cannot list what is left running:", err)
		return 1
	case len(left) > 0:
		fmt.Fprintf(os.Stderr, "demo failed: processes left running: %v\n", left)
		return 1
	}
	fmt.Println("demo: nothing left running (no child process of the demo is alive)")
	return 0
}
