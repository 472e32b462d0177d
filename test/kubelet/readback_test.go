package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	annotations "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/ledger"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/region"
)

// Shortened periods of the read-back regression: the plugin reads
// PodResources back every readBackEvery and collects a state directory
// no read-back has referenced for gcGrace.
const (
	readBackEvery = 50 * time.Millisecond
	gcGrace       = 300 * time.Millisecond
	// twoPeriods spans two full collection periods and a few read-backs.
	twoPeriods = 2*gcGrace + 4*readBackEvery
)

// limits is a container's tessera resources: gpu, gpu-mem, gpu-core.
type limits [3]int64

func shapePod(name string, created time.Time, initCtrs, ctrs map[string]limits) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(created)},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	p.Spec.InitContainers = containers(initCtrs)
	p.Spec.Containers = containers(ctrs)
	return p
}

func containers(byName map[string]limits) []corev1.Container {
	var names []string
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []corev1.Container
	for _, n := range names {
		lim := corev1.ResourceList{}
		for i, res := range []string{resource.GPU, resource.Memory, resource.Core} {
			if q := byName[n][i]; q > 0 {
				lim[corev1.ResourceName(res)] = *apiresource.NewQuantity(q, apiresource.DecimalSI)
			}
		}
		out = append(out, corev1.Container{Name: n, Resources: corev1.ResourceRequirements{Limits: lim, Requests: lim}})
	}
	return out
}

func allContainers(p *corev1.Pod) []corev1.Container {
	return append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...)
}

// expectedStateDirs is one directory per container allocation of a
// resource with files (gpu-mem, gpu-core), named by kubelet's IDs; an
// app container handed its init container's IDs shares its directory.
func (c *cluster) expectedStateDirs(ps []*corev1.Pod) map[string]string {
	want := map[string]string{}
	for _, p := range ps {
		for _, ctr := range allContainers(p) {
			for res, devs := range c.manager().GetDevices(string(p.UID), ctr.Name) {
				kind, _ := resource.KindOf(res)
				if kind != resource.KindMem && kind != resource.KindCore {
					continue
				}
				var ids []string
				for id := range devs {
					ids = append(ids, id)
				}
				want[allocation.Key(kind, ids)] = p.Name + "/" + ctr.Name + " " + res
			}
		}
	}
	return want
}

// checkStateDirs: exactly the expected directories.
func (c *cluster) checkStateDirs(ps []*corev1.Pod) error {
	entries, err := os.ReadDir(filepath.Join(c.d.Builder.StateDir, "containers"))
	if err != nil {
		return err
	}
	want := c.expectedStateDirs(ps)
	var extra []string
	for _, e := range entries {
		if _, ok := want[e.Name()]; !ok {
			extra = append(extra, e.Name())
		}
		delete(want, e.Name())
	}
	if len(want) > 0 || len(extra) > 0 {
		return fmt.Errorf("state directories missing: %v; %d unexpected: %v", want, len(extra), extra)
	}
	return nil
}

// keepCheckingStateDirs checks the state directories for d, every half
// read-back period.
func (c *cluster) keepCheckingStateDirs(t *testing.T, when string, ps []*corev1.Pod, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(readBackEvery / 2) {
		if err := c.checkStateDirs(ps); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
}

// checkRestartFinds runs what a container restart does: kubelet reuses the
// container's cached Allocate responses, and the runtime bind-mounts
// their host paths. Each file must be there, a regular file that the
// hook accepts; a missing one would be created as an empty directory.
func (c *cluster) checkRestartFinds(t *testing.T, p *corev1.Pod, ctr corev1.Container) {
	t.Helper()
	opts, err := c.manager().GetDeviceRunContainerOptions(context.Background(), p, &ctr)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range opts.Mounts {
		switch m.ContainerPath {
		case allocation.LimitsPath, allocation.CoreLimitsPath:
			l, err := region.OpenLimits(m.HostPath)
			if err != nil {
				t.Errorf("%s/%s restarted: %s: %v", p.Name, ctr.Name, m.ContainerPath, err)
				continue
			}
			l.Close()
		case allocation.RegionPath:
			if fi, err := os.Stat(m.HostPath); err != nil || !fi.Mode().IsRegular() {
				t.Errorf("%s/%s restarted: %s is not a file: %v", p.Name, ctr.Name, m.ContainerPath, err)
			}
		}
	}
}

// checkTogether: a container's memory, compute and slots are on the same GPUs.
func (c *cluster) checkTogether(t *testing.T, p *corev1.Pod) {
	t.Helper()
	for _, ctr := range allContainers(p) {
		var first, firstRes string
		for _, res := range []string{resource.GPU, resource.Memory, resource.Core} {
			g := c.devicesOf(p, ctr.Name, res)
			if len(g) == 0 {
				continue
			}
			if first == "" {
				first, firstRes = fmt.Sprint(g), res
			} else if fmt.Sprint(g) != first {
				t.Errorf("%s/%s: %s on %s, %s on %v", p.Name, ctr.Name, firstRes, first, res, g)
			}
		}
	}
}

// checkLedger: the plugin's ledger holds kubelet's whole ID sets for every
// listed container.
func (c *cluster) checkLedger(t *testing.T, when string, ps []*corev1.Pod) {
	t.Helper()
	for _, m := range c.ledgerMismatches(ps) {
		t.Errorf("%s: %s", when, m)
	}
}

// awaitLedger is checkLedger once read-backs have caught up with an
// admission: a read-back that lists kubelet's devices in the moment after the
// plugin's Allocate returned and before kubelet recorded the IDs drops the
// plugin's record, and the next read-back (every readBackEvery) restores it
// from kubelet's list. A fixed wait of three periods was not enough on a
// loaded machine ("ledger holds 0 tessera.io/gpu-core IDs of small-3/c,
// kubelet 60").
func (c *cluster) awaitLedger(t *testing.T, when string, ps []*corev1.Pod) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); len(c.ledgerMismatches(ps)) > 0 && time.Now().Before(deadline); {
		time.Sleep(readBackEvery)
	}
	c.checkLedger(t, when, ps)
}

func (c *cluster) ledgerMismatches(ps []*corev1.Pod) []string {
	var out []string
	for _, p := range ps {
		for _, ctr := range p.Spec.Containers {
			got := c.d.Ledger.Get(ledger.ContainerRef{PodUID: string(p.UID), Namespace: p.Namespace, Pod: p.Name, Container: ctr.Name})
			for res, devs := range c.manager().GetDevices(string(p.UID), ctr.Name) {
				if len(got[res]) != len(devs) {
					out = append(out, fmt.Sprintf("ledger holds %d %s IDs of %s/%s, kubelet %d", len(got[res]), res, p.Name, ctr.Name, len(devs)))
				}
			}
		}
	}
	return out
}

// TestKubeletReadBack: the plugin's periodic PodResources read-back, served
// by kubelet's own PodResources server over its socket, with the
// collection shortened to gcGrace. For every pod shape, each container
// allocation keeps exactly one state directory, none is collected while
// kubelet lists its container (over two full collection periods and
// through a kubelet restart that lists no pods for as long), a container
// restart afterwards finds its files, and a container's memory and
// compute share GPUs.
func TestKubeletReadBack(t *testing.T) {
	c := newCluster(t)
	c.reconcileEvery, c.gcGrace = readBackEvery, gcGrace
	if err := os.MkdirAll(c.socketDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	c.startPlugin()
	c.startKubelet()
	c.awaitCapacity(fullNode)

	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var pods []*corev1.Pod
	add := func(t *testing.T, p *corev1.Pod) {
		t.Helper()
		c.addPod(p)
		c.admit(p)
		c.checkTogether(t, p)
		pods = append(pods, p)
		time.Sleep(3 * readBackEvery) // read-backs between admissions
		c.awaitLedger(t, "after admitting "+p.Name, pods)
	}
	shapes := []struct {
		name       string
		init, ctrs map[string]limits
	}{
		{"mem-only", nil, map[string]limits{"c": {0, 8, 0}}},
		{"mem-core", nil, map[string]limits{"c": {0, 8, 30}}},
		{"whole-2", nil, map[string]limits{"c": {2, 0, 0}}},
		{"whole-2-capped", nil, map[string]limits{"c": {2, 16, 100}}},
		{"init-app", map[string]limits{"prep": {0, 4, 10}}, map[string]limits{"main": {0, 4, 10}}},
		{"two", nil, map[string]limits{"learner": {0, 24, 40}, "actor": {0, 8, 20}}},
	}
	for i, s := range shapes {
		add(t, shapePod(s.name, t0.Add(time.Duration(i)*time.Second), s.init, s.ctrs))
	}
	// Small memory with much compute, several times: the ledger's view of
	// each GPU's compute decides where the memory may go.
	for i := 0; i < 6; i++ {
		add(t, shapePod(fmt.Sprintf("small-%d", i), t0.Add(time.Minute+time.Duration(i)*time.Second), nil,
			map[string]limits{"c": {0, 1, 60}}))
	}

	t.Run("one state directory per container allocation, kept over two collection periods", func(t *testing.T) {
		c.keepCheckingStateDirs(t, "live pods", pods, twoPeriods)
		c.checkLedger(t, "after two periods", pods)
	})

	t.Run("kubelet restart listing no pods for two collection periods", func(t *testing.T) {
		before := c.d.Ledger.Snapshot()
		_ = c.manager().Stop(klog.Background())
		entries, _ := os.ReadDir(c.socketDir())
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".sock") {
				os.Remove(filepath.Join(c.socketDir(), e.Name()))
			}
		}
		c.mu.Lock()
		c.restarting = true
		c.mu.Unlock()
		c.startKubelet()
		c.awaitCapacity(fullNode)
		c.keepCheckingStateDirs(t, "kubelet restarting", pods, twoPeriods)
		if after := c.d.Ledger.Snapshot(); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("an empty read-back changed the ledger: %d containers, was %d", len(after), len(before))
		}
		c.mu.Lock()
		c.restarting = false
		c.mu.Unlock()
		c.awaitLedger(t, "kubelet back", pods)
		if err := c.checkStateDirs(pods); err != nil {
			t.Fatalf("kubelet back: %v", err)
		}
	})

	t.Run("container restart finds its files", func(t *testing.T) {
		for _, p := range pods {
			for _, ctr := range allContainers(p) {
				c.checkRestartFinds(t, p, ctr)
			}
		}
	})

	t.Run("a finished pod's directories go", func(t *testing.T) {
		gone := pods[1] // mem-core
		c.endPod(t, gone)
		pods = append(pods[:1:1], pods[2:]...)
		// Collected two periods after the last read-back that listed it;
		// a loaded machine may need more read-backs.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(readBackEvery) {
			err := c.checkStateDirs(pods)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after mem-core ended: %v", err)
			}
		}
	})

	t.Run("a state directory reused by the next container stays", func(t *testing.T) {
		gone := pods[0] // mem-only: the lowest 8 memory IDs of its GPU
		goneDirs := c.expectedStateDirs([]*corev1.Pod{gone})
		gpu := -1
		for i := 0; i < 8; i++ {
			if g := c.devicesOf(gone, "c", resource.Memory); len(g) == 1 && g[0] == c.uuid(i) {
				gpu = i
			}
		}
		c.endPod(t, gone)
		pods = pods[1:]
		// The next pod is assigned the same GPU and gets the same IDs
		// while their directory is unreferenced but not collected yet.
		shape := map[string][2]int64{"c": {8, 0}}
		next := shapePod("mem-only-next", t0.Add(time.Hour), nil, map[string]limits{"c": {0, 8, 0}})
		next.Annotations = map[string]string{annotations.AssignmentKey: c.assignment(map[string]int{"c": gpu}, shape)}
		add(t, next)
		for d := range c.expectedStateDirs([]*corev1.Pod{next}) {
			if _, reused := goneDirs[d]; !reused {
				t.Fatalf("mem-only-next got a directory of its own (%s), not mem-only's %v", d, goneDirs)
			}
		}
		c.keepCheckingStateDirs(t, "mem-only-next running", pods, twoPeriods)
		c.checkRestartFinds(t, next, next.Spec.Containers[0])
	})
}

// endPod ends a pod: kubelet stops listing it and the API server deletes it.
func (c *cluster) endPod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	c.mu.Lock()
	for i, q := range c.pods {
		if q.UID == p.UID {
			c.pods = append(c.pods[:i:i], c.pods[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	if err := c.client.DeletePod(p.Namespace, p.Name); err != nil {
		t.Fatal(err)
	}
}
