package demo

import (
	"os/exec"
	"slices"
	"testing"
)

// TestLiveChildren: a running child is listed, a reaped one is not.
func TestLiveChildren(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kids, err := LiveChildren()
	if err != nil || !slices.Contains(kids, cmd.Process.Pid) {
		_ = cmd.Process.Kill()
		t.Fatalf("LiveChildren() = %v, %v; want it to list %d", kids, err, cmd.Process.Pid)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if kids, err := LiveChildren(); err != nil || slices.Contains(kids, cmd.Process.Pid) {
		t.Fatalf("after reaping: LiveChildren() = %v, %v", kids, err)
	}
}
