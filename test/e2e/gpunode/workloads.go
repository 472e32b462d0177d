package gpunode

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
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
	s.logf("gpunode: kubelet restarted; node Ready and the plugin's resources back %v later", s.report.timed("kubelet restart -> plugin re-registered", restarted).Round(time.Millisecond))
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
	return nil
}

func okOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
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
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: workloadNamespace},
		Spec: corev1.PodSpec{
			SchedulerName:                 schedulerName,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  new(false),
			Containers: []corev1.Container{{
				Name: "main", Image: ProbeImage, ImagePullPolicy: corev1.PullNever,
				Args:      []string{"-step", "512", "-hold", fmt.Sprint(p.holdMiB)},
				Resources: corev1.ResourceRequirements{Limits: limits},
			}},
		},
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
