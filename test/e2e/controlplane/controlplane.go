// Package controlplane runs a real Kubernetes control plane for end-to-end
// tests: etcd, kube-apiserver and kube-controller-manager, and on request
// kube-scheduler, from the pinned binaries of package binaries. Everything
// listens on free ports of 127.0.0.1 and keeps its data in one temporary
// directory; Stop ends every process it started (by PID, SIGTERM then
// SIGKILL) and removes the directory.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tessera-gpu/tessera/test/e2e/binaries"
	"github.com/tessera-gpu/tessera/test/e2e/pki"
	"github.com/tessera-gpu/tessera/test/e2e/process"
)

// ServiceCIDR is the cluster's service range; its first address is the
// kubernetes Service, in the API server's certificate.
const ServiceCIDR = "10.0.0.0/24"

// stopGrace is how long a component gets after SIGTERM before SIGKILL.
const stopGrace = 5 * time.Second

// Options configure Start.
type Options struct {
	// Dir holds the data, certificates, kubeconfigs and logs. Empty: a new
	// temporary directory, removed by Stop. A given Dir is left in place.
	Dir string
	// StartTimeout bounds the start of each component (default 2 minutes:
	// a loaded 2-core machine needs tens of seconds for kube-apiserver).
	StartTimeout time.Duration
	// APIServerArgs are appended to kube-apiserver's flags.
	APIServerArgs []string
	// ControllerManagerArgs are appended to kube-controller-manager's flags.
	ControllerManagerArgs []string
	// Logf reports progress (t.Logf); nil is silent.
	Logf func(format string, args ...any)
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	// Dir is the directory of everything the control plane writes.
	Dir string
	// URL is the API server, https://127.0.0.1:<port>.
	URL string
	// AdminKubeconfig is a kubeconfig for a system:masters user.
	AdminKubeconfig string
	// PKI makes further client identities (WriteKubeconfig).
	PKI *pki.Bundle

	opts       Options
	ownDir     bool
	bins       map[binaries.Binary]string
	mu         sync.Mutex
	procs      []*process.Process // in start order
	restConfig *rest.Config
	client     kubernetes.Interface
}

// Start brings up etcd, kube-apiserver and kube-controller-manager and
// waits until the API server is ready and the controller manager has made
// the default ServiceAccount (pods can be created from then on). On error
// everything already started is stopped.
//
// The ports are free when chosen and bound by the components seconds later:
// another test binary (make test runs the e2e packages in parallel) may bind
// one first. A start that failed on a port in use is made again, in a fresh
// directory with fresh ports, up to three times.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	for attempt := 1; ; attempt++ {
		cp, err := start(ctx, opts)
		if err == nil || attempt == 3 || opts.Dir != "" || !strings.Contains(err.Error(), "address already in use") {
			return cp, err
		}
		if opts.Logf != nil {
			opts.Logf("controlplane: a port was taken before its component bound it; starting again: %v", err)
		}
	}
}

func start(ctx context.Context, opts Options) (cp *ControlPlane, err error) {
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	bins, err := binaries.Paths(binaries.Etcd, binaries.KubeAPIServer, binaries.KubeControllerManager)
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	cp = &ControlPlane{Dir: opts.Dir, opts: opts, bins: bins}
	if cp.Dir == "" {
		removeOrphanDirs(opts.Logf)
		if cp.Dir, err = os.MkdirTemp("", tempPrefix); err != nil {
			return nil, fmt.Errorf("control plane: %w", err)
		}
		cp.ownDir = true
		if err := os.WriteFile(filepath.Join(cp.Dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
			return cp, fmt.Errorf("control plane: %w", err)
		}
	}
	defer func() {
		if err != nil {
			cp.Stop()
			cp = nil
		}
	}()
	for _, d := range []string{"pki", "logs", "etcd", "certs"} {
		if err := os.MkdirAll(filepath.Join(cp.Dir, d), 0o700); err != nil {
			return cp, fmt.Errorf("control plane: %w", err)
		}
	}
	if cp.PKI, err = pki.New(filepath.Join(cp.Dir, "pki")); err != nil {
		return cp, fmt.Errorf("control plane PKI: %w", err)
	}
	ports, err := freePorts(4)
	if err != nil {
		return cp, err
	}
	etcdClient, etcdPeer, apiPort, kcmPort := ports[0], ports[1], ports[2], ports[3]
	cp.URL = "https://127.0.0.1:" + strconv.Itoa(apiPort)

	began := time.Now()
	if err := cp.startEtcd(ctx, etcdClient, etcdPeer); err != nil {
		return cp, err
	}
	opts.Logf("controlplane: etcd ready after %v", time.Since(began).Round(time.Millisecond))
	if cp.AdminKubeconfig, err = cp.WriteKubeconfig("admin", "tessera-e2e-admin", "system:masters"); err != nil {
		return cp, err
	}
	if err := cp.startAPIServer(ctx, etcdClient, apiPort); err != nil {
		return cp, err
	}
	opts.Logf("controlplane: kube-apiserver ready after %v", time.Since(began).Round(time.Millisecond))
	if err := cp.startControllerManager(ctx, kcmPort); err != nil {
		return cp, err
	}
	opts.Logf("controlplane: kube-controller-manager ready after %v (%s)", time.Since(began).Round(time.Millisecond), cp.URL)
	return cp, nil
}

// WriteKubeconfig writes <Dir>/<name>.kubeconfig for a client certificate
// of user in groups and returns its path.
func (cp *ControlPlane) WriteKubeconfig(name, user string, groups ...string) (string, error) {
	c, err := cp.PKI.NewClient(user, groups...)
	if err != nil {
		return "", err
	}
	path := filepath.Join(cp.Dir, name+".kubeconfig")
	return path, cp.PKI.WriteKubeconfig(path, cp.URL, c)
}

// RESTConfig is a fresh admin client configuration with client-side rate
// limits of qps and burst.
func (cp *ControlPlane) RESTConfig(qps float32, burst int) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.AdminKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = qps, burst
	cfg.UserAgent = "tessera-e2e"
	return cfg, nil
}

// Client is an admin clientset (QPS 1000, burst 1000).
func (cp *ControlPlane) Client() kubernetes.Interface { return cp.client }

// LogDir is where every component writes <name>.log.
func (cp *ControlPlane) LogDir() string { return filepath.Join(cp.Dir, "logs") }

// Processes lists the processes started and not stopped yet, in start order.
func (cp *ControlPlane) Processes() []*process.Process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.procs)
}

// StartProcess starts a component beside the control plane (a scheduler,
// kwok) whose log goes to LogDir and which Stop ends with the rest.
func (cp *ControlPlane) StartProcess(spec process.Spec) (*process.Process, error) {
	spec.LogDir = cp.LogDir()
	p, err := process.Start(spec)
	if err != nil {
		return nil, err
	}
	cp.mu.Lock()
	cp.procs = append(cp.procs, p)
	cp.mu.Unlock()
	return p, nil
}

// StopProcess stops p (SIGTERM, SIGKILL after the grace period) and forgets it.
func (cp *ControlPlane) StopProcess(p *process.Process) {
	_ = p.Stop(stopGrace)
	cp.mu.Lock()
	cp.procs = slices.DeleteFunc(cp.procs, func(q *process.Process) bool { return q == p })
	cp.mu.Unlock()
}

// Temporary directories are <TMPDIR>/tessera-e2e-*, with the PID of the
// test binary that made them in ownerFile.
const (
	tempPrefix = "tessera-e2e-"
	ownerFile  = "owner.pid"
)

// removeOrphanDirs removes the directories of test binaries that died
// without their cleanup (a -timeout panic, a SIGKILL): their processes died
// with them (see package process), their files stayed.
func removeOrphanDirs(logf func(string, ...any)) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue // not ours, or still being made
		}
		pid, err := strconv.Atoi(string(b))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		if err := os.RemoveAll(d); err == nil {
			logf("controlplane: removed %s, left by dead test binary %d", d, pid)
		}
	}
}

// Stop ends every process in reverse start order and removes Dir if Start
// made it. It is safe to call more than once.
func (cp *ControlPlane) Stop() {
	procs := cp.Processes()
	for i := len(procs) - 1; i >= 0; i-- {
		cp.StopProcess(procs[i])
	}
	if cp.ownDir && cp.Dir != "" {
		if err := os.RemoveAll(cp.Dir); err != nil {
			cp.opts.Logf("controlplane: remove %s: %v", cp.Dir, err)
		}
	}
}

// Err reports components that exited while the control plane should be
// running, with the tail of their logs.
func (cp *ControlPlane) Err() error {
	var errs []error
	for _, p := range cp.Processes() {
		if done, err := p.Exited(); done {
			errs = append(errs, fmt.Errorf("%s (pid %d) exited: %v; log tail:\n%s", p.Name, p.PID, err, p.Tail(2048)))
		}
	}
	return errors.Join(errs...)
}

// startComponent starts a control-plane binary and waits for ready to
// succeed, failing early if the process exits.
func (cp *ControlPlane) startComponent(ctx context.Context, b binaries.Binary, args []string, ready func(context.Context) error) error {
	p, err := cp.StartProcess(process.Spec{Name: b.Name, Path: cp.bins[b], Args: args})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cp.opts.StartTimeout)
	defer cancel()
	if err := p.WaitReady(ctx, ready); err != nil {
		return fmt.Errorf("%s %s did not become ready: %w; log tail (%s):\n%s", b.Name, b.Version, err, p.LogPath, p.Tail(4096))
	}
	return nil
}
