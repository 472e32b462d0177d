package gpunode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/tessera-gpu/tessera/test/e2e/controlplane"
	"github.com/tessera-gpu/tessera/test/e2e/realnode"
	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// scenario is one run: the cluster it started and the report it fills.
type scenario struct {
	opts   Options
	logf   func(string, ...any)
	report *Report

	cp     *controlplane.ControlPlane
	node   *realnode.Node
	gpu    *realnode.SimulatedGPU
	client kubernetes.Interface
	// work is a directory of this run's own files (values, probe build).
	work string
	// monitorURL is the vgpu-monitor's /metrics on its pod's address.
	monitorURL string
}

func newScenario(opts Options) (*scenario, error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.RepoRoot == "" {
		root, err := realnode.MainModuleRoot()
		if err != nil {
			return nil, err
		}
		opts.RepoRoot = root
	}
	if opts.ImagesDir == "" {
		opts.ImagesDir = filepath.Join(opts.RepoRoot, "build", "images")
	}
	if opts.Devices == "" {
		opts.Devices = DefaultDevices
	}
	return &scenario{opts: opts, logf: opts.Logf, report: &Report{}}, nil
}

// run runs every step; it tears everything down before it returns.
func (s *scenario) run(ctx context.Context) (err error) {
	began := time.Now()
	defer func() {
		if err != nil {
			s.dumpLogs()
		}
		err = errors.Join(err, s.stop())
		s.report.timed("scenario total", began)
		if failed := s.report.Failed(); err == nil && len(failed) > 0 {
			err = fmt.Errorf("gpunode: %d checks failed, the first: %s: %s", len(failed), failed[0].What, failed[0].Detail)
		}
	}()
	if s.work, err = os.MkdirTemp("", "tessera-gpunode-"); err != nil {
		return err
	}
	if err := s.build(ctx); err != nil {
		return err
	}
	if err := s.startCluster(ctx); err != nil {
		return err
	}
	if err := s.install(ctx); err != nil {
		return err
	}
	return s.workloads(ctx)
}

// build runs `make images fakegpu` (cached by make) unless told not to.
func (s *scenario) build(ctx context.Context) error {
	if s.opts.SkipBuild {
		return nil
	}
	began := time.Now()
	s.logf("gpunode: make images fakegpu (tessera's binaries, the hook, OCI image archives; cached)")
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", s.opts.RepoRoot, "images", "fakegpu")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("gpunode: make images fakegpu: %w\n%s", err, out)
	}
	s.logf("gpunode: build done in %v", s.report.timed("build (make images fakegpu)", began).Round(time.Millisecond))
	return nil
}

// startCluster starts the control plane, kube-scheduler (for the chart's
// own pods), the real node with the simulated GPU installed, and the
// kubernetes Service for in-cluster clients.
func (s *scenario) startCluster(ctx context.Context) error {
	began := time.Now()
	var err error
	s.cp, err = controlplane.Start(ctx, controlplane.Options{
		Logf: s.logf,
		// Logs reach the kubelet at the node IP: the node's Hostname
		// address ("realnode") resolves nowhere.
		APIServerArgs: []string{"--kubelet-preferred-address-types=InternalIP"},
	})
	if err != nil {
		return err
	}
	s.client = s.cp.Client()
	if _, err := s.cp.StartKubeScheduler(ctx, controlplane.KubeSchedulerOptions{}); err != nil {
		return err
	}
	s.node, err = realnode.Start(ctx, s.cp, s.logf)
	if err != nil {
		return err
	}
	libDir, err := fakegpu.LibDir()
	if err != nil {
		return err
	}
	if s.gpu, err = s.node.InstallSimulatedGPU(ctx, s.opts.Devices, libDir); err != nil {
		return err
	}
	if err := s.node.ServeKubernetesService(); err != nil {
		return err
	}
	s.report.Node = NodeReport{Name: s.node.Name, IP: s.node.IP.String(), GPUs: s.gpu.UUIDs(), CDISpec: s.gpu.SpecPath}
	s.logf("gpunode: node %s (%s) Ready with %d simulated GPUs, CDI spec %s", s.node.Name, s.node.IP, len(s.gpu.UUIDs()), s.gpu.SpecPath)
	s.report.timed("control plane + real node Ready", began)
	return nil
}

// stop tears down the node and the control plane and removes the run's files.
func (s *scenario) stop() error {
	var errs []error
	if s.node != nil {
		if err := s.node.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("real node teardown: %w", err))
		}
	}
	if s.cp != nil {
		s.cp.Stop()
	}
	if s.work != "" {
		errs = append(errs, os.RemoveAll(s.work))
	}
	return errors.Join(errs...)
}

// dumpLogs narrates the ends of the components' logs after a failure.
func (s *scenario) dumpLogs() {
	if s.node != nil {
		s.logf("%s", s.node.LogTails())
	}
	if s.cp != nil {
		for _, p := range s.cp.Processes() {
			s.logf("--- %s (pid %d) log tail, %s:\n%s", p.Name, p.PID, p.LogPath, p.Tail(2000))
		}
	}
	if s.client != nil {
		s.logf("%s", s.podLogs(context.Background(), releaseNamespace))
	}
}
