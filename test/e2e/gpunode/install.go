package gpunode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/tessera-gpu/tessera/test/e2e/binaries"
)

// The Helm release.
const (
	releaseName      = "tessera"
	releaseNamespace = "tessera-system"
	chartPath        = "deploy/helm/tessera"
	// simulatedValues is the chart's values set for a simulated GPU node.
	simulatedValues = chartPath + "/ci/simulated-node-values.yaml"
	// schedulerName is the chart's default scheduler.schedulerName.
	schedulerName = "tessera-scheduler"
	// leaseName is the chart's default scheduler.leaderElection.leaseName.
	leaseName = "tessera-scheduler"
	// monitorPort is the chart's default node.monitor.metricsPort.
	monitorPort = 9394
)

// Resource names the device plugin advertises.
const (
	resourceGPUMem  corev1.ResourceName = "tessera.io/gpu-mem"
	resourceGPUCore corev1.ResourceName = "tessera.io/gpu-core"
)

// install imports the images and installs the chart, then waits for the
// DaemonSet's pod, the plugin's registration and the scheduler's leader.
func (s *scenario) install(ctx context.Context) error {
	began := time.Now()
	if err := s.importImages(ctx); err != nil {
		return err
	}
	s.report.timed("images imported into containerd", began)
	values, err := s.writeValues()
	if err != nil {
		return err
	}
	helm, err := binaries.Helm.Path()
	if err != nil {
		return fmt.Errorf("gpunode: %w", err)
	}
	installed := time.Now()
	cmd := exec.CommandContext(ctx, helm, "install", releaseName, filepath.Join(s.opts.RepoRoot, chartPath),
		"--namespace", releaseNamespace, "--create-namespace",
		"-f", filepath.Join(s.opts.RepoRoot, simulatedValues), "-f", values)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.cp.AdminKubeconfig, "HELM_CACHE_HOME="+s.work+"/helm/cache",
		"HELM_CONFIG_HOME="+s.work+"/helm/config", "HELM_DATA_HOME="+s.work+"/helm/data")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("gpunode: helm install: %w\n%s", err, out)
	}
	s.report.Install.Release, s.report.Install.Namespace, s.report.Install.Chart = releaseName, releaseNamespace, chartPath
	s.logf("gpunode: helm install %s %s -n %s: done in %v", releaseName, chartPath, releaseNamespace, time.Since(installed).Round(time.Millisecond))

	if err := s.waitNodePod(ctx); err != nil {
		return err
	}
	s.logf("gpunode: node DaemonSet pod Running (device-plugin, vgpu-monitor) %v after install", s.report.timed("helm install -> DaemonSet pod Running", installed).Round(time.Millisecond))
	if err := s.waitAllocatable(ctx); err != nil {
		return err
	}
	s.logf("gpunode: plugin registered with the kubelet: allocatable %v", s.report.Node.Allocatable)
	s.report.timed("helm install -> plugin registered", installed)
	if err := s.waitLeader(ctx); err != nil {
		return err
	}
	s.logf("gpunode: cluster scheduler ready, leader %s", s.report.Install.Leader)
	s.report.timed("helm install -> scheduler leader", installed)
	pods, err := s.client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		var cs []string
		for _, c := range p.Spec.Containers {
			cs = append(cs, c.Name)
		}
		s.report.Install.Pods = append(s.report.Install.Pods, PodSummary{Name: p.Name, Node: p.Spec.NodeName, Phase: string(p.Status.Phase), Containers: cs})
	}
	return nil
}

// importImages imports every archive of `make images` and the workload image.
func (s *scenario) importImages(ctx context.Context) error {
	archives, err := filepath.Glob(filepath.Join(s.opts.ImagesDir, "*.tar"))
	if err != nil {
		return err
	}
	if len(archives) == 0 {
		return fmt.Errorf("gpunode: no image archives in %s (make images)", s.opts.ImagesDir)
	}
	probe, err := buildProbeImage(ctx, s.opts.RepoRoot, s.work)
	if err != nil {
		return err
	}
	archives = append(archives, probe)
	for _, a := range archives {
		if err := s.node.ImportImage(ctx, a); err != nil {
			return err
		}
	}
	digests, err := os.ReadFile(filepath.Join(s.opts.ImagesDir, "digests.txt"))
	if err != nil {
		return fmt.Errorf("gpunode: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(digests)), "\n") {
		s.report.Install.Images = append(s.report.Install.Images, strings.Fields(line)[0])
	}
	s.report.Install.Images = append(s.report.Install.Images, ProbeImage)
	s.logf("gpunode: imported %d images into the node's containerd: %v", len(archives), s.report.Install.Images)
	return nil
}

// writeValues writes the values of this node over the simulated-node set:
// the host paths of this run (the kubelet's PodResources directory under
// its root, the hook and state directories and the simulated driver under
// the node's directory), the images `make images` tagged, no Prometheus
// Operator objects (no CRDs here) and no admission policy (the pods name
// their scheduler).
func (s *scenario) writeValues() (string, error) {
	stateDir := filepath.Dir(s.gpu.StatePath)
	v := map[string]any{
		"image": map[string]any{"tag": "", "pullPolicy": "IfNotPresent"},
		"node": map[string]any{
			"hostPaths": map[string]any{
				"kubeletDevicePlugins": s.node.DevicePluginDir(),
				"podResources":         s.node.PodResourcesDir(),
				"hookDir":              filepath.Join(s.node.Dir(), "tessera", "lib"),
				"stateDir":             filepath.Join(s.node.Dir(), "tessera", "state"),
				"dev":                  s.gpu.DevRoot,
			},
			"driver": map[string]any{
				"mode":       "hostPath",
				"libraryDir": s.gpu.LibDir,
				"env":        map[string]any{"FAKEGPU_DEVICES": s.gpu.Devices, "FAKEGPU_STATE": s.gpu.StatePath},
				"extraMounts": []any{
					map[string]any{"name": "fakegpu-state", "hostPath": stateDir, "mountPath": stateDir},
				},
			},
			"devicePlugin": map[string]any{"config": map[string]any{"deviceListStrategy": "cdi-cri", "cdiKind": "nvidia.com/gpu"}},
		},
		"metrics": map[string]any{
			"serviceMonitor": map[string]any{"enabled": false},
			"podMonitor":     map[string]any{"enabled": false},
		},
		"webhook": map[string]any{"enabled": false},
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return "", err
	}
	path := filepath.Join(s.work, "realnode-values.yaml")
	return path, os.WriteFile(path, b, 0o644)
}

// waitNodePod waits until the DaemonSet's pod runs with every container ready.
func (s *scenario) waitNodePod(ctx context.Context) error {
	return s.waitFor(ctx, 3*time.Minute, "the node DaemonSet's pod Running and ready", func(ctx context.Context) error {
		pods, err := s.client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node"})
		if err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("%d node pods", len(pods.Items))
		}
		p := pods.Items[0]
		if err := podReady(&p); err != nil {
			return err
		}
		s.monitorURL = fmt.Sprintf("http://%s:%d/metrics", p.Status.PodIP, monitorPort)
		return nil
	})
}

// podReady succeeds when p runs with every container ready.
func podReady(p *corev1.Pod) error {
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("pod %s: phase %s %s", p.Name, p.Status.Phase, describeStatuses(p))
	}
	for _, c := range p.Status.ContainerStatuses {
		if !c.Ready {
			return fmt.Errorf("pod %s: container %s not ready %s", p.Name, c.Name, describeStatuses(p))
		}
	}
	return nil
}

// describeStatuses names each container's state.
func describeStatuses(p *corev1.Pod) string {
	var parts []string
	for _, c := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		st := "running"
		switch {
		case c.State.Waiting != nil:
			st = "waiting " + c.State.Waiting.Reason + ": " + c.State.Waiting.Message
		case c.State.Terminated != nil:
			st = fmt.Sprintf("terminated %s (exit %d): %s", c.State.Terminated.Reason, c.State.Terminated.ExitCode, c.State.Terminated.Message)
		}
		parts = append(parts, fmt.Sprintf("%s[%s, restarts %d]", c.Name, st, c.RestartCount))
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			parts = append(parts, fmt.Sprintf("%s: %s", c.Type, c.Message))
		}
	}
	return "(" + strings.Join(parts, "; ") + ")"
}

// waitAllocatable waits until the node's allocatable lists the plugin's
// memory and compute resources.
func (s *scenario) waitAllocatable(ctx context.Context) error {
	return s.waitFor(ctx, 2*time.Minute, "tessera.io resources in the node's allocatable", func(ctx context.Context) error {
		node, err := s.client.CoreV1().Nodes().Get(ctx, s.node.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		alloc := map[string]string{}
		for name, q := range node.Status.Allocatable {
			if strings.HasPrefix(string(name), "tessera.io/") {
				alloc[string(name)] = q.String()
			}
		}
		for _, r := range []corev1.ResourceName{resourceGPUMem, resourceGPUCore} {
			if q, ok := node.Status.Allocatable[r]; !ok || q.IsZero() {
				return fmt.Errorf("allocatable %v lacks %s", alloc, r)
			}
		}
		s.report.Node.Allocatable = alloc
		return nil
	})
}

// waitLeader waits until the scheduler Deployment is available and one
// of its pods holds the Lease.
func (s *scenario) waitLeader(ctx context.Context) error {
	return s.waitFor(ctx, 2*time.Minute, "the cluster scheduler available with a leader", func(ctx context.Context) error {
		deps, err := s.client.AppsV1().Deployments(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=scheduler"})
		if err != nil {
			return err
		}
		if len(deps.Items) != 1 {
			return fmt.Errorf("%d scheduler Deployments", len(deps.Items))
		}
		d := deps.Items[0]
		if d.Status.AvailableReplicas < 1 {
			return fmt.Errorf("Deployment %s: %d of %d replicas available", d.Name, d.Status.AvailableReplicas, *d.Spec.Replicas)
		}
		lease, err := s.client.CoordinationV1().Leases(releaseNamespace).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return fmt.Errorf("Lease %s has no holder", leaseName)
		}
		pods, err := s.client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=scheduler"})
		if err != nil {
			return err
		}
		var names []string
		for _, p := range pods.Items {
			names = append(names, p.Name)
			if strings.HasPrefix(*lease.Spec.HolderIdentity, p.Name) && p.Status.Phase == corev1.PodRunning {
				s.report.Install.Leader = *lease.Spec.HolderIdentity
				return nil
			}
		}
		sort.Strings(names)
		return fmt.Errorf("Lease holder %q is none of the running scheduler pods %v", *lease.Spec.HolderIdentity, names)
	})
}

// podLogs is the log of every container of the namespace's pods.
func (s *scenario) podLogs(ctx context.Context, ns string) string {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	pods, err := s.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Sprintf("pods of %s: %v", ns, err)
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "--- pod %s/%s on %q: %s %s\n", ns, p.Name, p.Spec.NodeName, p.Status.Phase, describeStatuses(&p))
		for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			tail := int64(40)
			out, err := s.client.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: &tail}).DoRaw(ctx)
			fmt.Fprintf(&b, "  [%s] %s%v\n", c.Name, out, errOrNil(err))
		}
	}
	return b.String()
}

func errOrNil(err error) any {
	if err == nil {
		return ""
	}
	return err
}

// waitFor polls check every 200 ms until it succeeds or d passes.
func (s *scenario) waitFor(ctx context.Context, d time.Duration, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		attempt, stop := context.WithTimeout(ctx, 10*time.Second)
		err := check(attempt)
		stop()
		if err == nil {
			return nil
		}
		if nerr := s.node.Err(); nerr != nil {
			return fmt.Errorf("gpunode: waiting for %s: %w", what, nerr)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gpunode: %s: not within %v: %v", what, d, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
