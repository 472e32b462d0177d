package gpunode

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/deploy/imagebuild"
	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// workloadNamespace is where the user pods run.
const workloadNamespace = "default"

// mib is a MiB in bytes.
const mib = 1 << 20

// probeSpec is one user pod of the scenario.
type probeSpec struct {
	name           string
	memGiB, corePc int64
	holdMiB        int64
	// burnUs keeps the GPU busy with kernels of that many µs (0: idle).
	burnUs int64
	// priority is the tessera.io/priority annotation (P0…P3; "" none).
	priority string
}

// workloads runs the user scenario on the installed node.
func (s *scenario) workloads(ctx context.Context) error {
	trainer := probeSpec{name: "trainer", memGiB: 8, corePc: 30, holdMiB: 4096}
	a, err := s.runProbe(ctx, trainer)
	if err != nil {
		return err
	}
	s.checkProbe(a, trainer)
	rowA, err := s.waitSeries(ctx, a, trainer)
	if err != nil {
		return err
	}
	s.logf("gpunode: /metrics: %s/%s/%s on %s uses %.0f MiB of its %.0f MiB cap", rowA.Namespace, rowA.Pod, rowA.Container, rowA.GPU, rowA.UsedMiB, rowA.CapMiB)

	// The kubelet restarted under a running pod: the plugin registers
	// again (a new pod is admitted through it) and the pod keeps its cap.
	restarted := time.Now()
	if err := s.node.RestartKubelet(ctx); err != nil {
		return err
	}
	if err := s.waitAllocatable(ctx); err != nil {
		return err
	}
	reg := s.waitFor(ctx, time.Minute, "the device plugin registered again with the restarted kubelet", func(ctx context.Context) error {
		n, err := s.pluginRegistrations(ctx)
		if err == nil && n < 2 {
			err = fmt.Errorf("%d registrations in its log", n)
		}
		return err
	})
	s.report.check(reg == nil, "device plugin re-registers with the restarted kubelet", "%s", okOr(reg, "a second \"registered with kubelet\" in the plugin's log"))
	s.logf("gpunode: kubelet restarted; node Ready and the plugin registered again %v later", s.report.timed("kubelet restart -> plugin re-registered", restarted).Round(time.Millisecond))
	inference := probeSpec{name: "inference", memGiB: 4, corePc: 20, holdMiB: 1024}
	b, err := s.runProbe(ctx, inference)
	if err != nil {
		return fmt.Errorf("gpunode: after the kubelet restart: %w", err)
	}
	s.checkProbe(b, inference)
	if _, err := s.waitSeries(ctx, b, inference); err != nil {
		return err
	}
	s.checkSurvivor(ctx, a, trainer)
	if err := s.rollDaemonSet(ctx, []*Workload{a, b}, []probeSpec{trainer, inference}); err != nil {
		return err
	}

	// Both pods deleted: their series leave /metrics, their memory is free.
	deleted := time.Now()
	for _, w := range []*Workload{a, b} {
		if err := s.deletePod(ctx, w.Pod); err != nil {
			return err
		}
	}
	gone := s.waitFor(ctx, 2*time.Minute, "the deleted pods' series gone from /metrics", func(ctx context.Context) error {
		rows, err := s.scrapeRows(ctx)
		if err != nil {
			return err
		}
		for _, r := range rows {
			if r.Namespace == workloadNamespace && (r.Pod == a.Pod || r.Pod == b.Pod) {
				return fmt.Errorf("series of %s/%s still there", r.Namespace, r.Pod)
			}
		}
		return nil
	})
	s.report.check(gone == nil, "deleted pods' series leave /metrics", "%s", okOr(gone, "no series of trainer or inference after deletion"))
	free := s.waitFor(ctx, time.Minute, "the deleted pods' memory free on the simulated GPUs", func(ctx context.Context) error {
		st, err := fakegpu.ReadState(s.gpu.StatePath)
		if err != nil {
			return err
		}
		for i := range st.Devices {
			if u := st.UsedBytes(i); u != 0 {
				return fmt.Errorf("GPU %d still has %d MiB used", i, u/mib)
			}
		}
		return nil
	})
	s.report.check(free == nil, "deleted pods' memory is free", "%s", okOr(free, "every simulated GPU at 0 bytes used"))
	s.report.timed("pods deleted -> series gone, memory free", deleted)
	return s.shareCompute(ctx)
}

// shareCompute runs two pods that keep one GPU busy with gpu-core 30 and
// 60 and measures the GPU time each gets from the monitor's busy-seconds
// counters: the hook paces them towards their shares (without it the two
// would split the GPU evenly). Then a P0 and a P3 pod with equal shares: the
// arbiter stops the P3 one while the P0 one has work.
func (s *scenario) shareCompute(ctx context.Context) error {
	window := 8 * time.Second
	busy, ws, err := s.gpuTime(ctx, window, []probeSpec{
		{name: "share-a", memGiB: 2, corePc: 30, holdMiB: 512, burnUs: 2000},
		{name: "share-b", memGiB: 2, corePc: 60, holdMiB: 512, burnUs: 2000},
	})
	if err != nil || ws == nil {
		return err
	}
	ratio := 0.0
	if busy[0] > 0 {
		ratio = busy[1] / busy[0]
	}
	// Configured 60:30 = 2; an even split would be 1. A loaded machine
	// delays the programs' launches, so the bound is loose.
	s.report.check(ratio >= 1.4, "share-b (gpu-core 60) gets about twice share-a's (gpu-core 30) GPU time",
		"over %v: share-a %.2f s, share-b %.2f s of GPU time: ratio %.2f (configured 2.0)", window, busy[0], busy[1], ratio)
	s.logf("gpunode: two pods on %s at gpu-core 30 and 60: GPU time %.2f s and %.2f s over %v (ratio %.2f, configured 2.0)", ws[0].GPU, busy[0], busy[1], window, ratio)

	busy, ws, err = s.gpuTime(ctx, window, []probeSpec{
		{name: "online-p0", memGiB: 2, corePc: 50, holdMiB: 512, burnUs: 2000, priority: "P0"},
		{name: "batch-p3", memGiB: 2, corePc: 50, holdMiB: 512, burnUs: 2000, priority: "P3"},
	})
	if err != nil || ws == nil {
		return err
	}
	// Equal shares, but P3 is stopped while P0 has work: P0 gets most of
	// the GPU (an even split without priorities).
	s.report.check(busy[0] >= 3*busy[1] && busy[0] >= 0.5*window.Seconds(), "P0 keeps the GPU beside P3 (equal shares)",
		"over %v: P0 %.2f s, P3 %.2f s of GPU time", window, busy[0], busy[1])
	s.logf("gpunode: P0 and P3 pods at gpu-core 50 each on %s: GPU time %.2f s and %.2f s over %v", ws[0].GPU, busy[0], busy[1], window)
	return nil
}

// gpuTime runs the pods (which burn GPU time), checks that they share one
// GPU, measures the GPU time each gets over window from the monitor's
// counters, and deletes them. It returns nil workloads when they landed on
// different GPUs (a failed check).
func (s *scenario) gpuTime(ctx context.Context, window time.Duration, specs []probeSpec) ([]float64, []*Workload, error) {
	var ws []*Workload
	defer func() {
		for _, w := range ws {
			_ = s.deletePod(ctx, w.Pod)
		}
	}()
	for _, p := range specs {
		w, err := s.runProbe(ctx, p)
		if err != nil {
			return nil, nil, err
		}
		ws = append(ws, w)
	}
	if !s.report.check(ws[0].GPU == ws[1].GPU, ws[0].Pod+" and "+ws[1].Pod+" placed on one GPU", "%s and %s", ws[0].GPU, ws[1].GPU) {
		return nil, nil, nil
	}
	rows := func() (map[string]MetricRow, error) {
		rows, err := s.scrapeRows(ctx)
		out := map[string]MetricRow{}
		for _, r := range rows {
			out[r.Pod] = r
		}
		return out, err
	}
	// Both pods' series first, then a window of GPU time.
	var first map[string]MetricRow
	if err := s.waitFor(ctx, time.Minute, "GPU time of "+ws[0].Pod+" and "+ws[1].Pod, func(ctx context.Context) error {
		var err error
		if first, err = rows(); err != nil {
			return err
		}
		// Both series; GPU time of the first pod, which started first (a
		// lower priority second one may get none at all).
		for _, w := range ws {
			if _, ok := first[w.Pod]; !ok {
				return fmt.Errorf("no series of %s yet", w.Pod)
			}
		}
		if first[ws[0].Pod].BusySeconds == 0 {
			return fmt.Errorf("no GPU time of %s yet", ws[0].Pod)
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	time.Sleep(window)
	last, err := rows()
	if err != nil {
		return nil, nil, err
	}
	busy := make([]float64, len(ws))
	for i, w := range ws {
		busy[i] = last[w.Pod].BusySeconds - first[w.Pod].BusySeconds
		s.report.Metrics = append(s.report.Metrics, last[w.Pod])
		s.logf("gpunode: %s: GPU time %.3f s over %v (total busy %.3f s, throttled %.3f s)", w.Pod, busy[i], window, last[w.Pod].BusySeconds, last[w.Pod].ThrottledSeconds)
	}
	return busy, ws, nil
}

// runProbe creates the user pod, waits until it runs and its program has
// reported, and returns what it saw.
func (s *scenario) runProbe(ctx context.Context, p probeSpec) (*Workload, error) {
	grace := int64(1)
	limits := corev1.ResourceList{
		resourceGPUMem:  *resource.NewQuantity(p.memGiB, resource.DecimalSI),
		resourceGPUCore: *resource.NewQuantity(p.corePc, resource.DecimalSI),
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: workloadNamespace, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{
			SchedulerName:                 schedulerName,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  new(false),
			Containers: []corev1.Container{{
				Name: "main", Image: ProbeImage, ImagePullPolicy: corev1.PullNever,
				Args:      []string{"-step", "512", "-hold", fmt.Sprint(p.holdMiB), "-burn", fmt.Sprint(p.burnUs)},
				Resources: corev1.ResourceRequirements{Limits: limits},
			}},
		},
	}
	if p.priority != "" {
		pod.Annotations[schedv1.PriorityAnnotation] = p.priority
	}
	w := &Workload{Namespace: workloadNamespace, Pod: p.name, Container: "main", SchedulerName: schedulerName,
		Requests: map[string]string{string(resourceGPUMem): fmt.Sprint(p.memGiB), string(resourceGPUCore): fmt.Sprint(p.corePc)}}
	created := time.Now()
	if _, err := s.client.CoreV1().Pods(workloadNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("gpunode: create pod %s: %w", p.name, err)
	}
	var got *corev1.Pod
	if err := s.waitFor(ctx, 2*time.Minute, "pod "+p.name+" Running", func(ctx context.Context) error {
		var err error
		if got, err = s.client.CoreV1().Pods(workloadNamespace).Get(ctx, p.name, metav1.GetOptions{}); err != nil {
			return err
		}
		if got.Status.Phase == corev1.PodFailed {
			return fmt.Errorf("pod failed %s", describeStatuses(got))
		}
		return podReady(got)
	}); err != nil {
		return w, err
	}
	w.Started = s.report.timed("pod "+p.name+" create -> Running", created)
	w.Node = got.Spec.NodeName
	s.report.check(got.Annotations[annv1.AssignmentKey] != "", "pod "+p.name+" placed by tessera-scheduler",
		"bound to %s with assignment %s", got.Spec.NodeName, got.Annotations[annv1.AssignmentKey])
	s.logf("gpunode: pod %s (gpu-mem %d, gpu-core %d) placed by %s on %s, Running %v after create", p.name, p.memGiB, p.corePc, schedulerName, w.Node, w.Started.Round(time.Millisecond))
	if err := s.waitFor(ctx, time.Minute, "the probe's report in pod "+p.name, func(ctx context.Context) error {
		out, err := s.client.CoreV1().Pods(workloadNamespace).GetLogs(p.name, &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
		if err != nil {
			return err
		}
		if strings.Contains(string(out), "error ") {
			return fmt.Errorf("the probe failed: %s", out)
		}
		if !strings.Contains(string(out), "holding_mib") {
			return fmt.Errorf("log so far %q", out)
		}
		parseProbe(w, string(out))
		return nil
	}); err != nil {
		return w, err
	}
	for _, line := range w.Output {
		s.logf("gpunode:   %s/%s> %s", p.name, w.Container, line)
	}
	s.report.Workloads = append(s.report.Workloads, *w)
	return w, nil
}

// checkProbe records what the program saw against what the pod asked for.
func (s *scenario) checkProbe(w *Workload, p probeSpec) {
	capMiB := p.memGiB * 1024
	s.report.check(w.Devices == 1, p.name+" sees one GPU", "%d devices visible", w.Devices)
	s.report.check(w.TotalMiB == capMiB, fmt.Sprintf("%s sees a %d GiB GPU", p.name, p.memGiB), "cuDeviceTotalMem: %d MiB", w.TotalMiB)
	s.report.check(w.RefusedWith == "CUDA_ERROR_OUT_OF_MEMORY", p.name+" refused past its cap with CUDA_ERROR_OUT_OF_MEMORY", "first refusal: %q", w.RefusedWith)
	s.report.check(w.AllocatedMiB <= capMiB && w.AllocatedMiB >= capMiB-1024, p.name+" allocates up to its cap",
		"held at most %d MiB of a %d MiB cap (the rest is its CUDA context's reserve)", w.AllocatedMiB, capMiB)
}

// waitSeries waits for the container's series in the monitor's /metrics
// with its cap and what it holds, and records them.
func (s *scenario) waitSeries(ctx context.Context, w *Workload, p probeSpec) (MetricRow, error) {
	var row MetricRow
	err := s.waitFor(ctx, time.Minute, "the series of "+w.Pod+" in the monitor's /metrics", func(ctx context.Context) error {
		rows, err := s.scrapeRows(ctx)
		if err != nil {
			return err
		}
		for _, r := range rows {
			if r.Namespace == w.Namespace && r.Pod == w.Pod && r.Container == w.Container {
				if r.UsedMiB < float64(w.HoldingMiB) {
					return fmt.Errorf("%s uses %.0f MiB, the program holds %d", w.Pod, r.UsedMiB, w.HoldingMiB)
				}
				row = r
				return nil
			}
		}
		return fmt.Errorf("no series of %s/%s/%s among %d", w.Namespace, w.Pod, w.Container, len(rows))
	})
	if err != nil {
		return row, err
	}
	s.report.Metrics = append(s.report.Metrics, row)
	s.report.check(row.CapMiB == float64(p.memGiB*1024), "/metrics shows "+w.Pod+"'s cap", "cap %.0f MiB, used %.0f MiB on %s", row.CapMiB, row.UsedMiB, row.GPU)
	s.report.check(row.GPU == w.GPU, "/metrics attributes "+w.Pod+" to the GPU it saw", "series GPU %s, the program saw %s", row.GPU, w.GPU)
	if w.RefusedWith != "" { // the probe filled its cap and was refused past it
		s.report.check(row.PeakMiB >= float64(w.AllocatedMiB) && row.Refused >= 1, "/metrics shows "+w.Pod+"'s peak and refusals",
			"peak %.0f MiB (the program held at most %d MiB), %d refused", row.PeakMiB, w.AllocatedMiB, row.Refused)
	}
	return row, nil
}

// checkSurvivor checks that the pod that ran through the kubelet restart
// kept its container and its cap.
func (s *scenario) checkSurvivor(ctx context.Context, w *Workload, p probeSpec) {
	pod, err := s.client.CoreV1().Pods(workloadNamespace).Get(ctx, w.Pod, metav1.GetOptions{})
	if err != nil {
		s.report.check(false, w.Pod+" survives the kubelet restart", "%v", err)
		return
	}
	restarts := int32(-1)
	if len(pod.Status.ContainerStatuses) == 1 {
		restarts = pod.Status.ContainerStatuses[0].RestartCount
	}
	s.report.check(pod.Status.Phase == corev1.PodRunning && restarts == 0, w.Pod+" keeps running through the kubelet restart", "phase %s, restarts %d", pod.Status.Phase, restarts)
	rows, err := s.scrapeRows(ctx)
	var row *MetricRow
	for i, r := range rows {
		if r.Namespace == w.Namespace && r.Pod == w.Pod {
			row = &rows[i]
		}
	}
	ok := err == nil && row != nil && row.CapMiB == float64(p.memGiB*1024) && row.UsedMiB >= float64(w.HoldingMiB)
	detail := fmt.Sprintf("scrape error %v", err)
	if row != nil {
		detail = fmt.Sprintf("after the restart: cap %.0f MiB, used %.0f MiB", row.CapMiB, row.UsedMiB)
	}
	s.report.check(ok, w.Pod+" keeps its cap and accounting through the kubelet restart", "%s", detail)
}

// deletePod deletes the user pod and waits until it is gone.
func (s *scenario) deletePod(ctx context.Context, name string) error {
	if err := s.client.CoreV1().Pods(workloadNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("gpunode: delete pod %s: %w", name, err)
	}
	return s.waitFor(ctx, 2*time.Minute, "pod "+name+" gone", func(ctx context.Context) error {
		_, err := s.client.CoreV1().Pods(workloadNamespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// rollDaemonSet changes the image tag with helm upgrade, as a release
// upgrade does: every tessera image is given a second tag (same content)
// in the node's containerd, and the DaemonSet's pod (device plugin and
// monitor) is replaced by one running the new tag while the workloads run.
// It checks that the new pod runs the new images, the new monitor
// accounts for each workload as before and the new plugin registered with
// the kubelet.
func (s *scenario) rollDaemonSet(ctx context.Context, ws []*Workload, ps []probeSpec) error {
	before := map[string]MetricRow{}
	rows, err := s.scrapeRows(ctx)
	if err != nil {
		return err
	}
	for _, r := range rows {
		before[r.Pod] = r
	}
	old := s.nodePod
	rolled := time.Now()
	tag, err := s.retagImages(ctx, rolled)
	if err != nil {
		return err
	}
	if err := s.runHelm(ctx, "upgrade", "--set-string", "image.tag="+tag); err != nil {
		return err
	}
	if err := s.waitNodePod(ctx, old); err != nil {
		return err
	}
	s.logf("gpunode: helm upgrade --set image.tag=%s rolled the node DaemonSet: %s replaced by %s in %v", tag, old, s.nodePod, time.Since(rolled).Round(time.Millisecond))
	images, err := s.podImages(ctx, s.nodePod)
	s.report.check(err == nil && allTagged(images, tag), "the rolled node pod runs the new image tag "+tag, "%v (%v)", images, err)
	reg := s.waitFor(ctx, time.Minute, "the new device plugin registered", func(ctx context.Context) error {
		n, err := s.pluginRegistrations(ctx)
		if err == nil && n < 1 {
			err = fmt.Errorf("not registered yet")
		}
		return err
	})
	s.report.check(reg == nil, "the rolled device plugin registers with the kubelet", "%s", okOr(reg, "pod "+s.nodePod))
	for i, w := range ws {
		want := before[w.Pod]
		var got MetricRow
		err := s.waitFor(ctx, time.Minute, "the series of "+w.Pod+" from the new monitor", func(ctx context.Context) error {
			rows, err := s.scrapeRows(ctx)
			if err != nil {
				return err
			}
			for _, r := range rows {
				if r.Pod == w.Pod && r.Namespace == w.Namespace {
					got = r
					return nil
				}
			}
			return fmt.Errorf("no series of %s", w.Pod)
		})
		s.report.check(err == nil && got.CapMiB == float64(ps[i].memGiB*1024) && got.UsedMiB == want.UsedMiB && got.GPU == want.GPU,
			w.Pod+" keeps its accounting through the DaemonSet roll", "before: %.0f of %.0f MiB on %s; after: %.0f of %.0f MiB on %s (%v)",
			want.UsedMiB, want.CapMiB, want.GPU, got.UsedMiB, got.CapMiB, got.GPU, err)
	}
	s.report.timed("helm upgrade -> DaemonSet rolled, accounting checked", rolled)
	return nil
}

// retagImages names every tessera image of `make images` a second time in
// the node's containerd, with the tag <tag>-rolled<time>, and returns that tag.
func (s *scenario) retagImages(ctx context.Context, at time.Time) (string, error) {
	var tag string
	for _, ref := range s.report.Install.Images {
		if ref == ProbeImage {
			continue
		}
		t, err := name.NewTag(ref)
		if err != nil {
			return "", fmt.Errorf("gpunode: image %q: %w", ref, err)
		}
		tag = t.TagStr() + "-rolled" + at.UTC().Format("150405")
		src, err := imagebuild.ContainerdName(ref)
		if err != nil {
			return "", err
		}
		dst, err := imagebuild.ContainerdName(t.Context().Tag(tag).String())
		if err != nil {
			return "", err
		}
		if err := s.node.TagImage(ctx, src, dst); err != nil {
			return "", err
		}
	}
	if tag == "" {
		return "", fmt.Errorf("gpunode: no tessera images to retag")
	}
	return tag, nil
}

// podImages lists the images of a pod's containers and init containers.
func (s *scenario) podImages(ctx context.Context, pod string) ([]string, error) {
	p, err := s.client.CoreV1().Pods(releaseNamespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
		out = append(out, c.Image)
	}
	return out, nil
}

// allTagged says whether every image has the tag.
func allTagged(images []string, tag string) bool {
	for _, img := range images {
		if !strings.HasSuffix(img, ":"+tag) {
			return false
		}
	}
	return len(images) > 0
}

// okOr is err's text, or ok when err is nil.
func okOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}
