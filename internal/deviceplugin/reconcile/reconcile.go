// Package reconcile reads kubelet's truth back from the PodResources API.
// Kubelet is the authority on which device IDs each container holds; the
// reconciler rebuilds the plugin's ledger from it (after a plugin restart
// nothing is lost), rewrites each container's limits files in place,
// publishes the realized allocation as the pod annotation
// tessera.io/allocated, and counts and reports where kubelet's allocation
// differs from the scheduler's tessera.io/assignment, so the scheduler's
// view converges on the truth.
package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	annotations "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/ledger"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/pods"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/hostproc"
	"github.com/tessera-gpu/tessera/internal/podresources"
	"github.com/tessera-gpu/tessera/internal/priority"
	"github.com/tessera-gpu/tessera/internal/statedir"
)

// Metrics are the reconciler's Prometheus metrics.
type Metrics struct {
	Mismatches *prometheus.CounterVec
	Runs       prometheus.Counter
	Errors     prometheus.Counter
}

// NewMetrics creates and registers the metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Mismatches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tessera_deviceplugin_assignment_mismatch_total",
			Help: "Containers whose kubelet allocation differs from their tessera.io/assignment, by resource."}, []string{"resource"}),
		Runs:   prometheus.NewCounter(prometheus.CounterOpts{Name: "tessera_deviceplugin_reconcile_runs_total", Help: "PodResources read-backs."}),
		Errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "tessera_deviceplugin_reconcile_errors_total", Help: "Failed PodResources read-backs."}),
	}
	if reg != nil {
		reg.MustRegister(m.Mismatches, m.Runs, m.Errors)
	}
	return m
}

// Reconciler is one node's read-back loop.
type Reconciler struct {
	PodResources podresources.Lister
	Pods         pods.Source
	Client       kube.Client
	Manager      *resource.Manager
	Ledger       *ledger.Ledger
	Builder      *allocation.Builder
	Metrics      *Metrics
	Log          *slog.Logger
	Warn         func(pod *corev1.Pod, reason, message string)
	// Priority resolves pods' compute priority classes (nil: the default table).
	Priority *priority.Table
	// GCGrace keeps unreferenced state directories this long, covering the
	// gap between Allocate and the container showing up in PodResources.
	GCGrace time.Duration

	mu        sync.Mutex
	reported  map[string]string // pod/container/resource → mismatch already counted
	collector *statedir.Collector
}

// Run reconciles every interval until ctx ends.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := r.Once(ctx); err != nil {
			r.Log.Warn("reconcile failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once performs one read-back.
func (r *Reconciler) Once(ctx context.Context) error {
	r.Metrics.Runs.Inc()
	asOf := time.Now()
	resp, err := r.PodResources.List(ctx)
	if err != nil {
		r.Metrics.Errors.Inc()
		return fmt.Errorf("PodResources list: %w", err)
	}
	listed := podresources.Aggregate(resp)
	truth := map[ledger.ContainerRef]map[string][]string{}
	live := map[string]bool{}
	pods := map[string]bool{} // UIDs of the listed and carried-over pods
	var errs []string
	for i := range listed {
		pr := &listed[i]
		pod := r.Pods.Get(pr.Namespace, pr.Name)
		if pod != nil {
			pods[string(pod.UID)] = true
		}
		allocs := r.podTruth(pr, pod, truth, live)
		if pod == nil || len(allocs) == 0 {
			continue
		}
		if err := r.publish(ctx, pod, allocs); err != nil {
			errs = append(errs, err.Error())
		}
	}
	r.keepUnlisted(listed, truth, live)
	for ref := range truth { // carried over: still running, its mismatches still counted
		pods[ref.PodUID] = true
	}
	r.Ledger.Reset(truth, asOf)
	r.collectGarbage(live)
	r.forgetReported(pods)
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// keepUnlisted carries over the ledger's allocations of containers that
// kubelet does not list but whose pod still runs, and keeps their files:
//   - kubelet never lists regular init containers, and it runs them again,
//     with the same devices and mounts, whenever the pod's sandbox is
//     recreated; they stay while their pod is not finished;
//   - a restarting kubelet lists no pods, or only some, until it has
//     read them all back; a pod it does not list stays while the API
//     server still has it (same UID) and not finished.
//
// A finished pod is dropped even when kubelet still lists it (it does with
// the KubeletPodResourcesListUseActivePods gate off, and while a terminal
// pod is being torn down): its containers never run again.
//
// A container kubelet lists is never carried over: its listing is the truth.
// Nor is a resource whose IDs kubelet lists under another pod: the ledger's
// entry was a wrong guess (an Allocate attributed to a pod kubelet has not
// admitted yet), or kubelet has since given the IDs away. Within one pod
// kubelet hands a regular init container's IDs on to app containers, so
// there an overlap is expected.
func (r *Reconciler) keepUnlisted(listed []podresources.Pod, truth map[ledger.ContainerRef]map[string][]string, live map[string]bool) {
	byName := map[string]*podresources.Pod{} // namespace/name → listed pod
	for i := range listed {
		byName[listed[i].Namespace+"/"+listed[i].Name] = &listed[i]
	}
	owner := map[string]map[string]string{} // resource → listed ID → namespace/name of its pod
	for ref, byRes := range truth {
		for res, ids := range byRes {
			if owner[res] == nil {
				owner[res] = map[string]string{}
			}
			for _, id := range ids {
				owner[res][id] = ref.Namespace + "/" + ref.Pod
			}
		}
	}
	for ref, byRes := range r.Ledger.Snapshot() {
		if truth[ref] != nil {
			continue
		}
		lp := byName[ref.Namespace+"/"+ref.Pod]
		if lp != nil && lp.Container(ref.Container) != nil {
			continue
		}
		pod := r.Pods.Get(ref.Namespace, ref.Pod)
		if pod == nil || string(pod.UID) != ref.PodUID || finished(pod) {
			continue
		}
		kept := map[string][]string{}
		for _, res := range sortedResources(byRes) {
			if listedElsewhere(owner[res], byRes[res], ref.Namespace+"/"+ref.Pod) {
				continue
			}
			kept[res] = byRes[res]
			r.restore(res, byRes[res], live, pod)
		}
		if len(kept) > 0 {
			truth[ref] = kept
		}
	}
}

// listedElsewhere reports whether kubelet lists any of ids under a pod other than pod.
func listedElsewhere(owner map[string]string, ids []string, pod string) bool {
	for _, id := range ids {
		if o, ok := owner[id]; ok && o != pod {
			return true
		}
	}
	return false
}

// finished reports whether a pod's containers have ended for good.
func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// podTruth gathers one listed pod's tessera devices, restores their
// files, and returns the allocation to publish.
func (r *Reconciler) podTruth(pr *podresources.Pod, pod *corev1.Pod, truth map[ledger.ContainerRef]map[string][]string, live map[string]bool) []annotations.ContainerAllocation {
	var allocs []annotations.ContainerAllocation
	for _, c := range pr.Containers {
		ref := ledger.ContainerRef{Namespace: pr.Namespace, Pod: pr.Name, Container: c.Name}
		if pod != nil {
			ref.PodUID = string(pod.UID)
		}
		ca := annotations.ContainerAllocation{Name: c.Name}
		gpus := map[string]*annotations.GPUAllocation{}
		for _, res := range sortedResources(c.Devices) {
			ids := c.Devices[res]
			if _, ok := resource.KindOf(res); !ok {
				continue
			}
			if truth[ref] == nil {
				truth[ref] = map[string][]string{}
			}
			truth[ref][res] = ids
			r.restore(res, ids, live, pod)
			r.addShares(&ca, gpus, res, ids)
		}
		if len(gpus) > 0 || len(ca.MIG) > 0 {
			for _, g := range r.Manager.GPUs() {
				if a := gpus[g.UUID]; a != nil {
					ca.GPUs = append(ca.GPUs, *a)
				}
			}
			allocs = append(allocs, ca)
		}
	}
	return allocs
}

func sortedResources(byRes map[string][]string) []string {
	out := make([]string, 0, len(byRes))
	for res := range byRes {
		out = append(out, res)
	}
	sort.Strings(out)
	return out
}

func (r *Reconciler) addShares(ca *annotations.ContainerAllocation, gpus map[string]*annotations.GPUAllocation, res string, ids []string) {
	shares, err := r.Manager.Shares(res, ids)
	if err != nil {
		r.Log.Warn("kubelet reports devices this plugin does not advertise", "resource", res, "err", err)
		return
	}
	for _, s := range shares {
		if len(s.MIG) > 0 {
			for _, m := range s.MIG {
				ca.MIG = append(ca.MIG, annotations.MIGAllocation{UUID: m, Parent: s.GPU, Profile: strings.TrimPrefix(res, resource.MIGPrefix)})
			}
			continue
		}
		a := gpus[s.GPU]
		if a == nil {
			a = &annotations.GPUAllocation{UUID: s.GPU}
			gpus[s.GPU] = a
		}
		a.MemoryMiB += s.MemBytes >> 20
		a.CorePercent += uint32(s.CorePct)
		a.Slots += uint32(s.Slots)
	}
}

// restore recreates a container's files from its IDs; after a plugin
// restart or a wiped state dir the hook keeps working.
func (r *Reconciler) restore(res string, ids []string, live map[string]bool, pod *corev1.Pod) {
	kind, _ := resource.KindOf(res)
	if kind != resource.KindMem && kind != resource.KindCore {
		return
	}
	live[allocation.Key(kind, ids)] = true
	if err := r.Builder.Restore(res, ids); err != nil {
		r.Log.Warn("restore container files", "resource", res, "err", err)
		return
	}
	if kind == resource.KindCore && pod != nil {
		r.correctScheduling(ids, pod)
	}
}

// correctScheduling writes the pod's compute policy and priority into its
// gpu-core allocation in place: Allocate may have attributed it to the wrong
// pod, or to none, and annotations can change.
func (r *Reconciler) correctScheduling(ids []string, pod *corev1.Pod) {
	table := r.Priority
	if table == nil {
		table = priority.DefaultTable()
	}
	sched, err := allocation.SchedulingOf(pod, table)
	if err != nil {
		r.Log.Warn("compute scheduling of the pod unusable; guaranteed at the lowest priority", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
	if err := r.Builder.SetScheduling(ids, sched); err != nil {
		r.Log.Warn("correct compute scheduling", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}

// publish writes tessera.io/allocated when it changed and checks it
// against tessera.io/assignment.
func (r *Reconciler) publish(ctx context.Context, pod *corev1.Pod, allocs []annotations.ContainerAllocation) error {
	sort.Slice(allocs, func(i, j int) bool { return allocs[i].Name < allocs[j].Name })
	val, err := annotations.Marshal(&annotations.Allocated{Version: annotations.Version, Containers: allocs})
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	r.checkAssignment(pod, allocs)
	if pod.Annotations[annotations.AllocatedKey] == val {
		return nil
	}
	if err := r.Client.AnnotatePod(ctx, pod.Namespace, pod.Name, map[string]string{annotations.AllocatedKey: val}); err != nil {
		return fmt.Errorf("annotate pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// checkAssignment counts each container/resource mismatch once.
func (r *Reconciler) checkAssignment(pod *corev1.Pod, allocs []annotations.ContainerAllocation) {
	raw, ok := pod.Annotations[annotations.AssignmentKey]
	if !ok {
		return
	}
	a, err := annotations.ParseAssignment(raw)
	if err != nil {
		return // reported when the preferred allocation was chosen
	}
	for _, ca := range allocs {
		want := a.Container(ca.Name)
		if want == nil {
			continue
		}
		for _, res := range Mismatched(want, &ca, r.Manager.Options().MemoryUnit) {
			key := string(pod.UID) + "/" + ca.Name + "/" + res
			r.mu.Lock()
			if r.reported == nil {
				r.reported = map[string]string{}
			}
			_, seen := r.reported[key]
			r.reported[key] = res
			r.mu.Unlock()
			if seen {
				continue
			}
			r.Metrics.Mismatches.WithLabelValues(res).Inc()
			msg := fmt.Sprintf("container %s: kubelet allocated %s differently from %s; %s records what it got", ca.Name, res, annotations.AssignmentKey, annotations.AllocatedKey)
			r.Log.Warn("assignment mismatch", "pod", pod.Namespace+"/"+pod.Name, "container", ca.Name, "resource", res)
			if r.Warn != nil {
				r.Warn(pod, "TesseraAssignmentMismatch", msg)
			}
		}
	}
}

// forgetReported drops the counted mismatches of pods no longer listed.
func (r *Reconciler) forgetReported(pods map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key := range r.reported {
		if uid, _, _ := strings.Cut(key, "/"); !pods[uid] {
			delete(r.reported, key)
		}
	}
}

// Mismatched lists the resources whose realized per-GPU amounts differ
// from the assignment. Memory is compared in whole units.
func Mismatched(want *annotations.ContainerAssignment, got *annotations.ContainerAllocation, unit uint64) []string {
	unitMiB := unit >> 20
	gotBy := map[string]annotations.GPUAllocation{}
	for _, g := range got.GPUs {
		gotBy[g.UUID] = g
	}
	var memBad, coreBad, slotBad bool
	for _, w := range want.GPUs {
		g, ok := gotBy[w.UUID]
		delete(gotBy, w.UUID)
		if w.MemoryMiB > 0 && (!ok || (w.MemoryMiB+unitMiB-1)/unitMiB != g.MemoryMiB/unitMiB) {
			memBad = true
		}
		if w.CorePercent > 0 && (!ok || w.CorePercent != g.CorePercent) {
			coreBad = true
		}
		if ok && g.Slots > 1 {
			slotBad = true
		}
	}
	for _, g := range gotBy { // GPUs the container got but was not assigned
		memBad = memBad || g.MemoryMiB > 0
		coreBad = coreBad || g.CorePercent > 0
		slotBad = slotBad || g.Slots > 0
	}
	var out []string
	if slotBad {
		out = append(out, resource.GPU)
	}
	if memBad {
		out = append(out, resource.Memory)
	}
	if coreBad {
		out = append(out, resource.Core)
	}
	return out
}

// collectGarbage removes the state directories of containers that no longer
// exist, by the node's one collection rule (statedir.Collector): unreferenced
// for the whole grace period, older than it, and no live process in the region.
func (r *Reconciler) collectGarbage(live map[string]bool) {
	r.mu.Lock()
	if r.collector == nil {
		r.collector = &statedir.Collector{StateDir: r.Builder.StateDir, Grace: r.GCGrace, Log: r.Log, Writers: r.Builder.DirLock()}
	}
	c := r.collector
	r.mu.Unlock()
	c.Grace = r.GCGrace
	procRoot := r.Builder.ProcRoot
	if procRoot == "" {
		procRoot = "/proc"
	}
	procs, err := hostproc.Scan(procRoot)
	if err != nil {
		r.Log.Warn("state directory collection skipped: process table unreadable", "err", err)
		return
	}
	c.Collect(live, procs.Alive)
}
