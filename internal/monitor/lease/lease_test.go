package lease

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestOneHolderAtATime(t *testing.T) {
	dir := t.TempDir()
	a := &Lease{Dir: dir, Log: quiet(), Self: Holder{Pod: "monitor-a", Node: "n"}}
	b := &Lease{Dir: dir, Log: quiet(), Self: Holder{Pod: "monitor-b", Node: "n"}}
	if ok, err := a.TryAcquire(); !ok || err != nil {
		t.Fatalf("a: %v %v", ok, err)
	}
	if ok, err := b.TryAcquire(); ok || err != nil {
		t.Fatalf("b took a held lease: %v %v", ok, err)
	}
	if h, ok := ReadHolder(dir).(Holder); !ok || h.Pod != "monitor-a" || h.PID != os.Getpid() {
		t.Errorf("holder file: %+v", ReadHolder(dir))
	}
	a.Release()
	if a.Held() {
		t.Error("held after Release")
	}
	if ok, err := b.TryAcquire(); !ok || err != nil || !b.Held() {
		t.Fatalf("b after a released: %v %v", ok, err)
	}
	if h, _ := ReadHolder(dir).(Holder); h.Pod != "monitor-b" {
		t.Errorf("holder file after takeover: %+v", ReadHolder(dir))
	}
	b.Release()
}

// TestHolderKilledStandbyTakesOver: the lease of a monitor that dies without
// releasing (SIGKILL) passes to the standby within a retry interval: the
// kernel drops a flock with its last descriptor.
func TestHolderKilledStandbyTakesOver(t *testing.T) {
	if dir := os.Getenv("TESSERA_LEASE_HELPER"); dir != "" {
		holdForever(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHolderKilledStandbyTakesOver$")
	cmd.Env = append(os.Environ(), "TESSERA_LEASE_HELPER="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "held" {
		t.Fatalf("helper: %q %v", line, err)
	}
	standby := &Lease{Dir: dir, Log: quiet()}
	if ok, _ := standby.TryAcquire(); ok {
		t.Fatal("took the lease another process holds")
	}
	done := make(chan struct{})
	go func() {
		standby.Run(t.Context(), 20*time.Millisecond)
		close(done)
	}()
	time.Sleep(100 * time.Millisecond)
	if standby.Held() {
		t.Fatal("standby acts while the holder lives")
	}
	killed := time.Now()
	cmd.Process.Kill()
	cmd.Wait()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("standby did not take over within 30 s of the holder's death")
	}
	if !standby.Held() {
		t.Fatal("Run returned without the lease")
	}
	t.Logf("takeover %v after the holder was killed", time.Since(killed))
	standby.Release()
}

func holdForever(dir string) {
	l := &Lease{Dir: dir, Log: quiet()}
	if ok, err := l.TryAcquire(); !ok || err != nil {
		os.Exit(3)
	}
	os.Stdout.WriteString("held\n")
	time.Sleep(time.Hour)
}

// TestRunStopsWithItsContext: a standby that never gets the lease returns
// when its context ends.
func TestRunStopsWithItsContext(t *testing.T) {
	dir := t.TempDir()
	holder := &Lease{Dir: dir, Log: quiet()}
	if ok, _ := holder.TryAcquire(); !ok {
		t.Fatal("no lease")
	}
	defer holder.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	standby := &Lease{Dir: dir, Log: quiet()}
	standby.Run(ctx, 10*time.Millisecond)
	if standby.Held() {
		t.Fatal("standby holds a held lease")
	}
}

// TestWriteFileAtomicKeepsTheOldFileOnFailure: a write that fails leaves the
// previous content and no temporary file (ENOSPC on a real full filesystem:
// agent TestFullStateFilesystem).
func TestWriteFileAtomicKeepsTheOldFileOnFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, HolderFile)
	if err := WriteFileAtomic(path, Holder{Pod: "old"}); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, "gone", HolderFile), Holder{Pod: "new"}); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
	var h Holder
	data, _ := os.ReadFile(path)
	if err := json.Unmarshal(data, &h); err != nil || h.Pod != "old" {
		t.Errorf("old file: %q %v", data, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("files left: %v", entries)
	}
}
