package hooktest

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestBadInputFailsClosed: every kind of bad configuration yields one clear line on
// stderr naming what is wrong, and GPU allocations are refused with
// CUDA_ERROR_NOT_INITIALIZED; the process never crashes and never runs uncapped.
func TestBadInputFailsClosed(t *testing.T) {
	n := newNode(t, "")
	good := n.container(t, map[int]uint64{0: 64 * MiB})
	dir := t.TempDir()
	damaged := func(name, from string, f func([]byte) []byte) string {
		img, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, f(bytes.Clone(img)), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	truncate := func(b []byte) []byte { return b[:100] }
	magic := func(b []byte) []byte { b[0] ^= 0xff; return b }
	version := func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 99); return b }
	size := func(b []byte) []byte { binary.LittleEndian.PutUint32(b[12:], 4096); return b }
	devices := func(b []byte) []byte { binary.LittleEndian.PutUint32(b[24:], 17); return b }
	fifo := filepath.Join(dir, "fifo") // open(2) of a FIFO without a writer would block
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	region := func(p string) []string { return []string{"TESSERA_REGION=" + p, "TESSERA_LIMITS=" + good.limits} }
	limits := func(p string) []string { return []string{"TESSERA_REGION=" + good.region, "TESSERA_LIMITS=" + p} }
	cases := []struct {
		name string
		env  []string
		want string // in the one stderr line
	}{
		{"region missing", region(filepath.Join(dir, "nope")), "No such file"},
		{"region truncated", region(damaged("r-trunc", good.region, truncate)), "truncated"},
		{"region wrong magic", region(damaged("r-magic", good.region, magic)), "wrong magic"},
		{"region wrong version", region(damaged("r-version", good.region, version)), "ABI version 99"},
		{"limits missing", limits(filepath.Join(dir, "nope")), "No such file"},
		{"limits truncated", limits(damaged("l-trunc", good.limits, truncate)), "truncated"},
		{"limits wrong magic", limits(damaged("l-magic", good.limits, magic)), "wrong magic"},
		{"limits wrong version", limits(damaged("l-version", good.limits, version)), "ABI version 99"},
		{"limits is a region", limits(good.region), "wrong magic"},
		{"region wrong size field", region(damaged("r-size", good.region, size)), "size field 4096"},
		{"limits wrong size field", limits(damaged("l-size", good.limits, size)), "size field 4096"},
		{"limits device count", limits(damaged("l-count", good.limits, devices)), "device_count 17"},
		{"region is a directory", region(dir), "Is a directory"},
		{"region is a FIFO", region(fifo), "not a regular file"},
		{"limits is a FIFO", limits(fifo), "not a regular file"},
		{"core limits wrong magic", append(limits(good.limits), "TESSERA_CORE_LIMITS="+good.region), "wrong magic"},
		{"reserve not a number", append(limits(good.limits), "TESSERA_CTX_RESERVE_MIB=lots"), "TESSERA_CTX_RESERVE_MIB"},
		{"reserve negative", append(limits(good.limits), "TESSERA_CTX_RESERVE_MIB=-5"), "TESSERA_CTX_RESERVE_MIB"},
		{"log level unknown", append(limits(good.limits), "TESSERA_LOG=loud"), "TESSERA_LOG"},
		{"limits without region", []string{"TESSERA_LIMITS=" + good.limits}, "TESSERA_REGION"},
		{"empty region path", []string{"TESSERA_REGION=", "TESSERA_LIMITS=" + good.limits}, "TESSERA_REGION"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := n.run(t, tc.env, "dlsym", true)
			p.fails("init", "CUDA_ERROR_NOT_INITIALIZED")
			p.fails("alloc a 1048576", "CUDA_ERROR_NOT_INITIALIZED")
			p.fails("managed b 1048576", "CUDA_ERROR_NOT_INITIALIZED")
			p.fails("info", "CUDA_ERROR_NOT_INITIALIZED")
			if out := p.do("nvml 0"); out != "err 1 NVML" {
				t.Errorf("nvml: %q, want NVML_ERROR_UNINITIALIZED", out)
			}
			p.exit()
			lines := strings.Split(strings.TrimSpace(p.stderr.String()), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) || !strings.Contains(lines[0], "error") {
				t.Fatalf("stderr %q: want one error line mentioning %q", p.stderr, tc.want)
			}
		})
	}
}

// TestPassThrough: without TESSERA_LIMITS, with a device the limits file does not
// list, or with a device whose cap is 0, nothing is capped (the last is still
// accounted in the region, so the node sees it).
func TestPassThrough(t *testing.T) {
	n := newNode(t, "NVIDIA H200:143771:132;NVIDIA H200:143771:132")
	p := n.run(t, nil, "direct", true)
	p.ok("init")
	p.ok("ctx 0")
	p.ok("alloc a 107374182400") // 100 GiB: only the physical size limits it
	if info := p.ok("info"); fieldU(t, info, "total") != 143771*MiB {
		t.Fatalf("info without limits: %s", info)
	}
	p.exit()

	c := n.container(t, map[int]uint64{1: 0}) // device 1 listed, uncapped; device 0 not listed
	q := c.ready("direct")
	// A GPU the limits file does not list is refused, not passed through: the
	// container was given no memory there (kubelet may have put another of its
	// resources on it), and passing it through would leave it uncapped.
	q.fails("alloc a 1048576", "CUDA_ERROR_OUT_OF_MEMORY")
	q.fails("vmm h 0 2097152", "CUDA_ERROR_OUT_OF_MEMORY")
	q.ok("vmmhost hh 2097152") // host memory is never charged
	q.ok("ctx 1")
	q.ok("alloc b 107374182400")
	u := c.usage()
	if u.UsedBytes[0] != 100<<30 { // region index 0 is the first listed device: GPU 1
		t.Fatalf("uncapped listed device not accounted: %+v", u.UsedBytes[:2])
	}
	q.exit()
}

// TestNoCUDAProgramIsUntouched: the hook initialises lazily, so a program that never
// calls CUDA pays nothing and sees nothing, even with a broken configuration.
func TestNoCUDAProgramIsUntouched(t *testing.T) {
	cmd := exec.Command("sh", "-c", "echo hello")
	cmd.Env = []string{"LD_PRELOAD=" + filepath.Join(libDir, "libtessera-hook.so"),
		"TESSERA_REGION=/nonexistent", "TESSERA_LIMITS=/nonexistent", "TESSERA_LOG=debug", "PATH=" + os.Getenv("PATH")}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || string(out) != "hello\n" || stderr.Len() != 0 {
		t.Fatalf("out %q err %v stderr %q", out, err, stderr.String())
	}
}
