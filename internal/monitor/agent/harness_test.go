package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/arbiterproc"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/monitor/gpus"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/statedir"
	"github.com/tessera-gpu/tessera/test/fakegpu"
)

const MiB = 1 << 20

var (
	libDir string // libtessera-hook.so and fakegpu/
	cudash string
)

// TestMain finds the hook and the simulated GPU (TESSERA_LIB_DIR, else make)
// and builds the CUDA shell the hook tests use.
func TestMain(m *testing.M) {
	arbiterproc.MainIfSubcommand() // the agents' arbiter process is this binary
	var err error
	if libDir, err = fakegpu.HookLibDir(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tmp, err := os.MkdirTemp("", "monitortest-")
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

// node is a simulated GPU machine with a state directory.
type node struct {
	t        *testing.T
	dir      string
	stateDir string
	devices  string
	uuids    []string
	listing  []identity.Listing
	mu       sync.Mutex
}

const twoGPUs = "GPU Alpha:1024:10;GPU Beta:2048:10"

func newNode(t *testing.T) *node {
	n := &node{t: t, dir: t.TempDir(), devices: twoGPUs}
	n.stateDir = filepath.Join(n.dir, "state")
	n.uuids = []string{fakegpu.UUID("", 0), fakegpu.UUID("", 1)}
	t.Setenv("FAKEGPU_STATE", filepath.Join(n.dir, "fakegpu.state"))
	t.Setenv("FAKEGPU_DEVICES", n.devices)
	t.Setenv("FAKEGPU_CONFIG", "")
	t.Setenv("FAKEGPU_UUID_SEED", "")
	return n
}

// openGPUs loads the simulated libnvidia-ml.so.1 through go-nvml.
func (n *node) openGPUs() *gpus.Node {
	lib := nvml.New(nvml.WithLibraryPath(filepath.Join(libDir, "fakegpu", "libnvidia-ml.so.1")))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		n.t.Fatalf("nvml.Init: %v", ret)
	}
	n.t.Cleanup(func() { lib.Shutdown() })
	g, err := gpus.Open(lib)
	if err != nil {
		n.t.Fatal(err)
	}
	return g
}

// ctr is one container's allocation, written as the device plugin writes it.
type ctr struct {
	owner   identity.Owner
	memKey  string
	coreKey string
	region  string
	limits  string
	env     []string
}

// memIDs are n gpu-mem device IDs on GPU g, starting at unit first.
func memIDs(uuid string, first, n int) []string {
	var ids []string
	for i := range n {
		ids = append(ids, resource.ID{GPU: uuid, Kind: resource.KindMem, N: first + i}.String())
	}
	return ids
}

// allocate writes a container's files. caps maps GPU index → cap; core maps
// GPU index → percent (no core-limits file when empty). list says whether
// PodResources lists the container.
func (n *node) allocate(ns, pod, name string, caps map[int]uint64, core map[int]uint32, list bool) *ctr {
	n.t.Helper()
	c := &ctr{owner: identity.Owner{Namespace: ns, Pod: pod, Container: name}}
	devs := map[string][]string{}
	var limits []region.DeviceLimit
	var memIDList []string
	for g := range n.uuids {
		if cap, ok := caps[g]; ok {
			limits = append(limits, region.DeviceLimit{UUID: n.uuids[g], MemLimitBytes: cap})
			// Unit numbers unique per container: hash of the name keeps keys distinct.
			memIDList = append(memIDList, memIDs(n.uuids[g], len(ns+pod+name)*100+g*10, 2)...)
		}
	}
	if len(limits) > 0 {
		devs[resource.Memory] = memIDList
		c.memKey = allocation.Key(resource.KindMem, memIDList)
		dir := filepath.Join(statedir.Containers(n.stateDir), c.memKey)
		mkdir(n.t, dir)
		c.region, c.limits = filepath.Join(dir, statedir.RegionFile), filepath.Join(dir, statedir.LimitsFile)
		if err := region.WriteLimits(c.limits, limits); err != nil {
			n.t.Fatal(err)
		}
		if err := region.CreateRegion(c.region); err != nil {
			n.t.Fatal(err)
		}
		c.env = []string{"TESSERA_REGION=" + c.region, "TESSERA_LIMITS=" + c.limits}
	}
	var coreLimits []region.DeviceLimit
	var coreIDs []string
	for g := range n.uuids {
		if pct, ok := core[g]; ok {
			coreLimits = append(coreLimits, region.DeviceLimit{UUID: n.uuids[g], CoreLimitPct: pct})
			for i := range int(pct) {
				coreIDs = append(coreIDs, resource.ID{GPU: n.uuids[g], Kind: resource.KindCore, N: i}.String())
			}
		}
	}
	if len(coreLimits) > 0 {
		devs[resource.Core] = coreIDs
		c.coreKey = allocation.Key(resource.KindCore, coreIDs)
		dir := filepath.Join(statedir.Containers(n.stateDir), c.coreKey)
		mkdir(n.t, dir)
		if err := region.WriteLimits(filepath.Join(dir, statedir.CoreLimitsFile), coreLimits); err != nil {
			n.t.Fatal(err)
		}
	}
	if list {
		n.mu.Lock()
		n.listing = append(n.listing, identity.Listing{Owner: c.owner, Devices: devs})
		n.mu.Unlock()
	}
	return c
}

// unlist removes a container from PodResources (it was deleted).
func (n *node) unlist(c *ctr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, l := range n.listing {
		if l.Owner == c.owner {
			n.listing = append(n.listing[:i], n.listing[i+1:]...)
			return
		}
	}
}

func mkdir(t *testing.T, dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// agentFor builds an agent over the node (identity from the node's listing).
func (n *node) agentFor(log *slog.Logger, g *gpus.Node, configure ...func(*configv1.MonitorConfig)) *Agent {
	cfg := configv1.DefaultMonitor()
	cfg.NodeName = "node-a"
	cfg.StateDir = n.stateDir
	cfg.ListenAddress = "127.0.0.1:0"
	cfg.ReapInterval = configv1.Duration{Duration: 20 * time.Millisecond}
	cfg.IdentityInterval = configv1.Duration{Duration: 20 * time.Millisecond}
	for _, f := range configure {
		f(cfg)
	}
	a := New(cfg, log, n.source, g)
	if err := a.Identity.Refresh(n.t.Context()); err != nil {
		n.t.Fatal(err)
	}
	return a
}

func (n *node) source(_ context.Context) ([]identity.Listing, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]identity.Listing(nil), n.listing...), nil
}

// scrape GETs /metrics and parses it with Prometheus' own parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

func serve(t *testing.T, a *Agent) string {
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// value finds the sample of family name whose labels include want; ok=false
// when there is none.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// series counts the samples of a family that carry the owner's labels.
func series(fams map[string]*dto.MetricFamily, o identity.Owner) int {
	n := 0
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if got["namespace"] == o.Namespace && got["pod"] == o.Pod && got["container"] == o.Container {
				n++
			}
		}
	}
	return n
}

// proc is one cudash process: one command per line in, one answer out.
type proc struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

// run starts cudash on the node; hooked adds LD_PRELOAD (a container's process).
func (n *node) run(env []string, hooked bool) *proc {
	n.t.Helper()
	cmd := exec.Command(cudash, "-mode", "direct")
	cmd.Env = append([]string{
		"LD_LIBRARY_PATH=" + filepath.Join(libDir, "fakegpu"),
		"FAKEGPU_STATE=" + filepath.Join(n.dir, "fakegpu.state"),
		"FAKEGPU_DEVICES=" + n.devices,
		"PATH=" + os.Getenv("PATH"),
	}, env...)
	if hooked {
		cmd.Env = append(cmd.Env, "LD_PRELOAD="+filepath.Join(libDir, "libtessera-hook.so"))
	}
	p := &proc{t: n.t, cmd: cmd, lines: make(chan string, 16)}
	var err error
	if p.in, err = cmd.StdinPipe(); err != nil {
		n.t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		n.t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	n.t.Cleanup(func() {
		p.in.Close()
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
	return p
}

// ok sends a command and requires an "ok" answer.
func (p *proc) ok(command string) string {
	p.t.Helper()
	fmt.Fprintln(p.in, command)
	select {
	case line, open := <-p.lines:
		if !open || !strings.HasPrefix(line, "ok") {
			p.t.Fatalf("%s: %q (exited: %v)", command, line, !open)
		}
		return line
	case <-time.After(20 * time.Second):
		p.t.Fatalf("%s: no answer", command)
	}
	return ""
}

func (p *proc) pid() uint32 { return uint32(p.cmd.Process.Pid) }

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

// eventually polls cond for up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
