package enforce

import (
	"io"
	"log/slog"
	"os/exec"
	"testing"
	"time"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/hostproc"
)

// sleeper starts a real process to aim the kill policy at, and records it
// under root (a fake /proc) with the given cgroup.
func sleeper(t *testing.T, root, cgroup string) (hostproc.Process, <-chan struct{}) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	p := hostproc.Process{PID: uint32(cmd.Process.Pid), NSPID: uint32(cmd.Process.Pid), StartTime: 77, Cgroup: cgroup}
	fakeProc(t, root, p)
	return p, done
}

// Under kill, a no_region violation of a host daemon (Xorg, DCGM,
// nvidia-persistenced: root or system cgroups, memory on a managed GPU) must
// be reported, never killed; a pod's process is killed.
func TestKillSparesProcessesOutsideKubernetesPods(t *testing.T) {
	root := t.TempDir()
	host, hostDone := sleeper(t, root, "/system.slice/nvidia-persistenced.service")
	pod, podDone := sleeper(t, root, "/kubepods/besteffort/pod0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0/0123abcd")
	var killed, spared []uint32
	e := &Enforcer{ProcRoot: root, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Config:  configv1.EnforcementConfig{Policy: configv1.PolicyKill},
		OnKill:  func(p hostproc.Process) { killed = append(killed, p.PID) },
		OnSpare: func(p hostproc.Process, reason string) { spared = append(spared, p.PID) }}
	for _, p := range []hostproc.Process{host, pod} {
		e.act(t.Context(), Violation{Kind: KindNoRegion, GPU: "GPU-a", Processes: []hostproc.Process{p}, Bypassing: []hostproc.Process{p}, UsedBytes: 1 << 30})
	}
	select {
	case <-hostDone:
		t.Fatal("a host daemon holding memory on a managed GPU was killed")
	case <-podDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the pod's bypassing process was not killed")
	}
	if len(killed) != 1 || killed[0] != pod.PID || len(spared) != 1 || spared[0] != host.PID {
		t.Fatalf("killed %v spared %v, want killed [%d] spared [%d]", killed, spared, pod.PID, host.PID)
	}
}

func TestInPod(t *testing.T) {
	for cgroup, want := range map[string]bool{
		// cgroupfs driver, v1 and v2
		"/kubepods/besteffort/pod0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0/0123abcd": true,
		"/kubepods/burstable/pod0b1c2d3e/0123abcd":                              true,
		"/kubepods/pod0b1c2d3e-4f50/0123abcd":                                   true, // guaranteed
		// systemd driver
		"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0b1c2d3e_4f50.slice/cri-containerd-0123.scope": true,
		"/kubepods.slice/kubepods-pod0b1c2d3e_4f50.slice/cri-containerd-0123.scope":                                      true,
		// kubelet --cgroup-root (kind) and a cgroup namespace seen from a pod
		"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod0b1c.slice/cri-containerd-1.scope": true,
		"/kubelet/kubepods/besteffort/pod0b1c/0123": true,
		// a private cgroup namespace: the path climbs out of the monitor's
		// own cgroup, but a systemd pod slice names its ancestry
		"/../../kubepods-besteffort.slice/kubepods-besteffort-pod0b1c.slice/cri-containerd-1.scope": true,
		"/../../../kubepods-pod0b1c.slice/cri-containerd-1.scope":                                   true,
		"/../../../../system.slice/nvidia-persistenced.service":                                     false,
		"/../../besteffort/pod0b1c/0123":                                                            false, // cgroupfs without its root: unknown, so spared
		// host processes
		"":  false,
		"/": false,
		"/system.slice/nvidia-persistenced.service":   false,
		"/system.slice/nvidia-dcgm.service":           false,
		"/user.slice/user-1000.slice/session-2.scope": false,
		"/init.scope": false,
		// the QoS level, not a pod; a lookalike outside the hierarchy
		"/kubepods.slice/kubepods-besteffort.slice": false,
		"/kubepods/besteffort":                      false,
		"/system.slice/podman-1.scope":              false,
	} {
		if got := InPod(cgroup); got != want {
			t.Errorf("InPod(%q) = %v, want %v", cgroup, got, want)
		}
	}
}
