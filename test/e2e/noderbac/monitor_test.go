package noderbac

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/hostproc"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
	"github.com/tessera-gpu/tessera/internal/monitor/identity/identitytest"
	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/region/regiontest"
	"github.com/tessera-gpu/tessera/internal/statedir"
	"github.com/tessera-gpu/tessera/test/e2e/cluster"
	"github.com/tessera-gpu/tessera/test/e2e/controlplane"
	"github.com/tessera-gpu/tessera/test/e2e/kwoknodes"
	"github.com/tessera-gpu/tessera/test/e2e/process"
	"github.com/tessera-gpu/tessera/test/e2e/workload"
	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// balloonNS holds the owner and the borrower of TestMonitorBinaryRunsBalloons.
const balloonNS = "team"

// TestMonitorBinaryRunsBalloons runs the vgpu-monitor binary as deployed with
// balloon.enabled in its --config, against a real API server as the chart's
// node account (a ServiceAccount token, the balloons rendering's RBAC): a
// settled opted-in owner on a 1024 MiB simulated GPU is lowered by what a
// borrower's cap puts the GPU over (its limits file: cap, ceiling, floor), the
// node's tessera.io/node-balloons says what is lent, and when the owner waits
// for its memory the borrower (using all it has) is evicted through the
// Eviction API: the API server marks it DisruptionTarget/EvictionByEvictionAPI
// and deletes it (kwok, standing in for the kubelet, finishes the deletion);
// the owner stays. The kubelet's PodResources socket is the one part still
// served by the test (identitytest): no real kubelet runs here.
func TestMonitorBinaryRunsBalloons(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	monitorBin := monitorBinary(t, ctx)
	libs, err := fakegpu.LibDir()
	if err != nil {
		t.Fatal(err)
	}
	nodes := kwoknodes.UniformNodes("gpu", 1, kwoknodes.A100SXM80, 1)
	c := cluster.Start(t, cluster.Options{Nodes: nodes})
	admin := c.Client()
	node := nodes[0].Name

	kubeconfig := nodeAccountKubeconfig(t, ctx, c.Client(), c.URL, c.PKI.Files.CACert, filepath.Join(c.Dir, "tessera-node-token.kubeconfig"))

	// Real pods: spec.priority is set by the Priority admission plugin from
	// their PriorityClasses, as in a cluster; bound to the kwok node so that
	// they run and an eviction ends in a deletion as on a real node.
	for name, value := range map[string]int32{"tessera-e2e-owner": 100, "tessera-e2e-borrower": 10} {
		if _, err := admin.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := workload.CreateNamespace(ctx, admin, balloonNS); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fakeEnv := []string{"FAKEGPU_STATE=" + filepath.Join(dir, "fakegpu.state"), "FAKEGPU_DEVICES=Test GPU:1024:10", "FAKEGPU_CONFIG="}
	uuid := fakegpu.UUID("", 0)
	borrowed, err := annv1.Marshal(&annv1.Borrowed{Version: annv1.Version, GPUs: []annv1.BorrowedGPU{{UUID: uuid, MemoryMiB: 176, From: []string{balloonNS + "/owner/main"}}}})
	if err != nil {
		t.Fatal(err)
	}
	pods := podRecorder(t, ctx, admin)
	owner := balloonPod(t, ctx, admin, "owner", node, "tessera-e2e-owner", map[string]string{annv1.BalloonKey: "true"})
	borrower := balloonPod(t, ctx, admin, "borrower", node, "tessera-e2e-borrower", map[string]string{annv1.BorrowedKey: borrowed})
	for _, name := range []string{"owner", "borrower"} {
		poll(t, ctx, name+" running (kwok)", func() bool {
			p, err := admin.CoreV1().Pods(balloonNS).Get(ctx, name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning
		})
	}

	state := filepath.Join(dir, "state")
	ownerIDs, ownerLimits, ownerRegion := memContainer(t, state, uuid, 0, 800, 100)
	borrowerIDs, _, _ := memContainer(t, state, uuid, 100, 400, 398)
	config := filepath.Join(dir, "vgpu-monitor.yaml")
	if err := os.WriteFile(config, []byte(`version: v1
kubernetes: {kubeconfig: "`+kubeconfig+`"}
balloon: {enabled: true, interval: 20ms, window: 1m, settle: 300ms, marginPercent: 10, minFloorMiB: 64, waitMs: 3000}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "kubelet.sock")
	identitytest.Serve(t, socket, []identity.Listing{
		{Owner: owner, Devices: map[string][]string{resource.Memory: ownerIDs}},
		{Owner: borrower, Devices: map[string][]string{resource.Memory: borrowerIDs}},
	})
	began := time.Now()
	startMonitor(t, ctx, c, monitorBin, fakeEnv, func(addr string) []string {
		return []string{"--config", config, "--node-name", node, "--state-dir", state, "--pod-resources-socket", socket,
			"--listen-address", addr, "--nvml-library", filepath.Join(libs, "libnvidia-ml.so.1")}
	})

	// 800 + 400 MiB on 1024: the owner (peak 100 MiB, floor 180) is lowered by 176.
	ownerCap := func() (uint64, region.Balloon) {
		l, err := region.OpenLimits(ownerLimits)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		b, _ := l.Balloon(uuid)
		return l.Devices()[0].MemLimitBytes, b
	}
	poll(t, ctx, "the owner inflated", func() bool { c, _ := ownerCap(); return c != 800<<20 })
	if c, b := ownerCap(); c != 624<<20 || b != (region.Balloon{CeilingBytes: 800 << 20, WaitMS: 3000, FloorBytes: 180 << 20}) {
		t.Fatalf("owner cap %d MiB, balloon %+v; want 624 MiB under an 800 MiB ceiling, floor 180", c>>20, b)
	}
	t.Logf("owner inflated %v after the monitor started", time.Since(began).Round(time.Millisecond))
	var lent *annv1.NodeBalloons
	poll(t, ctx, "the node annotation saying 176 MiB are lent", func() bool {
		n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := n.Annotations[annv1.NodeBalloonsKey]
		if !ok {
			return false
		}
		if lent, err = annv1.ParseNodeBalloons(v); err != nil {
			t.Fatalf("node %s: %v", node, err)
		}
		return len(lent.GPUs) == 1 && lent.GPUs[0].LentMiB == 176
	})
	if g := lent.GPUs[0]; g.UUID != uuid || !slices.ContainsFunc(g.Lenders, func(l annv1.Lender) bool {
		return l.Owner == owner.String() && l.LentMiB == 176 && l.CeilingMiB == 800
	}) {
		t.Fatalf("node balloons %+v: want %s lending 176 MiB of its 800 on %s", g, owner, uuid)
	}
	if evicted := pods.evicted(); len(evicted) != 0 {
		t.Fatalf("evicted %v before any owner waited for its memory", evicted)
	}

	// The owner's allocation waits for its ceiling; the borrower uses all but a
	// sliver of its cap, so it is evicted rather than shrunk. The waiter polls
	// (its stamp is kept fresh) until the API server has deleted the borrower.
	began = time.Now()
	poll(t, ctx, "the borrower evicted and deleted for the waiting owner", func() bool {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			t.Fatal(err)
		}
		if err := regiontest.WriteBalloonWait(ownerRegion, 0, 700<<20, 1, uint64(ts.Nano())); err != nil {
			t.Fatal(err)
		}
		_, err := admin.CoreV1().Pods(balloonNS).Get(ctx, "borrower", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if evicted := pods.evicted(); fmt.Sprint(evicted) != "[borrower]" {
		t.Fatalf("pods marked evicted (DisruptionTarget, EvictionByEvictionAPI) %v, want the borrower only", evicted)
	}
	t.Logf("borrower evicted and deleted %v after the owner began waiting", time.Since(began).Round(time.Millisecond))
	if p, err := admin.CoreV1().Pods(balloonNS).Get(ctx, "owner", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("owner after the eviction: %v (deletion %v), want it running on", err, p.GetDeletionTimestamp())
	}
}

// monitorBinary is the vgpu-monitor make built (TESSERA_MONITOR_BIN, set by
// make test-e2e), else one built from the repository now.
func monitorBinary(t *testing.T, ctx context.Context) string {
	t.Helper()
	if bin := os.Getenv("TESSERA_MONITOR_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "vgpu-monitor")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/vgpu-monitor")
	build.Dir = filepath.Join("..", "..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/vgpu-monitor: %v\n%s", err, out)
	}
	return bin
}

// nodeAccountKubeconfig creates the node account of the balloons rendering
// (its ServiceAccount, ClusterRole and binding as checked in), and writes a
// kubeconfig at path with a token the API server issued for that
// ServiceAccount (TokenRequest): the monitor authenticates as the deployed
// DaemonSet's pods do.
func nodeAccountKubeconfig(t *testing.T, ctx context.Context, admin kubernetes.Interface, server, caFile, path string) string {
	t.Helper()
	on := readNodeRBAC(t, "balloons.yaml")
	if err := workload.CreateNamespace(ctx, admin, releaseNS); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(releaseNS).Create(ctx, on.account, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, on.role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, on.binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The role grants no delete on pods: a pod the monitor makes go can only
	// have gone through the Eviction API.
	for _, r := range on.role.Rules {
		if slices.Contains(r.Resources, "pods") && (slices.Contains(r.Verbs, "delete") || slices.Contains(r.Verbs, "*")) {
			t.Fatalf("node role %s may delete pods (%+v): an eviction could not be told from a deletion", on.role.Name, r)
		}
	}
	hour := int64(3600)
	tr, err := admin.CoreV1().ServiceAccounts(releaseNS).CreateToken(ctx, nodeAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", releaseNS, nodeAccount, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos[nodeAccount] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: nodeAccount}
	cfg.CurrentContext = "e2e"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// balloonPod creates a running pod of priority class pc on node and returns
// its container as PodResources names it.
func balloonPod(t *testing.T, ctx context.Context, admin kubernetes.Interface, name, node, pc string, annotations map[string]string) identity.Owner {
	t.Helper()
	p := workload.Pod(balloonNS, name, "", nil)
	p.Spec.NodeName = node
	p.Spec.PriorityClassName = pc
	p.Annotations = annotations
	// The API default (30 s), as a workload has it: the eviction is graceful,
	// and kwok, as the kubelet would, ends the pod.
	p.Spec.TerminationGracePeriodSeconds = nil
	if _, err := admin.CoreV1().Pods(balloonNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return identity.Owner{Namespace: balloonNS, Pod: name, Container: p.Spec.Containers[0].Name}
}

// evictions records the pods of balloonNS that the API server marked as
// evicted through the Eviction API, from a watch: a deleted pod is gone
// from a later read, its last state is not.
type evictions struct {
	mu   sync.Mutex
	pods []string
}

func (e *evictions) evicted() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.pods)
}

// podRecorder watches balloonNS's pods until the test ends.
func podRecorder(t *testing.T, ctx context.Context, admin kubernetes.Interface) *evictions {
	t.Helper()
	w, err := admin.CoreV1().Pods(balloonNS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := &evictions{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || (ev.Type != watch.Modified && ev.Type != watch.Deleted) {
				continue
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.DisruptionTarget && cond.Reason == "EvictionByEvictionAPI" && cond.Status == corev1.ConditionTrue {
					e.mu.Lock()
					if !slices.Contains(e.pods, p.Name) {
						e.pods = append(e.pods, p.Name)
					}
					e.mu.Unlock()
				}
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return e
}

// startMonitor runs the binary beside the control plane (its log joins the
// components' dump on failure) until the test ends, when it must exit cleanly
// on SIGTERM. A port is free only when looked up: another package's test may
// take it before the monitor listens, so an exit then is retried on another.
func startMonitor(t *testing.T, ctx context.Context, c *cluster.Cluster, bin string, env []string, args func(addr string) []string) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		p, err := c.StartProcess(process.Spec{Name: fmt.Sprintf("vgpu-monitor-%d", attempt), Path: bin, Args: args(addr), Env: env})
		if err != nil {
			t.Fatal(err)
		}
		ready, cancel := context.WithTimeout(ctx, time.Minute)
		err = controlplane.WaitHealthy(ready, p, "http://"+addr+"/readyz")
		cancel()
		if err == nil {
			t.Cleanup(func() {
				if err := terminate(p); err != nil {
					t.Errorf("vgpu-monitor on SIGTERM: %v\n%s", err, p.Tail(2000))
				}
			})
			return
		}
		tail := p.Tail(2000)
		c.StopProcess(p)
		if !strings.Contains(tail, "address already in use") || attempt == 4 {
			t.Fatalf("vgpu-monitor not ready: %v\n%s", err, tail)
		}
		t.Logf("port %s taken meanwhile; another", addr)
	}
}

// terminate ends p with SIGTERM as the kubelet does and returns its exit status.
func terminate(p *process.Process) error {
	if err := unix.Kill(p.PID, unix.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM: %w", err)
	}
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		p.Kill()
		return errors.New("still running 30 s after SIGTERM")
	}
	_, err := p.Exited()
	return err
}

// memContainer writes a memory allocation of capMiB on uuid as the device
// plugin does, with usedMiB charged to the test process (alive: never reaped).
func memContainer(t *testing.T, state, uuid string, first int, capMiB, usedMiB uint64) (ids []string, limits, reg string) {
	t.Helper()
	for i := range 4 {
		ids = append(ids, resource.ID{GPU: uuid, Kind: resource.KindMem, N: first + i}.String())
	}
	dir := filepath.Join(statedir.Containers(state), allocation.Key(resource.KindMem, ids))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	limits, reg = filepath.Join(dir, statedir.LimitsFile), filepath.Join(dir, statedir.RegionFile)
	if err := region.WriteLimits(limits, []region.DeviceLimit{{UUID: uuid, MemLimitBytes: capMiB << 20}}); err != nil {
		t.Fatal(err)
	}
	if err := region.CreateRegion(reg); err != nil {
		t.Fatal(err)
	}
	self, err := hostproc.Read("/proc", uint32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if err := regiontest.Write(reg, regiontest.Contents{Slots: []regiontest.Slot{{PID: self.NSPID, StartTime: self.StartTime, UsedBytes: map[int]uint64{0: usedMiB << 20}}}}); err != nil {
		t.Fatal(err)
	}
	return ids, limits, reg
}
