package hooktest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/test/fakegpu"
)

const MiB = 1 << 20

var (
	libDir string // holds libtessera-hook.so and fakegpu/
	cudash string // the test driver, built by TestMain
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// TestMain finds the libraries (TESSERA_LIB_DIR from make, or builds them) and
// compiles cudash against the simulated driver.
func TestMain(m *testing.M) {
	var err error
	if libDir, err = fakegpu.HookLibDir(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tmp, err := os.MkdirTemp("", "hooktest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cudash = filepath.Join(tmp, "cudash")
	if err := fakegpu.BuildCudash(cudash); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

// node is one simulated GPU machine: its devices and node-wide state file.
type node struct {
	dir     string
	devices string
	uuids   []string
}

func newNode(t testing.TB, devices string) *node {
	t.Helper()
	n := &node{dir: t.TempDir(), devices: devices}
	p := n.run(t, nil, "direct", false)
	p.ok("init")
	for i := 0; ; i++ {
		out := p.do(fmt.Sprintf("uuid %d", i))
		if !strings.HasPrefix(out, "ok ") {
			break
		}
		n.uuids = append(n.uuids, field(t, out, "uuid"))
	}
	p.exit()
	if len(n.uuids) == 0 {
		t.Fatal("the simulated GPU reports no devices")
	}
	return n
}

func (n *node) baseEnv() []string {
	env := []string{
		"LD_LIBRARY_PATH=" + filepath.Join(libDir, "fakegpu"),
		"FAKEGPU_STATE=" + filepath.Join(n.dir, "fakegpu.state"),
		"PATH=" + os.Getenv("PATH"),
	}
	if n.devices != "" {
		env = append(env, "FAKEGPU_DEVICES="+n.devices)
	}
	return env
}

// container is one container's pair of files, as the device plugin would write them.
type container struct {
	t              testing.TB
	n              *node
	region, limits string
	env            []string
}

// container creates a region and a limits file with these caps (bytes per device
// ordinal of the node; devices not named are not listed at all).
func (n *node) container(t testing.TB, caps map[int]uint64, env ...string) *container {
	t.Helper()
	dir := t.TempDir()
	c := &container{t: t, n: n, region: filepath.Join(dir, "region"), limits: filepath.Join(dir, "limits")}
	var devs []region.DeviceLimit
	for i := range n.uuids {
		if cap, ok := caps[i]; ok {
			devs = append(devs, region.DeviceLimit{UUID: n.uuids[i], MemLimitBytes: cap})
		}
	}
	if err := region.WriteLimits(c.limits, devs); err != nil {
		t.Fatal(err)
	}
	if err := region.CreateRegion(c.region); err != nil {
		t.Fatal(err)
	}
	c.env = append([]string{"TESSERA_REGION=" + c.region, "TESSERA_LIMITS=" + c.limits}, env...)
	return c
}

func (c *container) start(mode string) *proc { return c.n.run(c.t, c.env, mode, true) }

// ready starts a process with the driver initialised and device 0's primary
// context current.
func (c *container) ready(mode string) *proc {
	c.t.Helper()
	p := c.start(mode)
	p.ok("init")
	p.ok("ctx 0")
	return p
}

func (c *container) usage() region.Usage {
	c.t.Helper()
	r, err := region.OpenRegion(c.region)
	if err != nil {
		c.t.Fatal(err)
	}
	defer r.Close()
	return r.Usage()
}

// checkUsed reports an error unless the container uses want bytes on device 0.
func (c *container) checkUsed(want uint64, when string) bool {
	c.t.Helper()
	if got := c.usage().UsedBytes[0]; got != want {
		c.t.Errorf("%s: the container is charged %d bytes, want %d", when, got, want)
		return false
	}
	return true
}

// wantUsed is checkUsed that stops the test.
func (c *container) wantUsed(want uint64, when string) {
	c.t.Helper()
	if !c.checkUsed(want, when) {
		c.t.FailNow()
	}
}

func (c *container) setCap(dev int, bytes uint64) {
	c.t.Helper()
	l, err := region.OpenLimits(c.limits)
	if err != nil {
		c.t.Fatal(err)
	}
	defer l.Close()
	if err := l.SetMemLimit(c.n.uuids[dev], bytes); err != nil {
		c.t.Fatal(err)
	}
}

// proc is one cudash process: a command per line in, an answer per line out.
type proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	stderr *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (n *node) run(t testing.TB, env []string, mode string, hooked bool) *proc {
	t.Helper()
	cmd := exec.Command(cudash, "-mode", mode)
	cmd.Env = append(n.baseEnv(), env...)
	if hooked {
		cmd.Env = append(cmd.Env, "LD_PRELOAD="+filepath.Join(libDir, "libtessera-hook.so"))
	}
	p := &proc{t: t, cmd: cmd, lines: make(chan string, 16), stderr: &syncBuffer{}}
	cmd.Stderr = p.stderr
	var err error
	if p.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		p.in.Close()
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	return p
}

// send sends one command and returns the answer, or an error when cudash exits or
// does not answer within 30s (a hang). Safe to call from any goroutine.
func (p *proc) send(command string) (string, error) {
	if _, err := fmt.Fprintln(p.in, command); err != nil {
		return "", fmt.Errorf("%s: write: %w (stderr: %s)", command, err, p.stderr)
	}
	select {
	case line, ok := <-p.lines:
		if !ok {
			return "", fmt.Errorf("%s: cudash exited (stderr: %s)", command, p.stderr)
		}
		return line, nil
	case <-time.After(30 * time.Second):
		return "", fmt.Errorf("%s: no answer in 30s: hung (stderr: %s)", command, p.stderr)
	}
}

// do is send for the test goroutine: an error fails the test.
func (p *proc) do(command string) string {
	p.t.Helper()
	out, err := p.send(command)
	if err != nil {
		p.t.Fatal(err)
	}
	return out
}

func (p *proc) ok(command string) string {
	p.t.Helper()
	out := p.do(command)
	if !strings.HasPrefix(out, "ok") {
		p.t.Fatalf("%s: %s (stderr: %s)", command, out, p.stderr)
	}
	return out
}

// fails expects the named CUDA error.
func (p *proc) fails(command, want string) {
	p.t.Helper()
	out := p.do(command)
	if !strings.HasPrefix(out, "err ") || !strings.HasSuffix(out, " "+want) {
		p.t.Fatalf("%s: %q, want %s", command, out, want)
	}
}

func (p *proc) exit() {
	p.t.Helper()
	fmt.Fprintln(p.in, "exit")
	p.in.Close()
	if err := p.cmd.Wait(); err != nil {
		p.t.Fatalf("cudash exit: %v (stderr: %s)", err, p.stderr)
	}
}

func (p *proc) pid() uint32 { return uint32(p.cmd.Process.Pid) }

// field returns the value of key=value in an answer.
func field(t testing.TB, line, key string) string {
	t.Helper()
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	t.Fatalf("%q has no %s=", line, key)
	return ""
}

func fieldU(t testing.TB, line, key string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(field(t, line, key), 10, 64)
	if err != nil {
		t.Fatalf("%q: %s: %v", line, key, err)
	}
	return v
}

func slotBytes(u region.Usage, pid uint32, dev int) uint64 {
	for _, p := range u.Procs {
		if p.PID == pid {
			return p.UsedBytes[dev]
		}
	}
	return 0
}
