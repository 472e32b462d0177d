//go:build bench

package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tessera-gpu/tessera/test/e2e/cluster"
	"github.com/tessera-gpu/tessera/test/e2e/controlplane"
	"github.com/tessera-gpu/tessera/test/e2e/kwoknodes"
	"github.com/tessera-gpu/tessera/test/e2e/process"
	"github.com/tessera-gpu/tessera/test/e2e/scrape"
	"github.com/tessera-gpu/tessera/test/e2e/tesserascheduler"
	"github.com/tessera-gpu/tessera/test/e2e/workload"
)

// Client limits of both schedulers and of the pod creators.
const (
	clientQPS   = 1000
	clientBurst = 1000
	creators    = 32 // parallel pod creations
	gpusPerNode = 8
)

// The schedulers, as the BENCH names spell them.
const (
	kubeScheduler = "kube_scheduler"
	tessera       = "tessera"
)

// bench is one benchmark run: a cluster, the pod creator, and what the
// passes measured.
type bench struct {
	t       *testing.T
	ctx     context.Context
	c       *cluster.Cluster
	creator kubernetes.Interface
	pods    int
	// profileDir, when set, receives a CPU profile of tessera-scheduler
	// per pass (E2E_BENCH_PROFILE_DIR).
	profileDir string
	// tesseraArgs are extra flags of tessera-scheduler for an experiment
	// (E2E_BENCH_TESSERA_ARGS, split at spaces, e.g. "--bind-workers=64").
	tesseraArgs []string
	passes      []pass
	latency     []*dto.Histogram // tessera's attempt latency, one per process
}

// TestBench measures kube-scheduler and tessera-scheduler binding the same
// whole-GPU pods on one control plane, then tessera with fractional pods.
// The API server is warmed up first (pods no scheduler owns are created and
// deleted) and the schedulers take turns in ABBA order, each started fresh
// for its pass and stopped after it, so neither pays a cold API server nor
// processes the other's watch events; the BENCH rates are the medians.
func TestBench(t *testing.T) {
	nodes := envInt(t, "E2E_BENCH_NODES", 1000)
	pods := envInt(t, "E2E_BENCH_PODS", 5000)
	rounds := envInt(t, "E2E_BENCH_ROUNDS", 2) // passes per scheduler
	if pods > nodes*gpusPerNode {
		// tessera gives a whole-GPU pod a GPU of its own.
		t.Fatalf("E2E_BENCH_PODS=%d: more than the %d GPUs of E2E_BENCH_NODES=%d nodes", pods, nodes*gpusPerNode, nodes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()

	// 8×H100 nodes: 8 GPUs each, 10 tessera.io/gpu slots per GPU.
	c := cluster.Start(t, cluster.Options{
		Nodes: kwoknodes.UniformNodes("gpu", nodes, kwoknodes.H100SXM, gpusPerNode),
		// The API server deletes a collection one object at a time by
		// default: 5,000 pods took 2 min 10 s here, between every pass.
		// Deletion is not measured; parallel workers only shorten the run.
		ControlPlane: controlplane.Options{APIServerArgs: []string{"--delete-collection-workers=8"}},
	})
	t.Logf("bench: control plane and %d kwok nodes ready in %v", nodes, c.StartupTime.Round(time.Millisecond))
	cfg, err := c.RESTConfig(clientQPS, clientBurst)
	if err != nil {
		t.Fatal(err)
	}
	creator, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{t: t, ctx: ctx, c: c, creator: creator, pods: pods, profileDir: os.Getenv("E2E_BENCH_PROFILE_DIR"),
		tesseraArgs: strings.Fields(os.Getenv("E2E_BENCH_TESSERA_ARGS"))}
	if len(b.tesseraArgs) > 0 {
		t.Logf("bench: tessera-scheduler with extra flags %q", b.tesseraArgs)
	}

	b.warmUp()
	for r := range rounds {
		order := []string{kubeScheduler, tessera}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			b.wholeGPUPass(s, r+1)
		}
	}
	b.fractionalPass()
	b.report()
}

// warmUp creates and deletes a fifth as many pods as a pass, owned by no
// running scheduler: the API server's and etcd's first writes, caches and
// the first pod namespace are paid here, not by whichever scheduler goes
// first. Its creation rate, with no scheduler running, is the baseline a
// pass's creation rate is compared with.
func (b *bench) warmUp() {
	const ns = "bench-warmup"
	if err := workload.CreateNamespace(b.ctx, b.c.Client(), ns); err != nil {
		b.t.Fatal(err)
	}
	if err := waitServiceAccount(b.ctx, b.c.Client(), ns); err != nil {
		b.t.Fatal(err)
	}
	n := max(b.pods/5, 1)
	list := workload.Numbered("w", n, func(name string) *corev1.Pod {
		return workload.WholeGPUPod(ns, name, "bench-no-scheduler", 1)
	})
	before, err := sampleCPU(b.c)
	if err != nil {
		b.t.Fatal(err)
	}
	began := time.Now()
	if err := workload.Create(b.ctx, b.creator, list, creators); err != nil {
		b.t.Fatalf("bench: warm-up: %v", err)
	}
	took := time.Since(began)
	after, err := sampleCPU(b.c)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("bench: warm-up: %d pods created in %v (%.1f/s) with no scheduler running; CPU %s",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds(), after.since(before))
	b.deleteAll(ns)
}

// wholeGPUPass runs one scheduler (fresh process) over b.pods whole-GPU pods.
func (b *bench) wholeGPUPass(scheduler string, round int) {
	if scheduler == tessera {
		b.tesseraPass(fmt.Sprintf("bench-tessera-%d", round), func(ns, name string) *corev1.Pod {
			return workload.WholeGPUPod(ns, name, tesserascheduler.Name, 1)
		})
		return
	}
	ns := fmt.Sprintf("bench-kube-scheduler-%d", round)
	ks, err := b.c.StartKubeScheduler(b.ctx, controlplane.KubeSchedulerOptions{QPS: clientQPS, Burst: clientBurst})
	if err != nil {
		b.t.Fatal(err)
	}
	p := b.measure(kubeScheduler, ns, ks, nil, func(ns, name string) *corev1.Pod {
		return workload.WholeGPUPod(ns, name, workload.DefaultScheduler, 1)
	})
	b.c.StopProcess(ks)
	b.passes = append(b.passes, p)
	b.deleteAll(ns)
}

// fractionalPass: a quarter of an H100's compute and 8 GiB of its memory
// (8 units of the plugin's shipped 1 GiB unit): four pods share a GPU.
func (b *bench) fractionalPass() {
	b.tesseraPass("bench-tessera-fractional", func(ns, name string) *corev1.Pod {
		return workload.FractionalPod(ns, name, tesserascheduler.Name, 8, 25)
	})
	b.passes[len(b.passes)-1].scheduler = "tessera_fractional"
}

// tesseraPass starts tessera-scheduler, measures one pass, keeps its
// attempt latency histogram and stops it.
func (b *bench) tesseraPass(ns string, pod func(ns, name string) *corev1.Pod) {
	args := slices.Clone(b.tesseraArgs)
	if b.profileDir != "" {
		args = append(args, "--profiling=true")
	}
	s, err := tesserascheduler.Start(b.ctx, b.c.ControlPlane, tesserascheduler.Options{QPS: clientQPS, Burst: clientBurst, Args: args})
	if err != nil {
		b.t.Fatalf("bench: tessera-scheduler: %v", err)
	}
	if err := s.WaitReady(b.ctx); err != nil {
		b.t.Fatalf("bench: tessera-scheduler: %v", err)
	}
	var profiled chan error
	if b.profileDir != "" {
		profiled = make(chan error, 1)
	}
	p := b.measure(tessera, ns, s.Process, func() {
		if profiled != nil {
			go func() { profiled <- b.profile(s, ns) }()
		}
	}, pod)
	if profiled != nil {
		if err := <-profiled; err != nil {
			b.t.Logf("bench: %s: no CPU profile: %v", ns, err)
		}
	}
	fams, err := scrape.Families(b.ctx, s.MetricsURL+"/metrics")
	if err != nil {
		b.t.Fatal(err)
	}
	h, err := scrape.Histogram(fams, tesserascheduler.MetricAttemptLatency)
	if err != nil {
		b.t.Fatalf("bench: tessera-scheduler metrics: %v", err)
	}
	b.t.Logf("bench: %s: tessera attempt latency p99 %.3f ms over %d attempts", ns, 1000*scrape.Quantile(0.99, h), h.GetSampleCount())
	b.latency = append(b.latency, h)
	b.c.StopProcess(s.Process)
	b.passes = append(b.passes, p)
	b.deleteAll(ns)
}

// profile fetches a 20 s CPU profile of s (started with --profiling) into
// b.profileDir/<ns>.pprof.
func (b *bench) profile(s *tesserascheduler.Scheduler, ns string) error {
	req, err := http.NewRequestWithContext(b.ctx, http.MethodGet, s.MetricsURL+"/debug/pprof/profile?seconds=20", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof: %s", resp.Status)
	}
	path := filepath.Join(b.profileDir, ns+".pprof")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	b.t.Logf("bench: %s: CPU profile of tessera-scheduler in %s", ns, path)
	return f.Close()
}

func (b *bench) deleteAll(ns string) {
	began := time.Now()
	if err := workload.DeleteAll(b.ctx, b.c.Client(), ns); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("bench: %s: pods deleted in %v", ns, time.Since(began).Round(time.Millisecond))
}

// pass is what one scheduler's pass measured.
type pass struct {
	scheduler string
	ns        string
	pods      int
	// created and bound: from the first creation to the last creation
	// returned and to the last bind seen.
	created, bound time.Duration
	// boundAtLastCreate is how many pods had been seen bound when the last
	// creation returned: the rest were bound after it.
	boundAtLastCreate int
	cpu               cpuUse
	schedulerCPU      time.Duration
}

// rate is pods bound per second from the first creation to the last bind.
func (p pass) rate() float64 { return float64(p.pods) / p.bound.Seconds() }

// drainRate is pods bound per second after the last creation: the
// scheduler's own pace once it no longer shares the API server with the
// creators (0 when it kept up with creation).
func (p pass) drainRate() float64 {
	tail := p.bound - p.created
	if tail <= 0 || p.pods == p.boundAtLastCreate {
		return 0
	}
	return float64(p.pods-p.boundAtLastCreate) / tail.Seconds()
}

// measure creates b.pods pods in a new namespace ns with parallel clients
// while sched (already running and ready) binds them, and records the
// times and every component's CPU use from the first creation to the last
// bind seen by a watch. began, if not nil, runs as creation starts.
func (b *bench) measure(scheduler, ns string, sched *process.Process, began func(), pod func(ns, name string) *corev1.Pod) pass {
	t, ctx := b.t, b.ctx
	t.Helper()
	if err := workload.CreateNamespace(ctx, b.c.Client(), ns); err != nil {
		t.Fatal(err)
	}
	if err := waitServiceAccount(ctx, b.c.Client(), ns); err != nil {
		t.Fatal(err)
	}
	binds, err := workload.WatchBinds(ctx, b.c.Client(), ns)
	if err != nil {
		t.Fatal(err)
	}
	defer binds.Stop()
	list := workload.Numbered("p", b.pods, func(name string) *corev1.Pod { return pod(ns, name) })

	before, err := sampleCPU(b.c)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if began != nil {
		began()
	}
	type creation struct {
		err   error
		took  time.Duration
		bound int
	}
	created := make(chan creation, 1)
	go func() {
		err := workload.Create(ctx, b.creator, list, creators)
		took := time.Since(start)
		bound, _ := binds.Counts()
		created <- creation{err, took, bound}
	}()
	wait, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	waitErr := binds.WaitBound(wait, b.pods, false)
	after, err := sampleCPU(b.c)
	if err != nil {
		t.Fatal(err)
	}
	cr := <-created
	if cr.err != nil {
		t.Fatalf("%s: %v", ns, cr.err)
	}
	if waitErr != nil {
		t.Fatalf("%s: %v (component errors: %v)", ns, waitErr, b.c.Err())
	}
	var last time.Time
	for _, ts := range binds.Times() {
		if ts.After(last) {
			last = ts
		}
	}
	p := pass{scheduler: scheduler, ns: ns, pods: b.pods, created: cr.took, bound: last.Sub(start),
		boundAtLastCreate: cr.bound, cpu: after.since(before)}
	p.schedulerCPU = p.cpu.byName[sched.Name]
	t.Logf("bench: %s: %d pods created in %v (%.1f/s), bound in %v: %.1f pods/s; %d bound after the last creation at %.1f/s",
		ns, p.pods, p.created.Round(time.Millisecond), float64(p.pods)/p.created.Seconds(), p.bound.Round(time.Millisecond),
		p.rate(), p.pods-p.boundAtLastCreate, p.drainRate())
	t.Logf("bench: %s: CPU %s; %s %.2f s per 1000 pods", ns, p.cpu, sched.Name, perThousand(p.schedulerCPU, p.pods))
	return p
}

// report prints the BENCH lines: per scheduler the median of its passes.
func (b *bench) report() {
	by := map[string][]pass{}
	for _, p := range b.passes {
		by[p.scheduler] = append(by[p.scheduler], p)
	}
	for _, s := range []string{kubeScheduler, tessera, "tessera_fractional"} {
		ps := by[s]
		rates := make([]float64, len(ps))
		for i, p := range ps {
			rates[i] = p.rate()
		}
		b.t.Logf("bench: %s: pods/s per pass %s", s, formatRates(rates))
		fmt.Printf("BENCH e2e.pods_per_s.%s %.1f pods/s\n", s, median(ps, pass.rate))
	}
	for _, s := range []string{kubeScheduler, tessera} {
		ps := by[s]
		fmt.Printf("BENCH e2e.cpu_s_per_1000_pods.%s %.2f s\n", s, median(ps, func(p pass) float64 { return perThousand(p.schedulerCPU, p.pods) }))
		fmt.Printf("BENCH e2e.apiserver_cpu_s_per_1000_pods.%s %.2f s\n", s, median(ps, func(p pass) float64 {
			return perThousand(p.cpu.byName[apiServer], p.pods)
		}))
		fmt.Printf("BENCH e2e.drain_pods_per_s.%s %.1f pods/s\n", s, median(ps, pass.drainRate))
	}
	h := scrape.Sum(b.latency...)
	if h.GetSampleCount() == 0 {
		b.t.Fatalf("bench: %s has no samples after %d passes", tesserascheduler.MetricAttemptLatency, len(b.latency))
	}
	fmt.Printf("BENCH e2e.attempt_latency_p99.tessera %.3f ms\n", 1000*scrape.Quantile(0.99, h))
}

func perThousand(d time.Duration, pods int) float64 { return d.Seconds() * 1000 / float64(pods) }

// median of f over ps (the mean of the middle two for an even count).
func median(ps []pass, f func(pass) float64) float64 {
	if len(ps) == 0 {
		return 0
	}
	vs := make([]float64, len(ps))
	for i, p := range ps {
		vs[i] = f(p)
	}
	slices.Sort(vs)
	mid := len(vs) / 2
	if len(vs)%2 == 1 {
		return vs[mid]
	}
	return (vs[mid-1] + vs[mid]) / 2
}

func formatRates(rates []float64) string {
	s := ""
	for i, r := range rates {
		if i > 0 {
			s += ", "
		}
		s += strconv.FormatFloat(r, 'f', 1, 64)
	}
	return s
}

// waitServiceAccount waits for the controller manager to make the
// namespace's default ServiceAccount; until then the API server refuses pods.
func waitServiceAccount(ctx context.Context, client kubernetes.Interface, ns string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("default ServiceAccount of %s: %w", ns, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("default ServiceAccount of %s: %w", ns, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
