//go:build bench

package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tessera-gpu/tessera/test/e2e/cluster"
	"github.com/tessera-gpu/tessera/test/e2e/controlplane"
	"github.com/tessera-gpu/tessera/test/e2e/kwoknodes"
	"github.com/tessera-gpu/tessera/test/e2e/scrape"
	"github.com/tessera-gpu/tessera/test/e2e/tesserascheduler"
	"github.com/tessera-gpu/tessera/test/e2e/workload"
)

// Client limits of both schedulers and of the pod creators.
const (
	clientQPS   = 1000
	clientBurst = 1000
	creators    = 32 // parallel pod creations
)

func TestBench(t *testing.T) {
	nodes := envInt(t, "E2E_BENCH_NODES", 1000)
	pods := envInt(t, "E2E_BENCH_PODS", 5000)
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()

	// 8×H100 nodes: 8 GPUs each, 10 tessera.io/gpu slots per GPU.
	c := cluster.Start(t, cluster.Options{Nodes: kwoknodes.UniformNodes("gpu", nodes, kwoknodes.H100SXM, 8)})
	t.Logf("bench: control plane and %d kwok nodes ready in %v", nodes, c.StartupTime.Round(time.Millisecond))
	cfg, err := c.RESTConfig(clientQPS, clientBurst)
	if err != nil {
		t.Fatal(err)
	}
	creator, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run := func(ns string, pod func(ns, name string) *corev1.Pod) float64 {
		t.Helper()
		rate, err := measure(ctx, t, c, creator, ns, pods, pod)
		if err != nil {
			t.Fatal(err)
		}
		if err := workload.DeleteAll(ctx, c.Client(), ns); err != nil {
			t.Fatal(err)
		}
		return rate
	}

	ks, err := c.StartKubeScheduler(ctx, controlplane.KubeSchedulerOptions{QPS: clientQPS, Burst: clientBurst})
	if err != nil {
		t.Fatal(err)
	}
	rate := run("bench-kube-scheduler", func(ns, name string) *corev1.Pod {
		return workload.WholeGPUPod(ns, name, workload.DefaultScheduler, 1)
	})
	fmt.Printf("BENCH e2e.pods_per_s.kube_scheduler %.1f pods/s\n", rate)
	c.StopProcess(ks) // one scheduler at a time: they share two cores

	s, err := tesserascheduler.Start(ctx, c.ControlPlane, tesserascheduler.Options{QPS: clientQPS, Burst: clientBurst})
	if err != nil {
		t.Fatalf("bench: tessera-scheduler: %v", err)
	}
	if err := s.WaitReady(ctx); err != nil {
		t.Fatalf("bench: tessera-scheduler: %v", err)
	}
	rate = run("bench-tessera", func(ns, name string) *corev1.Pod {
		return workload.WholeGPUPod(ns, name, tesserascheduler.Name, 1)
	})
	fmt.Printf("BENCH e2e.pods_per_s.tessera %.1f pods/s\n", rate)
	// A quarter of an H100's compute and 8 GiB of its memory (8 units of
	// the plugin's shipped 1 GiB unit): four pods share a GPU.
	rate = run("bench-tessera-fractional", func(ns, name string) *corev1.Pod {
		return workload.FractionalPod(ns, name, tesserascheduler.Name, 8, 25)
	})
	fmt.Printf("BENCH e2e.pods_per_s.tessera_fractional %.1f pods/s\n", rate)

	fams, err := scrape.Families(ctx, s.MetricsURL+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	h, err := scrape.Histogram(fams, tesserascheduler.MetricAttemptLatency)
	if err != nil {
		t.Fatalf("bench: tessera-scheduler metrics: %v", err)
	}
	if h.GetSampleCount() == 0 {
		t.Fatalf("bench: %s has no samples after %d binds", tesserascheduler.MetricAttemptLatency, 2*pods)
	}
	fmt.Printf("BENCH e2e.attempt_latency_p99.tessera %.3f ms\n", 1000*scrape.Quantile(0.99, h))
}

// measure creates n pods in a new namespace ns with parallel clients and
// returns n divided by the time from the first creation to the last bind
// seen by a watch.
func measure(ctx context.Context, t *testing.T, c *cluster.Cluster, creator kubernetes.Interface, ns string, n int, pod func(ns, name string) *corev1.Pod) (float64, error) {
	if err := workload.CreateNamespace(ctx, c.Client(), ns); err != nil {
		return 0, err
	}
	if err := waitServiceAccount(ctx, c.Client(), ns); err != nil {
		return 0, err
	}
	binds, err := workload.WatchBinds(ctx, c.Client(), ns)
	if err != nil {
		return 0, err
	}
	defer binds.Stop()
	list := workload.Numbered("p", n, func(name string) *corev1.Pod { return pod(ns, name) })

	began := time.Now()
	created := make(chan error, 1)
	go func() {
		err := workload.Create(ctx, creator, list, creators)
		if err == nil {
			t.Logf("bench: %s: %d pods created in %v", ns, n, time.Since(began).Round(time.Millisecond))
		}
		created <- err
	}()
	wait, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	waitErr := binds.WaitBound(wait, n, false)
	if err := <-created; err != nil {
		return 0, fmt.Errorf("%s: %w", ns, err)
	}
	if waitErr != nil {
		return 0, fmt.Errorf("%s: %w (component errors: %v)", ns, waitErr, c.Err())
	}
	var last time.Time
	for _, ts := range binds.Times() {
		if ts.After(last) {
			last = ts
		}
	}
	took := last.Sub(began)
	rate := float64(n) / took.Seconds()
	t.Logf("bench: %s: %d pods bound in %v: %.1f pods/s", ns, n, took.Round(time.Millisecond), rate)
	return rate, nil
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
