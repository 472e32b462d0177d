package allocation_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/region"
)

// runInContainer runs cudash the way a container runtime would run it with
// resp: in a private mount namespace (unshare -m, needs root) with resp's
// mounts bind-mounted at their container paths (read-only where resp says
// so), /etc/ld.so.preload loading the hook, and the environment kubelet
// builds: resp's Envs overridden by the pod's own podEnv. tenant is shell run
// after the runtime's mounts: what a pod's volumes stacked over them do.
func (n *hookNode) runInContainer(t *testing.T, resp *pluginapi.ContainerAllocateResponse, podEnv map[string]string, tenant string) (stdout, stderr string) {
	t.Helper()
	return n.runInImage(t, resp, podEnv, "", tenant)
}

// runInImage is runInContainer with image, shell run before the runtime's
// mounts: what the container image itself holds (symlinks the runtime
// follows when it mounts).
func (n *hookNode) runInImage(t *testing.T, resp *pluginapi.ContainerAllocateResponse, podEnv map[string]string, image, tenant string) (stdout, stderr string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI runs as root: the tenant tests need root for unshare -m and bind mounts")
		}
		t.Skip("needs root for unshare -m and bind mounts (runs as root in CI)")
	}
	ns := filepath.Join(n.tmp, "ns")
	for _, d := range []string{"up", "work"} {
		if err := os.MkdirAll(filepath.Join(ns, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// /etc and /run are the container's own: an overlay lets /etc/ld.so.preload
	// exist as a mount point without touching the host's /etc.
	script := []string{"set -e",
		"mount -t overlay overlay -o lowerdir=/etc,upperdir=" + q(filepath.Join(ns, "up")) + ",workdir=" + q(filepath.Join(ns, "work")) + " /etc",
		"mount -t tmpfs tmpfs /run", image}
	for _, m := range resp.Mounts {
		c := q(m.ContainerPath)
		script = append(script, "mkdir -p $(dirname "+c+")", "[ -e "+c+" ] || touch "+c, "mount --bind "+q(m.HostPath)+" "+c)
		if m.ReadOnly {
			script = append(script, "mount -o remount,bind,ro "+c)
		}
	}
	env := map[string]string{}
	for k, v := range resp.Envs {
		env[k] = v
	}
	for k, v := range podEnv {
		env[k] = v
	}
	for _, kv := range n.driverEnv() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	exe := "exec env -i"
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		exe += " " + q(k+"="+env[k])
	}
	script = append(script, tenant, exe+" "+q(n.cudash))
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", strings.Join(script, "\n"))
	cmd.Stdin = strings.NewReader(capScript)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("container: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}

func q(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// forged writes the files a tenant would point the hook at: 80 GiB on GPU 1.
func (n *hookNode) forged(t *testing.T) (dir string) {
	dir = filepath.Join(n.tmp, "forged")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := region.WriteLimits(filepath.Join(dir, "limits"), []region.DeviceLimit{{UUID: n.gpus[1].UUID, MemLimitBytes: 80 << 30}}); err != nil {
		t.Fatal(err)
	}
	if err := region.CreateRegion(filepath.Join(dir, "region")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hook.conf"), []byte("ctx-reserve-mib=0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPodEnvCannotRedirectHook: kubelet lets a pod's env override the
// plugin's, so a pod setting TESSERA_LIMITS and TESSERA_REGION to files it
// owns must still get the cap its device IDs imply. TESSERA_LOG is the one
// variable a pod may set.
func TestPodEnvCannotRedirectHook(t *testing.T) {
	n := newHookNode(t)
	f := n.forged(t)
	pod := map[string]string{
		"TESSERA_LIMITS":          filepath.Join(f, "limits"),
		"TESSERA_REGION":          filepath.Join(f, "region"),
		"TESSERA_CORE_LIMITS":     filepath.Join(f, "limits"),
		"TESSERA_CTX_RESERVE_MIB": "0",
		"TESSERA_LOG":             "info",
	}
	out, stderr := n.runInContainer(t, n.allocate4GiB(t), pod, "")
	n.wantCap(t, out)
	if !strings.Contains(stderr, "TESSERA_LIMITS="+pod["TESSERA_LIMITS"]+" ignored") {
		t.Errorf("no warning that the pod's TESSERA_LIMITS is ignored; stderr:\n%s", stderr)
	}
	if !strings.Contains(stderr, "initialised: limits /run/tessera/limits") {
		t.Errorf("the pod's TESSERA_LOG=info did not apply, or the limits are not the mounted ones; stderr:\n%s", stderr)
	}
}

// TestVolumeStackedOverPluginMountsFailsClosed: a pod volume mounted over
// /run/tessera or one of its files (as a runtime that orders mounts
// differently, or a subPath volume, would do) must not take the cap: the
// hook refuses every allocation instead.
func TestVolumeStackedOverPluginMountsFailsClosed(t *testing.T) {
	n := newHookNode(t)
	f := n.forged(t)
	for _, c := range []struct{ name, tenant, want string }{
		{"forged files in a volume over /run/tessera",
			"mount -t tmpfs tmpfs /run/tessera && cp " + q(f) + "/* /run/tessera/", "resolves to a mount at /run/tessera"},
		{"empty volume over /run/tessera",
			"mount -t tmpfs tmpfs /run/tessera", "hidden by another mount"},
		{"read-only volume over the limits file",
			"mount --bind " + q(filepath.Join(f, "limits")) + " /run/tessera/limits && mount -o remount,bind,ro /run/tessera/limits",
			"not from the device plugin's"},
		{"read-only volume over hook.conf",
			"mount --bind " + q(filepath.Join(f, "hook.conf")) + " /run/tessera/hook.conf && mount -o remount,bind,ro /run/tessera/hook.conf",
			"not from the device plugin's"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, stderr := n.runInContainer(t, n.allocate4GiB(t), nil, c.tenant)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			// capScript's fifth command is the 3 GiB allocation.
			if len(lines) < 5 || !strings.HasPrefix(lines[4], "err 3") {
				t.Errorf("3 GiB allocation: want err 3 (CUDA_ERROR_NOT_INITIALIZED: failed closed); stdout:\n%s\nstderr:\n%s", out, stderr)
			}
			if !strings.Contains(stderr, c.want) {
				t.Errorf("stderr lacks %q:\n%s", c.want, stderr)
			}
		})
	}
}

// TestImageSymlinksCannotHidePluginMounts: a runtime follows the image's
// symlinks when it mounts (runc resolves them inside the rootfs), so an image
// whose /run/tessera/limits or /etc/ld.so.preload is a symlink gets the
// plugin's file mounted somewhere else, and can re-point or remove the
// symlink once running. Neither may leave the hook uncapped or let it fall
// back to the pod's TESSERA_LIMITS: it must fail closed.
func TestImageSymlinksCannotHidePluginMounts(t *testing.T) {
	n := newHookNode(t)
	f := n.forged(t)
	pod := map[string]string{"TESSERA_LIMITS": filepath.Join(f, "limits"), "TESSERA_REGION": filepath.Join(f, "region")}
	for _, c := range []struct{ name, image, tenant string }{
		{"limits and region are symlinks",
			"mkdir -p /run/tessera /run/x && ln -s /run/x/limits /run/tessera/limits && ln -s /run/x/region /run/tessera/region", ""},
		{"limits symlink removed after the mounts",
			"mkdir -p /run/tessera /run/x && ln -s /run/x/limits /run/tessera/limits", "rm /run/tessera/limits"},
		{"/etc/ld.so.preload and /run/tessera are symlinks, pod env set",
			"rm -f /etc/ld.so.preload && mkdir -p /run/x && ln -s /run/x/preload /etc/ld.so.preload && ln -s /run/x /run/tessera", ""},
		{"ld.so.preload symlink re-pointed to the tenant's own file",
			"rm -f /etc/ld.so.preload && mkdir -p /run/x && ln -s /run/x/preload /etc/ld.so.preload",
			"cp /run/x/preload /run/own && ln -sf /run/own /etc/ld.so.preload"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, stderr := n.runInImage(t, n.allocate4GiB(t), pod, c.image, c.tenant)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			// capScript's fifth command is the 3 GiB allocation.
			if len(lines) < 5 || !strings.HasPrefix(lines[4], "err 3") {
				t.Errorf("3 GiB allocation: want err 3 (CUDA_ERROR_NOT_INITIALIZED: failed closed); stdout:\n%s\nstderr:\n%s", out, stderr)
			}
		})
	}
}

// TestResponseFromBeforeHookConfKeepsItsCap: kubelet keeps a pod's Allocate
// responses for the pod's lifetime and reuses them when a container
// restarts, so after an upgrade a container restarts with a response from a
// plugin that did not mount hook.conf yet. Its limits are still the
// plugin's mounts: the cap must hold (with hook.conf's defaults), neither
// fail closed for every such pod nor fall back to the pod's env.
func TestResponseFromBeforeHookConfKeepsItsCap(t *testing.T) {
	n := newHookNode(t)
	f := n.forged(t)
	resp := n.allocate4GiB(t)
	var mounts []*pluginapi.Mount
	for _, m := range resp.Mounts {
		if m.ContainerPath != allocation.HookConfPath {
			mounts = append(mounts, m)
		}
	}
	resp.Mounts = mounts
	out, stderr := n.runInContainer(t, resp, map[string]string{"TESSERA_LIMITS": filepath.Join(f, "limits")}, "")
	n.wantCap(t, out)
	if t.Failed() {
		t.Logf("stderr:\n%s", stderr)
	}
}

// TestOnlyPreloadMountedUsesEnvironment: a container with the hook's
// ld.so.preload mounted and nothing else of the plugin's (a runtime outside
// Kubernetes, or a pre-hook.conf plugin's response for whole GPUs) has no cap
// the environment could lift: the environment configures the hook, as it did
// before hook.conf existed, rather than being ignored.
func TestOnlyPreloadMountedUsesEnvironment(t *testing.T) {
	n := newHookNode(t)
	full := n.allocate4GiB(t)
	host := map[string]string{}
	resp := &pluginapi.ContainerAllocateResponse{}
	for _, m := range full.Mounts {
		host[m.ContainerPath] = m.HostPath
		if m.ContainerPath == allocation.PreloadPath || m.ContainerPath == n.builder.HookLibrary {
			resp.Mounts = append(resp.Mounts, m)
		}
	}
	// The runtime still hands the container its one GPU.
	env := map[string]string{"TESSERA_LIMITS": host[allocation.LimitsPath], "TESSERA_REGION": host[allocation.RegionPath],
		allocation.EnvCUDAVisible: full.Envs[allocation.EnvCUDAVisible]}
	out, stderr := n.runInContainer(t, resp, env, "")
	n.wantCap(t, out)
	if t.Failed() {
		t.Logf("stderr:\n%s", stderr)
	}
}

// TestVolumeFromUnderStateDirFailsClosed: with a stateDir that also holds
// pod-writable directories on its filesystem (stateDir: /var/lib, and
// kubelet's pod volumes under /var/lib/kubelet), a subPath volume stacked
// over the limits file comes from "under the state directory" too. Only a
// container file of the plugin's layout, containers/<allocation>/limits,
// may be taken.
func TestVolumeFromUnderStateDirFailsClosed(t *testing.T) {
	n := newHookNode(t)
	f := n.forged(t)
	vol := filepath.Join(n.builder.StateDir, "kubelet", "pods", "uid", "volumes", "v")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"limits", "region"} {
		data, err := os.ReadFile(filepath.Join(f, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(vol, name), data, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	tenant := "mount --bind " + q(filepath.Join(vol, "limits")) + " /run/tessera/limits && mount -o remount,bind,ro /run/tessera/limits && " +
		"mount --bind " + q(filepath.Join(vol, "region")) + " /run/tessera/region"
	out, stderr := n.runInContainer(t, n.allocate4GiB(t), nil, tenant)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 5 || !strings.HasPrefix(lines[4], "err 3") {
		t.Errorf("3 GiB allocation: want err 3 (CUDA_ERROR_NOT_INITIALIZED: failed closed); stdout:\n%s\nstderr:\n%s", out, stderr)
	}
	if want := "not from the device plugin's " + n.builder.StateDir + "/containers/<allocation>/"; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
}
