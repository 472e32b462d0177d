package cudash

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// shellEnv builds cudash and the environment of a program under the hook on
// the simulated driver, with a memory cap of capBytes on device 0.
func shellEnv(t *testing.T, capBytes uint64) (cudash string, env []string) {
	t.Helper()
	lib, err := fakegpu.HookLibDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cudash = filepath.Join(dir, "cudash")
	if err := fakegpu.BuildCudash(cudash); err != nil {
		t.Fatal(err)
	}
	env = []string{
		"LD_LIBRARY_PATH=" + filepath.Join(lib, "fakegpu"),
		"FAKEGPU_STATE=" + filepath.Join(dir, "fakegpu.state"),
		"FAKEGPU_DEVICES=GPU Test:4096:10",
		"TESSERA_LOG=error",
	}
	probe, err := Start("probe", cudash, env)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := probe.Must("init"); err != nil {
		t.Fatal(err)
	}
	line, err := probe.Must("uuid 0")
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.Exit(); err != nil {
		t.Fatal(err)
	}
	uuid := strings.TrimPrefix(Field(line, 1), "uuid=")
	limits, regionPath := filepath.Join(dir, "limits"), filepath.Join(dir, "region")
	if err := region.WriteLimits(limits, []region.DeviceLimit{{UUID: uuid, MemLimitBytes: capBytes}}); err != nil {
		t.Fatal(err)
	}
	if err := region.CreateRegion(regionPath); err != nil {
		t.Fatal(err)
	}
	return cudash, append(env, HookEnv(lib), "TESSERA_LIMITS="+limits, "TESSERA_REGION="+regionPath)
}

// A shell started under the hook sees its cap, is refused past it with the
// CUDA error quoted by Must, and is killed with its process group.
func TestShellUnderHook(t *testing.T) {
	const mib = 1 << 20
	cudash, env := shellEnv(t, 256*mib)
	s, err := Start("capped", cudash, env, "-mode", "dlsym")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	for _, c := range []string{"init", "ctx 0"} {
		if _, err := s.Must(c); err != nil {
			t.Fatal(err)
		}
	}
	info, err := s.Must("info")
	if err != nil {
		t.Fatal(err)
	}
	if total := Value(info, "total"); total != 256*mib {
		t.Fatalf("under the hook the shell sees total %d, want its cap %d (%q)", total, 256*mib, info)
	}
	if _, err := s.Must("alloc a 200000000"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Must("alloc b 200000000")
	if err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_OUT_OF_MEMORY") || !strings.Contains(err.Error(), "capped") {
		t.Fatalf("an allocation past the cap: Must says %v, want the shell's name and CUDA_ERROR_OUT_OF_MEMORY", err)
	}
	// Do returns a refusal as an answer, not as an error.
	out, err := s.Do("alloc c 200000000")
	if err != nil || Field(out, 0) != "err" || Field(out, 2) != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Fatalf("Do: %q, %v; want the err answer", out, err)
	}
	pid := s.Pid()
	s.Kill()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("after Kill the shell (pid %d) is still there: %v", pid, err)
	}
	if _, err := s.Do("info"); err == nil {
		t.Fatal("a command to a killed shell succeeded")
	}
}

// Exit ends the shell cleanly; Send's answer is read by the next Do.
func TestShellSendAndExit(t *testing.T) {
	cudash, env := shellEnv(t, 0)
	s, err := Start("plain", cudash, env)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Must("init"); err != nil {
		t.Fatal(err)
	}
	if err := s.Send("uuid 0"); err != nil {
		t.Fatal(err)
	}
	first, err := s.Do("total 0")
	if err != nil || !strings.HasPrefix(Field(first, 1), "uuid=") {
		t.Fatalf("the Do after a Send read %q, %v; want the sent command's answer (uuid=...)", first, err)
	}
	second, err := s.Do("nvml 0")
	if err != nil || Value(second, "total") == 0 {
		t.Fatalf("the next Do read %q, %v; want the answer to total 0", second, err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Exit() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		s.Kill()
		t.Fatal("the shell did not exit on \"exit\"")
	}
}

func TestStartMissingProgram(t *testing.T) {
	_, err := Start("nobody", filepath.Join(t.TempDir(), "no-such-cudash"), os.Environ())
	if err == nil || !strings.Contains(err.Error(), "nobody") || !strings.Contains(err.Error(), "no-such-cudash") {
		t.Fatalf("Start of a missing program: %v; want an error naming the shell and the path", err)
	}
}

func TestFieldAndValue(t *testing.T) {
	line := "ok free=123 total=456 bad=x"
	if got := Value(line, "total"); got != 456 {
		t.Errorf("Value total = %d, want 456", got)
	}
	if got := Value(line, "free"); got != 123 {
		t.Errorf("Value free = %d, want 123", got)
	}
	if got := Value(line, "missing"); got != 0 {
		t.Errorf("Value missing = %d, want 0", got)
	}
	if got := Field(line, 1); got != "free=123" {
		t.Errorf("Field 1 = %q", got)
	}
	if got := Field(line, 9); got != "" {
		t.Errorf("Field 9 = %q, want empty", got)
	}
}
