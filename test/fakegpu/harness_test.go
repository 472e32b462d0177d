package fakegpu_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// The node every test simulates unless it says otherwise.
const testDevices = "Test GPU:1024:10;Other:2048:20"

const MiB = 1 << 20

var (
	fgtestOnce sync.Once
	fgtestBin  string
	fgtestErr  error
)

// libDir finds (or builds, once) the simulated GPU libraries.
func libDir(t *testing.T) string {
	t.Helper()
	dir, err := fakegpu.LibDir()
	if err != nil {
		t.Fatalf("simulated GPU libraries: %v", err)
	}
	return dir
}

// fgtest builds tests/fgtest_*.c once, linked against the simulated libcuda.
func fgtest(t *testing.T) string {
	t.Helper()
	lib := libDir(t)
	fgtestOnce.Do(func() {
		src, err := fakegpu.SourceDir()
		if err != nil {
			fgtestErr = err
			return
		}
		dir, err := os.MkdirTemp("", "fgtest")
		if err != nil {
			fgtestErr = err
			return
		}
		files, _ := filepath.Glob(filepath.Join(src, "tests", "fgtest_*.c"))
		bin := filepath.Join(dir, "fgtest")
		args := append([]string{"-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE",
			"-I" + filepath.Join(src, "..", "..", "shim", "cuda-hook", "include"), "-o", bin}, files...)
		args = append(args, "-L"+lib, "-lcuda", "-ldl", "-pthread")
		cc := os.Getenv("CC")
		if cc == "" {
			cc = "gcc"
		}
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			fgtestErr = fmt.Errorf("build fgtest: %v\n%s", err, out)
			return
		}
		fgtestBin = bin
	})
	if fgtestErr != nil {
		t.Fatal(fgtestErr)
	}
	return fgtestBin
}

// node is one simulated node: its own state file and device list.
type node struct {
	t       *testing.T
	state   string
	devices string
	extra   []string
}

func newNode(t *testing.T) *node {
	return &node{t: t, state: filepath.Join(t.TempDir(), "state"), devices: testDevices}
}

func (n *node) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FAKEGPU_") && !strings.HasPrefix(kv, "LD_LIBRARY_PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "LD_LIBRARY_PATH="+libDir(n.t), "FAKEGPU_STATE="+n.state, "FAKEGPU_DEVICES="+n.devices)
	return append(env, n.extra...)
}

// run runs one fgtest scenario to completion.
func (n *node) run(args ...string) (stdout, stderr string, err error) {
	n.t.Helper()
	cmd := exec.Command(fgtest(n.t), args...)
	cmd.Env = n.env()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		n.t.Fatalf("fgtest %v: hung (killed after 60 s)\n%s", args, o.String())
	}
	return o.String(), e.String(), err
}

// proc is a long-running fgtest scenario (hold, busy, allocloop).
type proc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan string
	prelude []string // what it printed before "ready"
}

// start runs a scenario and waits for it to print "ready".
func (n *node) start(args ...string) *proc {
	n.t.Helper()
	return n.startWrapped(nil, args...)
}

// startWrapped is start with the scenario run under a wrapper command (e.g.
// unshare), wrap[0] its program.
func (n *node) startWrapped(wrap []string, args ...string) *proc {
	n.t.Helper()
	argv := append(append(append([]string{}, wrap...), fgtest(n.t)), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = n.env()
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		n.t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		n.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	p := &proc{cmd: cmd, stdin: stdin, lines: make(chan string, 64)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	n.t.Cleanup(func() { p.kill() })
	p.prelude = p.expect(n.t, "ready")
	return p
}

// hold starts a process holding bytes on dev; returns it and its cuMemAlloc_v2 result.
func (n *node) hold(dev int, bytes uint64) (*proc, string) {
	n.t.Helper()
	p := n.start("hold", fmt.Sprint(dev), fmt.Sprint(bytes))
	for _, l := range p.prelude {
		if strings.HasPrefix(l, "alloc ") {
			return p, strings.TrimPrefix(l, "alloc ")
		}
	}
	n.t.Fatalf("hold printed no alloc result: %q", p.prelude)
	return nil, ""
}

// expect waits for a line equal to want, returning the lines before it.
func (p *proc) expect(t *testing.T, want string) []string {
	t.Helper()
	var seen []string
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("process exited before %q; output %q", want, seen)
			}
			if l == want {
				return seen
			}
			seen = append(seen, l)
		case <-timeout:
			t.Fatalf("no %q within 30 s; output %q", want, seen)
		}
	}
}

// expectPrefix waits for a line starting with prefix and returns it.
func (p *proc) expectPrefix(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("process exited before a %q line", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("no %q line within 30 s", prefix)
		}
	}
}

// stop closes stdin (the scenario exits normally) and waits.
func (p *proc) stop() {
	_ = p.stdin.Close()
	_ = p.cmd.Wait()
}

func (p *proc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }
