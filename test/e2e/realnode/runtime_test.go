package realnode

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tessera-gpu/tessera/test/e2e/binaries"
	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// TestRuntimeRunsLocalImages drives containerd through the CRI the way the
// kubelet does, without a kubelet: a sandbox from the locally built pause
// image on the host network and one on the bridge network, each with a
// container of the workload image whose output reaches its log, and one
// whose container gets the simulated GPU driver's libraries through CDI; then the
// node's teardown, which must leave no shim, cgroup or mount behind.
func TestRuntimeRunsLocalImages(t *testing.T) {
	RequireNode(t)
	env, err := inside()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := binaries.Paths(binaries.Containerd, binaries.ContainerdShim, binaries.Ctr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := newNode(env, bins, t.TempDir(), t.Logf)
	t.Cleanup(func() { _ = n.Stop() })
	began := time.Now()
	if err := n.startRuntime(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIME containerd ready, images built and imported: %v", time.Since(began).Round(time.Millisecond))

	conn, err := grpc.NewClient("unix://"+n.layout.ContainerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rt := cri.NewRuntimeServiceClient(conn)
	libDir, err := fakegpu.LibDir()
	if err != nil {
		t.Fatal(err)
	}
	gpu, err := n.InstallSimulatedGPU(ctx, "NVIDIA H200:143771:132;NVIDIA H200:143771:132", libDir)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(gpu.UUIDs()); got != 2 {
		t.Fatalf("simulated GPU spec devices %v, want 2 GPUs and all", gpu.DeviceNames)
	}
	var libs []string
	for _, l := range DriverLibraries {
		libs = append(libs, filepath.Join(DriverLibDir, l))
	}
	for i, tc := range []struct{ hostNet, gpu bool }{{true, false}, {false, false}, {false, true}} {
		hostNet := tc.hostNet
		name := fmt.Sprintf("sandbox-%d", i)
		mode := cri.NamespaceMode_POD
		if hostNet {
			mode = cri.NamespaceMode_NODE
		}
		cfg := &cri.PodSandboxConfig{
			Metadata:     &cri.PodSandboxMetadata{Name: name, Namespace: "default", Uid: fmt.Sprintf("uid-%d-%d", i, time.Now().UnixNano())},
			LogDirectory: filepath.Join(n.layout.Dir, "podlogs", name),
			Linux: &cri.LinuxPodSandboxConfig{
				CgroupParent:    n.layout.CgroupRoot + "/" + name,
				SecurityContext: &cri.LinuxSandboxSecurityContext{NamespaceOptions: &cri.NamespaceOption{Network: mode}},
			},
		}
		began := time.Now()
		sb, err := rt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: cfg})
		if err != nil {
			t.Fatalf("%s (host network %v): %v", name, hostNet, err)
		}
		say := "hello from " + name
		cc := &cri.ContainerConfig{
			Metadata: &cri.ContainerMetadata{Name: "main"}, Image: &cri.ImageSpec{Image: TestImage},
			Args: []string{"-say", say}, LogPath: "main.log", Linux: &cri.LinuxContainerConfig{},
		}
		if tc.gpu {
			// The simulated driver, injected by containerd from the CDI spec.
			// One GPU by its UUID, as the device plugin's cdi-cri strategy names it.
			cc.CDIDevices = []*cri.CDIDevice{{Name: gpu.DeviceNames[1]}}
			cc.Args = append(cc.Args, "-stat", strings.Join(append(libs, "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", gpu.StatePath), ","))
			say = "stat " + gpu.StatePath + ": present"
		}
		c, err := rt.CreateContainer(ctx, &cri.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: cfg, Config: cc})
		if err != nil {
			t.Fatalf("%s: create container: %v", name, err)
		}
		if _, err := rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
			t.Fatalf("%s: start container: %v", name, err)
		}
		t.Logf("TIME %s (host network %v): sandbox + container running in %v", name, hostNet, time.Since(began).Round(time.Millisecond))
		logFile := filepath.Join(cfg.LogDirectory, "main.log")
		deadline := time.Now().Add(30 * time.Second)
		for {
			b, _ := os.ReadFile(logFile)
			if strings.Contains(string(b), say) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: log %s is %q, want %q", name, logFile, b, say)
			}
			time.Sleep(50 * time.Millisecond)
		}
		st, err := rt.PodSandboxStatus(ctx, &cri.PodSandboxStatusRequest{PodSandboxId: sb.PodSandboxId})
		if err != nil {
			t.Fatal(err)
		}
		ip := st.GetStatus().GetNetwork().GetIp()
		if hostNet && ip != "" {
			t.Errorf("%s: host-network sandbox has its own IP %q", name, ip)
		}
		if tc.gpu {
			b, _ := os.ReadFile(logFile)
			for _, l := range append(libs, "/dev/nvidia1", "/dev/nvidiactl", gpu.StatePath) {
				if !strings.Contains(string(b), "stat "+l+": present") {
					t.Errorf("%s: the container does not see the simulated driver's %s (CDI %s); log:\n%s", name, l, gpu.DeviceNames[1], b)
				}
			}
			if !strings.Contains(string(b), "stat /dev/nvidia0: missing") {
				t.Errorf("%s: the container got GPU 0's node too; log:\n%s", name, b)
			}
		}
		if !hostNet {
			if a, err := netip.ParseAddr(ip); err != nil || !n.layout.PodCIDR.Contains(a) {
				t.Errorf("%s: sandbox IP %q not in the bridge range %s", name, ip, n.layout.PodCIDR)
			}
		}
		if procs := cgroupProcs(n.layout.CgroupRoot); len(procs) < 2*(i+1) {
			t.Errorf("%s: processes in the node's cgroups %v; want the pause and workload of each sandbox", name, procs)
		}
	}
	if err := n.CheckNetworkNamespace(); err != nil {
		t.Error(err)
	}
	n.recordShims()
	if len(n.shims) == 0 {
		t.Error("no shim PIDs recorded from containerd's bundles")
	}
	// Teardown with both sandboxes running.
	if err := n.Stop(); err != nil {
		t.Fatalf("teardown: %v", err)
	}
	if _, err := os.Stat(n.layout.Dir); err == nil {
		t.Errorf("node directory %s still exists", n.layout.Dir)
	}
}
