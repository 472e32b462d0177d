package tesserascheduler

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBinaryBuiltInThisCheckout: without TESSERA_CLUSTER_SCHEDULER, Binary
// builds this checkout's cluster-scheduler into the checkout's own build
// directory, not into the binary cache every checkout on the machine
// shares, where parallel sessions would run each other's scheduler.
func TestBinaryBuiltInThisCheckout(t *testing.T) {
	t.Setenv(BinaryEnv, "")
	cache := t.TempDir()
	t.Setenv("TESSERA_CACHE", cache)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	path, err := Binary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	root, err := mainModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if rel, err := filepath.Rel(root, path); err != nil || strings.HasPrefix(rel, "..") {
		t.Fatalf("cluster-scheduler built at %s, outside this checkout %s", path, root)
	}
	if left, _ := os.ReadDir(cache); len(left) > 0 {
		t.Fatalf("the build wrote into the shared binary cache %s: %v", cache, left)
	}
	// It is the scheduler: its usage names its commands.
	out, _ := exec.CommandContext(ctx, path, "--help").CombinedOutput()
	if !strings.Contains(string(out), "usage: cluster-scheduler") {
		t.Fatalf("%s --help: %s", path, out)
	}
}

// TestBinaryFromEnvironment: make's binary is used as it is; one that is
// not there is an error naming the variable.
func TestBinaryFromEnvironment(t *testing.T) {
	made := filepath.Join(t.TempDir(), "cluster-scheduler")
	if err := os.WriteFile(made, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(BinaryEnv, made)
	if path, err := Binary(context.Background()); err != nil || path != made {
		t.Fatalf("Binary() = %q, %v; want %s", path, err, made)
	}
	t.Setenv(BinaryEnv, made+"-missing")
	if _, err := Binary(context.Background()); err == nil || !strings.Contains(err.Error(), BinaryEnv) {
		t.Fatalf("a missing $%s: %v, want an error naming it", BinaryEnv, err)
	}
}
