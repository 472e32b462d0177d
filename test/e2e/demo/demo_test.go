package demo

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/test/e2e/gpunode"
	"github.com/tessera-gpu/tessera/test/e2e/process"
	"github.com/tessera-gpu/tessera/test/e2e/tesserascheduler"
	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// repoRoot is the main module's checkout (this file is test/e2e/demo/demo_test.go).
func repoRoot(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test's source")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// reducedParts builds what the reduced form runs: the hook and simulated
// driver (make), cudash, vgpu-monitor and cluster-scheduler.
func reducedParts(t *testing.T, ctx context.Context) Config {
	t.Helper()
	lib, err := fakegpu.HookLibDir()
	if err != nil {
		t.Fatal(err)
	}
	lib, err = filepath.Abs(lib)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	cudash := filepath.Join(tmp, "cudash")
	if err := fakegpu.BuildCudash(cudash); err != nil {
		t.Fatal(err)
	}
	root := repoRoot(t)
	// make test-e2e names the binary make build made; otherwise build it.
	monitor := os.Getenv("TESSERA_MONITOR_BIN")
	if monitor == "" {
		monitor = filepath.Join(tmp, "vgpu-monitor")
		build := exec.CommandContext(ctx, "go", "build", "-o", monitor, "./cmd/vgpu-monitor")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/vgpu-monitor: %v\n%s", err, out)
		}
	}
	sched, err := tesserascheduler.Binary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Real:    &fakeRealNode{why: "not root (test)"},
		Reduced: Options{LibDir: lib, Cudash: cudash, Monitor: monitor, ComputeWindow: 1500 * time.Millisecond},
		OpenB: &OpenBOptions{Scheduler: sched, Shipped: filepath.Join(root, "internal", "placement", "testdata", "openb"),
			Seeds: "42-43"},
	}
}

// TestReducedFormAccount runs `make demo`'s reduced form and checks the
// account's key lines, so the demo cannot rot: the pods' caps come from
// Allocate and are enforced by the hook, the compute split follows the
// shares, the monitor names both containers with their usage and caps,
// a deleted pod's series and memory go, and the simulator's openb result
// stands beside the published FGD number. Nothing may be left running.
func TestReducedFormAccount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	cfg := reducedParts(t, ctx)
	t.Logf("parts built in %s", time.Since(began).Round(time.Millisecond))
	began = time.Now()
	var progress bytes.Buffer
	cfg.Reduced.Progress = &progress
	acc, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	t.Logf("demo ran in %s (simulator %s)", time.Since(began).Round(time.Millisecond), acc.OpenB.Took)
	var buf bytes.Buffer
	acc.Print(&buf)
	out := buf.String()
	t.Logf("account:\n%s", out)

	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`== tessera demo \(reduced\) ==`),
		regexp.MustCompile(`not root \(test\); this is the reduced form`),
		regexp.MustCompile(`demo-node: 4 simulated GPUs`),
		regexp.MustCompile(`team-a/infer-a \(gpu-core: 30, gpu-mem: 8\) -> demo-node GPU \d`),
		regexp.MustCompile(`team-b/train-b \(gpu-core: 70, gpu-mem: 16\) -> demo-node GPU \d`),
		regexp.MustCompile(`kubelet allocated 8 gpu-mem IDs \+ 30 gpu-core IDs`),
		regexp.MustCompile(`Allocate: env .*TESSERA_LIMITS=/run/tessera/limits`),
		regexp.MustCompile(`infer-a  1 CUDA device\(s\); cuMemGetInfo: total 8\.0 GiB, free 8\.0 GiB`),
		regexp.MustCompile(`train-b  1 CUDA device\(s\); cuMemGetInfo: total 16\.0 GiB, free 16\.0 GiB`),
		regexp.MustCompile(`infer-a  cuMemAlloc\(1\.0 GiB\) -> CUDA_ERROR_OUT_OF_MEMORY; still 8\.0 GiB used of 8\.0 GiB`),
		regexp.MustCompile(`team-a/infer-a: a 1\.0 GiB allocation past its 8\.0 GiB cap -> CUDA_ERROR_OUT_OF_MEMORY`),
		regexp.MustCompile(`team-a/infer-a/server +GPU-\w+ +8\.0 GiB +8\.0 GiB +8\.0 GiB +1 +30 %`),
		regexp.MustCompile(`team-b/train-b/trainer +GPU-\w+ +16\.0 GiB +16\.0 GiB +16\.0 GiB +1 +70 %`),
		regexp.MustCompile(`GPU \d holds 24\.0 GiB in all \(NVML`),
		regexp.MustCompile(`its series left /metrics and GPU \d fell to 16\.0 GiB in use`),
		regexp.MustCompile(`priority: chat-p0's bursts \(2 ms of kernels, launch to sync, median of 14\): alone \d+\.\d ms, beside saturating batch-p3 \d+\.\d ms`),
		regexp.MustCompile(`team-a/chat-p0/server +GPU-\w+ +0\.0 GiB +4\.0 GiB +0\.0 GiB +0 +50 %`),
		regexp.MustCompile(`fgd \(ours\) \d+\.\d\d %   tessera \d+\.\d\d %   published FGD 4\.77 %`),
	} {
		if !want.MatchString(out) {
			t.Errorf("the account lacks %q", want)
		}
	}
	// Compute: both saturate the shared GPU; without the arbiter and the
	// hook's time slices each would get about half. The bound is loose for
	// a loaded CI machine (shares' accuracy is computetest's subject).
	if len(acc.Compute) != 2 {
		t.Fatalf("compute shares: %+v", acc.Compute)
	}
	a, b := acc.Compute[0], acc.Compute[1]
	if a.Pod != "infer-a" || a.GotPct < 15 || a.GotPct > 42 || b.GotPct < 58 {
		t.Errorf("compute split %s %.1f %% / %s %.1f %%, want near 30/70", a.Pod, a.GotPct, b.Pod, b.GotPct)
	}
	if o := acc.OpenB; o == nil || o.Tessera >= o.Published || o.FGD-o.Published > 0.5 || o.Published-o.FGD > 0.5 {
		t.Errorf("openb: %+v: want tessera below the published FGD and our fgd within 0.5 pp of it", acc.OpenB)
	}
	if !strings.Contains(progress.String(), "starting the device plugin") {
		t.Errorf("no progress lines:\n%s", progress.String())
	}
	if live := process.Live(); len(live) > 0 {
		t.Errorf("processes left running: %v", live)
	}
	if kids, err := LiveChildren(); err != nil || len(kids) > 0 {
		t.Errorf("child processes left running: %v (%v)", kids, err)
	}
}

// fakeRealNode stands in for the real-node scenario.
type fakeRealNode struct {
	why string
	ran bool
	err error
}

func (f *fakeRealNode) Unavailable() string { return f.why }

func (f *fakeRealNode) Run(_ context.Context, progress io.Writer) (*Account, error) {
	f.ran = true
	if f.err != nil {
		return &Account{Node: Node{Name: "half-made"}}, f.err
	}
	return &Account{Node: Node{Name: "realnode"}}, nil
}

// TestRootRunsTheRealNode: as root with a scenario, Run runs it (and not
// the reduced form, whose parts are absent here); its failure is the
// demo's failure, never a silent fallback.
func TestRootRunsTheRealNode(t *testing.T) {
	ctx := context.Background()
	real := &fakeRealNode{}
	acc, err := Run(ctx, Config{Real: real})
	if err != nil || !real.ran || acc.Form != "real node" || acc.Why != "" || acc.Node.Name != "realnode" {
		t.Fatalf("Run as root: acc %+v, err %v, ran %v", acc, err, real.ran)
	}
	broken := &fakeRealNode{err: errors.New("kubelet never became Ready")}
	acc, err = Run(ctx, Config{Real: broken})
	if err == nil || !strings.Contains(err.Error(), "kubelet never became Ready") || acc == nil || acc.Node.Name != "half-made" {
		t.Fatalf("a failing real node: acc %+v, err %v", acc, err)
	}
}

// TestSimulatorFailureKeepsTheAccount: a simulator that fails after the
// scenario ran fails the demo, but the scenario's account is still printed.
func TestSimulatorFailureKeepsTheAccount(t *testing.T) {
	acc, err := Run(context.Background(), Config{Real: &fakeRealNode{},
		OpenB: &OpenBOptions{Scheduler: filepath.Join(t.TempDir(), "no-such-cluster-scheduler"), Shipped: t.TempDir()}})
	if err == nil || acc == nil || acc.Node.Name != "realnode" {
		t.Fatalf("a failing simulator: acc %+v, err %v; want the scenario's account and the error", acc, err)
	}
}

// TestWhyReduced: the reduced form says why the real node did not run.
func TestWhyReduced(t *testing.T) {
	can := &fakeRealNode{}
	cannot := &fakeRealNode{why: "the real node needs root"}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Real: cannot}, "the real node needs root; this is the reduced form"},
		{Config{}, "no real-node scenario"},
		{Config{Real: can, ForceReduced: true}, "asked for (-reduced)"},
		{Config{Real: can}, ""},
	} {
		got := whyReduced(c.cfg)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("whyReduced(%+v) = %q, want %q", c.cfg, got, c.want)
		}
	}
	if can.ran || cannot.ran {
		t.Error("whyReduced ran the scenario")
	}
}

// TestUserGuideOpensWithTheDemoPod: the user guide's first example is the
// demo's first pod, so what the guide says of it is what make demo shows.
func TestUserGuideOpensWithTheDemoPod(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "user-guide.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "```yaml\n"+PodSpecs[0]+"```") {
		t.Errorf("docs/user-guide.md does not show the demo's pod:\n%s", PodSpecs[0])
	}
	for _, spec := range append(append([]string{}, PodSpecs...), PrioritySpecs...) {
		if _, err := ParsePod(spec); err != nil {
			t.Error(err)
		}
	}
}

// TestFromReport: the real node's report becomes the same account, with
// its failed checks marked, its metrics in bytes and its GPUs indexed.
func TestFromReport(t *testing.T) {
	rep := &gpunode.Report{
		Node:    gpunode.NodeReport{Name: "node-1", IP: "10.200.0.7", GPUs: []string{"GPU-a", "GPU-b"}, CDISpec: "/etc/cdi/x.yaml"},
		Install: gpunode.InstallReport{Release: "tessera", Namespace: "tessera-system", Chart: "deploy/helm/tessera", Leader: "sched-0"},
		Workloads: []gpunode.Workload{{Namespace: "team-a", Pod: "infer-a", Container: "server", GPU: "GPU-b", Devices: 1,
			TotalMiB: 8192, AllocatedMiB: 8192, RefusedWith: "CUDA_ERROR_OUT_OF_MEMORY",
			Requests: map[string]string{"tessera.io/gpu-mem": "8", "tessera.io/gpu-core": "30"}}},
		Checks:  []gpunode.Check{{What: "cap", OK: true, Detail: "8 GiB"}, {What: "series gone", OK: false, Detail: "still listed"}},
		Metrics: []gpunode.MetricRow{{Namespace: "team-a", Pod: "infer-a", Container: "server", GPU: "GPU-b", UsedMiB: 8192, CapMiB: 8192, PeakMiB: 8192, Refused: 2, ComputeRatio: 0.3}},
		Timings: []gpunode.Timing{{Step: "helm install", Took: 16 * time.Second}},
	}
	acc := FromReport(rep)
	var b bytes.Buffer
	acc.Print(&b)
	out := b.String()
	for _, want := range []string{
		"== tessera demo (real node) ==",
		"team-a/infer-a (gpu-core: 30, gpu-mem: 8) -> node-1 GPU 1",
		"1 GPU(s): GPU-b with 8192 MiB; held at most 8192 MiB; past the cap: CUDA_ERROR_OUT_OF_MEMORY",
		"ok   cap: 8 GiB",
		"FAIL series gone: still listed",
		"tessera-scheduler leader: sched-0",
		"helm install",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("account lacks %q:\n%s", want, out)
		}
	}
	if len(acc.Metrics) != 1 || acc.Metrics[0].Used != 8<<30 || acc.Metrics[0].Limit != 8<<30 || acc.Metrics[0].Peak != 8<<30 || acc.Metrics[0].Refused != 2 {
		t.Errorf("metrics %+v", acc.Metrics)
	}
}

// TestDemoScriptShowsBuildErrors: hack/demo.sh condenses `go build -v`
// into progress lines, but a failed build's messages must still reach the
// user, and the script must fail.
func TestDemoScriptShowsBuildErrors(t *testing.T) {
	dir := t.TempDir()
	fakeGo := filepath.Join(dir, "go")
	script := "#!/bin/sh\necho example.com/pkg/a\necho '# example.com/pkg/b'\necho 'b/b.go:3:1: undefined: boom' >&2\nexit 1\n"
	if err := os.WriteFile(fakeGo, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	root := repoRoot(t)
	cmd := exec.Command(filepath.Join(root, "hack", "demo.sh"))
	cmd.Env = append(os.Environ(), "MAKE=true", "GO="+fakeGo)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("hack/demo.sh succeeded with a failing go build:\n%s", out)
	}
	for _, want := range []string{"undefined: boom", "# example.com/pkg/b"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("hack/demo.sh's output lacks the build error %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "example.com/pkg/a\n") && !strings.Contains(string(out), "compiled") {
		t.Errorf("package lines are passed through instead of counted:\n%s", out)
	}
}
