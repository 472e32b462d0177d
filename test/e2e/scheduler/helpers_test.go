package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/test/e2e/cluster"
	"github.com/tessera-gpu/tessera/test/e2e/kwoknodes"
	"github.com/tessera-gpu/tessera/test/e2e/tesserascheduler"
	"github.com/tessera-gpu/tessera/test/e2e/workload"
)

const ns = "default"

func setup(t *testing.T, nodes []kwoknodes.NodeSpec) (*cluster.Cluster, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	return cluster.Start(t, cluster.Options{Nodes: nodes}), ctx
}

func startScheduler(t *testing.T, ctx context.Context, c *cluster.Cluster, opts tesserascheduler.Options) *tesserascheduler.Scheduler {
	t.Helper()
	s, err := tesserascheduler.Start(ctx, c.ControlPlane, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log tail:\n%s", s.Name, s.Tail(8192))
		}
	})
	return s
}

func create(t *testing.T, ctx context.Context, c *cluster.Cluster, pods ...*corev1.Pod) {
	t.Helper()
	if err := workload.Create(ctx, c.Client(), pods, 16); err != nil {
		t.Fatal(err)
	}
}

func withAnnotations(p *corev1.Pod, kv ...string) *corev1.Pod {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	for i := 0; i < len(kv); i += 2 {
		p.Annotations[kv[i]] = kv[i+1]
	}
	return p
}

func eventually(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for {
		if cond() {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func nodeOf(t *testing.T, ctx context.Context, client kubernetes.Interface, name string) string {
	t.Helper()
	p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return p.Spec.NodeName
}

func hasEvent(ctx context.Context, client kubernetes.Interface, object, reason, contains string) bool {
	l, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + object})
	if err != nil {
		return false
	}
	for _, e := range l.Items {
		if e.Reason == reason && strings.Contains(e.Message, contains) {
			return true
		}
	}
	return false
}

// checkCapacity reads every node's inventory and every bound pod's
// assignment: each GPU named belongs to the pod's node, and no GPU holds
// more memory than it has (memory a borrower's tessera.io/borrowed says it
// took from owners counted once) or more than 100 % compute (a whole GPU,
// named without amounts, counts 100 %). It returns the number of bound pods.
func checkCapacity(t *testing.T, ctx context.Context, client kubernetes.Interface) int {
	t.Helper()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owner, memOf := map[string]string{}, map[string]uint64{}
	for _, n := range nodes.Items {
		inv, err := annv1.ParseNodeGPUs(n.Annotations[annv1.NodeGPUsKey])
		if err != nil {
			continue
		}
		for _, g := range inv.GPUs {
			owner[g.UUID], memOf[g.UUID] = n.Name, g.MemoryMiB
		}
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mem, core, lent := map[string]uint64{}, map[string]uint32{}, map[string]uint64{}
	bound := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			continue
		}
		bound++
		if raw, ok := p.Annotations[annv1.BorrowedKey]; ok {
			rec, err := annv1.ParseBorrowed(raw)
			if err != nil {
				t.Fatalf("pod %s: %v", p.Name, err)
			}
			for _, g := range rec.GPUs {
				lent[g.UUID] += g.MemoryMiB
			}
		}
		raw, ok := p.Annotations[annv1.AssignmentKey]
		if !ok {
			continue
		}
		as, err := annv1.ParseAssignment(raw)
		if err != nil {
			t.Fatalf("pod %s: %v", p.Name, err)
		}
		for _, c := range as.Containers {
			if runsFirst(&p, c.Name) {
				continue // done before the app containers start on its GPUs
			}
			for _, g := range c.GPUs {
				if owner[g.UUID] != p.Spec.NodeName {
					t.Fatalf("pod %s on %s was assigned GPU %s of node %q", p.Name, p.Spec.NodeName, g.UUID, owner[g.UUID])
				}
				mem[g.UUID] += g.MemoryMiB
				if g.CorePercent == 0 && g.MemoryMiB == 0 {
					core[g.UUID] += 100
				} else {
					core[g.UUID] += g.CorePercent
				}
			}
		}
	}
	for u := range core {
		if mem[u]-min(lent[u], mem[u]) > memOf[u] || core[u] > 100 {
			t.Fatalf("GPU %s on %s oversubscribed: %d (%d of them lent) of %d MiB, %d %% compute", u, owner[u], mem[u], lent[u], memOf[u], core[u])
		}
	}
	return bound
}

// runsFirst reports whether name is a regular init container of p (not a
// sidecar): it runs alone before the app containers.
func runsFirst(p *corev1.Pod, name string) bool {
	for _, c := range p.Spec.InitContainers {
		if c.Name == name {
			return c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways
		}
	}
	return false
}

func numbered(prefix string, n int, build func(i int, name string) *corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = build(i, fmt.Sprintf("%s-%03d", prefix, i))
	}
	return out
}

// quiet waits until no pod was bound for a while (the scheduler settled).
func quiet(t *testing.T, ctx context.Context, b *workload.Binds, d time.Duration) int {
	t.Helper()
	last, since := -1, time.Now()
	for {
		n, _ := b.Counts()
		if n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) >= d {
			return n
		}
		select {
		case <-ctx.Done():
			t.Fatal("timed out waiting for the scheduler to settle")
		case <-time.After(100 * time.Millisecond):
		}
	}
}
