package realnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tessera-gpu/tessera/test/e2e/binaries"
	"github.com/tessera-gpu/tessera/test/e2e/controlplane"
	"github.com/tessera-gpu/tessera/test/e2e/process"
)

// NodeName is the real node's name.
const NodeName = "realnode"

// stopGrace is how long kubelet and containerd get after SIGTERM.
const stopGrace = 10 * time.Second

// Debian's runc and CNI plugins (packages runc, containernetworking-plugins).
const (
	debianRunc   = "/usr/sbin/runc"
	debianCNIDir = "/usr/lib/cni"
)

// Node is a kubelet and containerd registered with a control plane, inside
// the network namespace the test binary runs in (see Main).
type Node struct {
	Name string
	IP   netip.Addr
	// StartupTime is how long Start took, up to the node being Ready.
	StartupTime time.Duration

	layout     layout
	cp         *controlplane.ControlPlane
	bins       map[binaries.Binary]string
	kubeconfig string
	logDir     string
	logf       func(string, ...any)

	mu         sync.Mutex
	containerd *process.Process
	kubelet    *process.Process
	shims      map[int]bool // every shim PID seen, for the leftovers check
	// serviceProxy serves the kubernetes Service (ServeKubernetesService).
	serviceProxy net.Listener
	stopped      bool
	stopErr      error
}

// Start brings up containerd and the kubelet beside cp, imports the locally
// built images, and waits until the node is Ready. The caller must be
// inside the node's namespace (see Main and Unavailable); Stop tears everything down.
func Start(ctx context.Context, cp *controlplane.ControlPlane, logf func(string, ...any)) (n *Node, err error) {
	env, err := inside()
	if err != nil {
		return nil, err
	}
	bins, err := binaries.Paths(binaries.Kubelet, binaries.Containerd, binaries.ContainerdShim, binaries.Ctr)
	if err != nil {
		return nil, fmt.Errorf("real node: %w", err)
	}
	for _, p := range []string{debianRunc, debianCNIDir + "/bridge", debianCNIDir + "/host-local", debianCNIDir + "/loopback"} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("real node: %s missing (apt-get install runc containernetworking-plugins; `make e2e-node-deps` does it): %w", p, err)
		}
	}
	ports, err := freeNodePorts(2)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	n = newNode(env, bins, cp.LogDir(), logf)
	n.cp = cp
	n.layout.KubeletPort, n.layout.KubeletHealthzPort = ports[0], ports[1]
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Stop())
			n = nil
		}
	}()
	if err := n.startRuntime(ctx); err != nil {
		return n, err
	}
	logf("realnode: containerd ready, images imported after %v", time.Since(began).Round(time.Millisecond))
	if err := os.WriteFile(n.layout.KubeletConfig(), []byte(n.layout.kubeletConfig(cp.PKI.Files.CACert)), 0o644); err != nil {
		return n, fmt.Errorf("real node: %w", err)
	}
	if n.kubeconfig, err = cp.WriteKubeconfig("kubelet", "system:node:"+NodeName, "system:nodes"); err != nil {
		return n, err
	}
	if err := n.StartKubelet(ctx); err != nil {
		return n, err
	}
	n.StartupTime = time.Since(began)
	logf("realnode: node %s (%s) Ready after %v", n.Name, n.IP, n.StartupTime.Round(time.Millisecond))
	return n, nil
}

func newNode(env insideEnv, bins map[binaries.Binary]string, logDir string, logf func(string, ...any)) *Node {
	return &Node{Name: NodeName, IP: env.nodeIP, bins: bins, logDir: logDir, logf: logf, shims: map[int]bool{},
		layout: layout{
			Dir: env.dir, NodeIP: env.nodeIP, PodCIDR: env.podCIDR, CgroupRoot: "/tessera-e2e-" + env.id,
			CNIBinDir: debianCNIDir, ShimDir: filepath.Join(env.dir, "bin"), Runc: debianRunc,
		}}
}

// startRuntime writes the runtime's files, makes the cgroup root, starts
// containerd and imports the images.
func (n *Node) startRuntime(ctx context.Context) error {
	if err := n.writeFiles(); err != nil {
		return err
	}
	if err := createCgroupRoot(n.layout.CgroupRoot); err != nil {
		return err
	}
	if err := n.startContainerd(ctx); err != nil {
		return err
	}
	return n.importImages(ctx)
}

// writeFiles writes the configurations and the shim link.
func (n *Node) writeFiles() error {
	l := n.layout
	for _, d := range []string{l.ContainerdRoot(), l.ContainerdState(), l.CDIDir(), l.CNIConfDir(), l.KubeletRoot(), l.ShimDir, l.Dir + "/images", l.Dir + "/kubelet-pki"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("real node: %w", err)
		}
	}
	// containerd finds its shim as containerd-shim-runc-v2 on PATH.
	if err := os.Symlink(n.bins[binaries.ContainerdShim], filepath.Join(l.ShimDir, "containerd-shim-runc-v2")); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("real node: shim link: %w", err)
	}
	files := map[string]string{
		l.ContainerdConfig(): l.containerdConfig(),
		filepath.Join(l.CNIConfDir(), "10-tessera-e2e.conflist"): l.bridgeConflist(),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return fmt.Errorf("real node: %w", err)
		}
	}
	return nil
}

func (n *Node) startContainerd(ctx context.Context) error {
	p, err := process.Start(process.Spec{
		Name: "containerd", Path: n.bins[binaries.Containerd], LogDir: n.logDir,
		Args: []string{"--config", n.layout.ContainerdConfig(), "--log-level", "info"},
		Env:  []string{"PATH=" + n.layout.ShimDir + ":" + os.Getenv("PATH")},
	})
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.containerd = p
	n.mu.Unlock()
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.WaitReady(wait, func(ctx context.Context) error {
		_, err := n.ctr(ctx, "version")
		return err
	}); err != nil {
		return fmt.Errorf("containerd not ready: %w; log tail (%s):\n%s", err, p.LogPath, p.Tail(4096))
	}
	return nil
}

// ctr runs ctr against the node's containerd in the CRI namespace.
func (n *Node) ctr(ctx context.Context, args ...string) ([]byte, error) {
	args = append([]string{"--address", n.layout.ContainerdSocket(), "--namespace", "k8s.io"}, args...)
	out, err := exec.CommandContext(ctx, n.bins[binaries.Ctr], args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %v: %w: %s", args[4:], err, out)
	}
	return out, nil
}

// importImages builds the pause and workload images and imports them.
func (n *Node) importImages(ctx context.Context) error {
	archives, err := buildImages(ctx, n.layout.Dir+"/images")
	if err != nil {
		return fmt.Errorf("real node images: %w", err)
	}
	for _, a := range archives {
		if _, err := n.ctr(ctx, "images", "import", a); err != nil {
			return fmt.Errorf("real node images: %w", err)
		}
	}
	return nil
}

// StartKubelet starts the kubelet and waits until the node is Ready with a
// heartbeat from this kubelet.
func (n *Node) StartKubelet(ctx context.Context) error {
	l := n.layout
	began := metav1.Now()
	p, err := process.Start(process.Spec{
		Name: "kubelet", Path: n.bins[binaries.Kubelet], LogDir: n.logDir,
		Args: []string{
			"--config=" + l.KubeletConfig(),
			"--kubeconfig=" + n.kubeconfig,
			"--root-dir=" + l.KubeletRoot(),
			"--cert-dir=" + l.Dir + "/kubelet-pki",
			"--node-ip=" + l.NodeIP.String(),
			"--hostname-override=" + NodeName,
			"--v=2",
		},
	})
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.kubelet = p
	n.mu.Unlock()
	wait, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := p.WaitReady(wait, func(ctx context.Context) error { return n.readySince(ctx, began) }); err != nil {
		return fmt.Errorf("kubelet: node %s not Ready: %w; log tail (%s):\n%s", NodeName, err, p.LogPath, p.Tail(4096))
	}
	return nil
}

// readySince succeeds when the node is Ready with a heartbeat at or after t.
func (n *Node) readySince(ctx context.Context, t metav1.Time) error {
	node, err := n.cp.Client().CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status != corev1.ConditionTrue {
			return fmt.Errorf("Ready=%s: %s: %s", c.Status, c.Reason, c.Message)
		}
		if c.LastHeartbeatTime.Add(time.Second).Before(t.Time) {
			return fmt.Errorf("Ready, but last heartbeat %v is from before %v", c.LastHeartbeatTime, t)
		}
		return nil
	}
	return fmt.Errorf("no Ready condition yet")
}

// StopKubelet stops the kubelet (SIGTERM, then SIGKILL); pods keep running.
func (n *Node) StopKubelet() {
	n.mu.Lock()
	p := n.kubelet
	n.kubelet = nil
	n.mu.Unlock()
	if p != nil {
		_ = p.Stop(stopGrace)
	}
}

// RestartKubelet stops and starts the kubelet and waits for Ready again.
func (n *Node) RestartKubelet(ctx context.Context) error {
	n.StopKubelet()
	return n.StartKubelet(ctx)
}

// Err reports a kubelet or containerd that died.
func (n *Node) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for _, p := range []*process.Process{n.containerd, n.kubelet} {
		if p == nil {
			continue
		}
		if done, err := p.Exited(); done {
			errs = append(errs, fmt.Errorf("%s (pid %d) exited: %v; log tail:\n%s", p.Name, p.PID, err, p.Tail(2048)))
		}
	}
	return errors.Join(errs...)
}

// LogTails is the end of the kubelet's and containerd's logs.
func (n *Node) LogTails() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := ""
	for _, p := range []*process.Process{n.containerd, n.kubelet} {
		if p != nil {
			s += fmt.Sprintf("--- %s (pid %d) %s:\n%s\n", p.Name, p.PID, p.LogPath, p.Tail(4000))
		}
	}
	return s
}

// CDIDir is the directory containerd reads CDI specs from.
func (n *Node) CDIDir() string { return n.layout.CDIDir() }

// Dir holds everything the node writes.
func (n *Node) Dir() string { return n.layout.Dir }

// Stop tears the node down: the kubelet; every pod sandbox through the CRI
// (containerd stops the containers, removes their network and mounts, and
// the shims exit); containerd; then whatever is left by recorded PID, cgroup
// and mount point. It returns what could not be removed or was still
// there afterwards. Safe to call more than once.
func (n *Node) Stop() error {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return n.stopErr
	}
	n.stopped = true
	n.mu.Unlock()

	var errs []error
	n.mu.Lock()
	if n.serviceProxy != nil {
		_ = n.serviceProxy.Close()
	}
	n.mu.Unlock()
	n.StopKubelet()
	n.recordShims()
	n.mu.Lock()
	ctrd := n.containerd
	n.mu.Unlock()
	if ctrd != nil {
		if done, _ := ctrd.Exited(); !done {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if err := n.removeSandboxes(ctx); err != nil {
				errs = append(errs, err)
			}
			cancel()
		}
		n.recordShims()
		_ = ctrd.Stop(stopGrace)
	}
	// Backstop: anything the runtime did not clean up.
	for pid := range n.shims {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err := removeCgroups(n.layout.CgroupRoot); err != nil {
		errs = append(errs, err)
	}
	if err := unmountUnder(n.layout.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := waitGone(n.shimList(), 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := leftovers(n.layout, n.shimList()); err != nil {
		errs = append(errs, fmt.Errorf("real node teardown left: %w", err))
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(n.layout.Dir); err != nil {
			errs = append(errs, fmt.Errorf("real node: remove %s: %w", n.layout.Dir, err))
		}
	}
	n.mu.Lock()
	n.stopErr = errors.Join(errs...)
	n.mu.Unlock()
	return n.stopErr
}

func (n *Node) recordShims() {
	for _, pid := range shimPIDs(n.layout.ContainerdSocket()) {
		n.shims[pid] = true
	}
}

func (n *Node) shimList() []int {
	var out []int
	for pid := range n.shims {
		out = append(out, pid)
	}
	return out
}

// removeSandboxes stops and removes every pod sandbox through the CRI.
func (n *Node) removeSandboxes(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+n.layout.ContainerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("CRI client: %w", err)
	}
	defer conn.Close()
	rt := cri.NewRuntimeServiceClient(conn)
	list, err := rt.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("CRI ListPodSandbox: %w", err)
	}
	var errs []error
	for _, s := range list.Items {
		if _, err := rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("CRI StopPodSandbox %s: %w", s.Metadata.GetName(), err))
		}
		if _, err := rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("CRI RemovePodSandbox %s: %w", s.Metadata.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// waitGone waits until none of pids is alive.
func waitGone(pids []int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		var left []int
		for _, pid := range pids {
			if alive(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still alive after %v", left, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeNodePorts are free ports on 127.0.0.1 (the kubelet listens on the
// node IP with the same port number; both are inside the namespace).
func freeNodePorts(k int) ([]int, error) {
	out := make([]int, 0, k)
	for len(out) < k {
		p, err := controlplane.FreePort()
		if err != nil {
			return nil, err
		}
		if len(out) == 0 || out[0] != p {
			out = append(out, p)
		}
	}
	return out, nil
}

// ReadySandboxes counts the pod sandboxes containerd has in state Ready.
func (n *Node) ReadySandboxes(ctx context.Context) (int, error) {
	conn, err := grpc.NewClient("unix://"+n.layout.ContainerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, fmt.Errorf("CRI client: %w", err)
	}
	defer conn.Close()
	list, err := cri.NewRuntimeServiceClient(conn).ListPodSandbox(ctx, &cri.ListPodSandboxRequest{
		Filter: &cri.PodSandboxFilter{State: &cri.PodSandboxStateValue{State: cri.PodSandboxState_SANDBOX_READY}},
	})
	if err != nil {
		return 0, fmt.Errorf("CRI ListPodSandbox: %w", err)
	}
	return len(list.Items), nil
}

// PodCgroups lists the cgroups the kubelet made for the pod with uid, in
// every hierarchy.
func (n *Node) PodCgroups(uid string) []string {
	var found []string
	dirs, _ := cgroupDirs(n.layout.CgroupRoot)
	for _, d := range dirs {
		for _, pattern := range []string{"kubepods/pod" + uid, "kubepods/*/pod" + uid} {
			m, _ := filepath.Glob(filepath.Join(d, pattern))
			found = append(found, m...)
		}
	}
	return found
}

// CheckNetworkNamespace verifies that containerd, the kubelet and every
// shim run in this process's network namespace, and that it is not the
// host's (PID 1's): nothing of the node can bind or send outside it.
func (n *Node) CheckNetworkNamespace() error {
	own, err := netnsInode("self")
	if err != nil {
		return err
	}
	if host, err := netnsInode("1"); err == nil && host == own {
		return fmt.Errorf("the test runs in the host's network namespace")
	}
	n.mu.Lock()
	pids := map[string]int{}
	for _, p := range []*process.Process{n.containerd, n.kubelet} {
		if p != nil {
			pids[p.Name] = p.PID
		}
	}
	n.mu.Unlock()
	for _, pid := range shimPIDs(n.layout.ContainerdSocket()) {
		pids[fmt.Sprintf("shim %d", pid)] = pid
	}
	var errs []error
	for name, pid := range pids {
		ino, err := netnsInode(fmt.Sprint(pid))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		} else if ino != own {
			errs = append(errs, fmt.Errorf("%s (pid %d) runs in another network namespace", name, pid))
		}
	}
	return errors.Join(errs...)
}

// netnsInode identifies the network namespace of /proc/<pid>.
func netnsInode(pid string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/"+pid+"/ns/net", &st); err != nil {
		return 0, fmt.Errorf("network namespace of %s: %w", pid, err)
	}
	return st.Ino, nil
}

// ImportImage imports an image archive (docker save or OCI layout, as
// `make images` writes them) into the node's containerd, where the kubelet
// finds it (the CRI's k8s.io namespace).
func (n *Node) ImportImage(ctx context.Context, archive string) error {
	if _, err := n.ctr(ctx, "images", "import", archive); err != nil {
		return fmt.Errorf("real node: import %s: %w", archive, err)
	}
	return nil
}

// TagImage gives the image src a second name dst in the node's containerd
// (`ctr images tag`): same content, no new layers.
func (n *Node) TagImage(ctx context.Context, src, dst string) error {
	if _, err := n.ctr(ctx, "images", "tag", "--force", src, dst); err != nil {
		return fmt.Errorf("real node: tag %s as %s: %w", src, dst, err)
	}
	return nil
}

// DevicePluginDir is the kubelet's device plugin directory: the kubelet
// fixes it at /var/lib/kubelet/device-plugins whatever its root directory
// (the supervisor removes it after the run when the run created it).
func (n *Node) DevicePluginDir() string { return "/var/lib/kubelet/device-plugins" }

// PodResourcesDir holds the kubelet's PodResources socket (kubelet.sock).
func (n *Node) PodResourcesDir() string { return n.layout.KubeletRoot() + "/pod-resources" }

// KubernetesServiceIP is the kubernetes Service's cluster IP: the first
// address of controlplane.ServiceCIDR.
const KubernetesServiceIP = "10.0.0.1"

// ServeKubernetesService makes the API server reachable from pods the way
// in-cluster clients look for it, at the kubernetes Service's address
// (KUBERNETES_SERVICE_HOST:443), as kube-proxy would: the address goes on
// the namespace's loopback and a proxy here forwards each connection to
// the API server on 127.0.0.1. The API server's certificate names the
// address. Refused outside the node's namespace; Stop ends the proxy.
func (n *Node) ServeKubernetesService() error {
	if err := n.checkInsideNamespace(); err != nil {
		return fmt.Errorf("kubernetes Service: %w", err)
	}
	u, err := url.Parse(n.cp.URL)
	if err != nil {
		return fmt.Errorf("kubernetes Service: API server URL: %w", err)
	}
	if err := exec.Command("ip", "addr", "add", KubernetesServiceIP+"/32", "dev", "lo").Run(); err != nil {
		if out, _ := exec.Command("ip", "-o", "addr", "show", "dev", "lo").Output(); !strings.Contains(string(out), KubernetesServiceIP+"/32") {
			return fmt.Errorf("kubernetes Service: ip addr add %s/32 dev lo: %w", KubernetesServiceIP, err)
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(KubernetesServiceIP, "443"))
	if err != nil {
		return fmt.Errorf("kubernetes Service: %w", err)
	}
	n.mu.Lock()
	n.serviceProxy = l
	n.mu.Unlock()
	go proxy(l, u.Host)
	return nil
}

// proxy forwards every connection accepted on l to target until l closes.
func proxy(l net.Listener, target string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := net.DialTimeout("tcp", target, 10*time.Second)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
			<-done
		}()
	}
}

// checkInsideNamespace verifies that this process runs in the network
// namespace the supervisor pinned for this run (/run/netns/tessera-e2e-<id>).
func (n *Node) checkInsideNamespace() error {
	env, err := inside()
	if err != nil {
		return err
	}
	var pinned, own syscall.Stat_t
	path := netnsDir + "/tessera-e2e-" + env.id
	if err := syscall.Stat(path, &pinned); err != nil {
		return fmt.Errorf("the run's network namespace: %w", err)
	}
	if err := syscall.Stat("/proc/self/ns/net", &own); err != nil {
		return fmt.Errorf("own network namespace: %w", err)
	}
	if pinned.Ino != own.Ino || pinned.Dev != own.Dev {
		return fmt.Errorf("this process is not inside %s", path)
	}
	return nil
}
