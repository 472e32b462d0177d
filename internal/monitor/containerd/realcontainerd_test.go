//go:build e2e

// The real containerd: `make test` runs this through the test-monitor-containerd
// target (build tag e2e), after hack/e2e-binaries.sh has built containerd
// v2.4.2 and its runc shim and runc is installed.

package containerd_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"golang.org/x/sys/unix"

	"github.com/tessera-gpu/tessera/internal/monitor/containerd"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
)

const version = "v2.4.2"

// binaries returns the cached containerd and shim, or fails saying how to build them.
func binaries(t *testing.T) (daemon, shim string) {
	cache := os.Getenv("TESSERA_CACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache", "tessera")
	}
	daemon = filepath.Join(cache, "bin", "containerd-"+version)
	shim = filepath.Join(cache, "bin", "containerd-shim-runc-v2-"+version)
	for _, p := range []string{daemon, shim} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v: build it with hack/e2e-binaries.sh containerd (make test does)", err)
		}
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Fatalf("runc: %v (make tools installs Debian's runc)", err)
	}
	return daemon, shim
}

func needRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("containerd and runc need root, and CI must run this")
	}
	t.Skip("containerd and runc need root; CI runs this as root")
}

// startContainerd runs containerd in its own root, state and socket under
// dir, without the CRI plugin, until the test ends; shims, mounts and the
// daemon are torn down then.
func startContainerd(t *testing.T, dir string) string {
	daemon, shim := binaries(t)
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// containerd finds a runtime's shim on PATH by its plain name.
	if err := os.Symlink(shim, filepath.Join(bin, "containerd-shim-runc-v2")); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "c.sock")
	config := fmt.Sprintf(`version = 3
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime",
  "io.containerd.podsandbox.controller.v1.podsandbox", "io.containerd.sandbox.controller.v1.shim",
  "io.containerd.nri.v1.nri", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[metrics]
  address = ""
[debug]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), socket, socket+".ttrpc", filepath.Join(dir, "debug.sock"))
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(daemon, "--config", cfg)
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		killShims(t, socket)
		unmountUnder(t, dir)
		removeCgroups(t, dir)
		logf.Close()
		if t.Failed() {
			data, _ := os.ReadFile(logf.Name())
			t.Logf("containerd log:\n%s", tail(string(data), 4000))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := client.New(socket, client.WithTimeout(time.Second))
		if err == nil {
			_, err = c.Version(context.Background())
			c.Close()
			if err == nil {
				return socket
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd not serving after 30 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// killShims ends every shim of this containerd (their command line names
// its socket): a test that failed before deleting its tasks leaves them.
func killShims(t *testing.T, socket string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && strings.Contains(filepath.Base(args[0]), "containerd-shim") && slices.Contains(args, socket) {
			t.Logf("killing leftover shim %d", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// unmountUnder lazily unmounts everything mounted below dir, deepest first.
func unmountUnder(t *testing.T, dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			points = append(points, fields[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		if err := unix.Unmount(points[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			t.Logf("unmount %s: %v", points[i], err)
		}
	}
}

// workload is the program the container runs: it starts one child after
// 1.5 s, and both sleep. Static, so the rootfs needs nothing else.
const workload = `package main

import (
	"os"
	"os/exec"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		// Late, so that the monitor has read containerd before it exists.
		time.Sleep(1500 * time.Millisecond)
		exec.Command(os.Args[0], "child").Start()
	}
	time.Sleep(time.Hour)
}
`

// rootfs builds a root filesystem holding the workload at /workload.
func rootfs(t *testing.T, dir string) string {
	src := filepath.Join(dir, "src")
	root := filepath.Join(dir, "rootfs")
	for _, d := range []string{src, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(workload), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module workload\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(root, "workload"), ".")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the workload: %v\n%s", err, out)
	}
	return root
}

// run creates and starts a container with labels over root.
func run(t *testing.T, ctx context.Context, c *client.Client, dir, id, root string, labels map[string]string) client.Task {
	ctr, err := c.NewContainer(ctx, id,
		client.WithContainerLabels(labels),
		client.WithRuntime("io.containerd.runc.v2", &runcoptions.Options{Root: filepath.Join(dir, "runc")}),
		client.WithNewSpec(oci.WithRootFSPath(root), oci.WithProcessArgs("/workload"),
			oci.WithCgroup(filepath.Join(cgroupParent(dir), id))))
	if err != nil {
		t.Fatalf("container %s: %v", id, err)
	}
	task, err := ctr.NewTask(ctx, cio.NullIO)
	if err != nil {
		ctr.Delete(ctx)
		t.Fatalf("task %s: %v", id, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), "k8s.io"), 20*time.Second)
		defer cancel()
		exited, err := task.Wait(ctx)
		if err == nil {
			task.Kill(ctx, syscall.SIGKILL, client.WithKillAll)
			select {
			case <-exited:
			case <-ctx.Done():
			}
		}
		if _, err := task.Delete(ctx, client.WithProcessKill); err != nil {
			t.Logf("delete task %s: %v", id, err)
		}
		if err := ctr.Delete(ctx); err != nil {
			t.Logf("delete container %s: %v", id, err)
		}
	})
	if err := task.Start(ctx); err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	return task
}

// cgroupParent is the test's own cgroup parent, so that nothing it leaves
// mixes with a real node's (containerd's default is /<namespace>/<id>).
func cgroupParent(dir string) string { return "/tessera-e2e-" + filepath.Base(dir) }

// removeCgroups removes the parent runc created in every hierarchy (runc
// delete removed the containers' own).
func removeCgroups(t *testing.T, dir string) {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range append(hierarchies, "/sys/fs/cgroup") {
		p := filepath.Join(h, cgroupParent(dir))
		// Processes a failed test left in its containers.
		procs, _ := filepath.Glob(filepath.Join(p, "*", "cgroup.procs"))
		for _, f := range procs {
			data, _ := os.ReadFile(f)
			for _, field := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(field); err == nil && pid > 1 {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
		kids, _ := filepath.Glob(filepath.Join(p, "*"))
		for _, k := range kids {
			if st, err := os.Stat(k); err == nil && st.IsDir() {
				os.Remove(k)
			}
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Logf("cgroup %s left: %v", p, err)
		}
	}
}

// children finds a process's children in /proc (not through containerd).
func children(pid uint32) []uint32 {
	var out []uint32
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		n, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if ppid, ok := strings.CutPrefix(line, "PPid:"); ok && strings.TrimSpace(ppid) == strconv.FormatUint(uint64(pid), 10) {
				out = append(out, uint32(n))
			}
		}
	}
	return out
}

// TestRealContainerdNamesContainerProcesses: containerd v2.4.2 with Debian's
// runc runs a container labelled as the CRI plugin labels kubelet's
// containers; the monitor's resolver names both of its processes (the init
// and its child, found through /proc) by namespace, pod and container, and
// names neither the pod's sandbox (no container name) nor a host process.
func TestRealContainerdNamesContainerProcesses(t *testing.T) {
	needRoot(t)
	dir, err := os.MkdirTemp("", "ctrd") // short: the socket path has a 108-byte limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := startContainerd(t, dir)
	root := rootfs(t, dir)

	c, err := client.New(socket, client.WithDefaultNamespace("k8s.io"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() }) // after the containers' cleanups, which use it
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), "k8s.io"), 2*time.Minute)
	defer cancel()
	pod := map[string]string{containerd.LabelPodNamespace: "team", containerd.LabelPodName: "trainer", containerd.LabelPodUID: "uid-7"}
	sandbox := run(t, ctx, c, dir, "sandbox-1", root, pod)
	labels := map[string]string{containerd.LabelContainerName: "cuda", "io.cri-containerd.kind": "container"}
	for k, v := range pod {
		labels[k] = v
	}
	task := run(t, ctx, c, dir, "ctr-1", root, labels)

	lister, err := containerd.Dial(socket, "k8s.io")
	if err != nil {
		t.Fatal(err)
	}
	defer lister.Close()
	r := &containerd.Resolver{Lister: lister}
	want := identity.Owner{Namespace: "team", Pod: "trainer", Container: "cuda"}
	named := func(pid uint32) {
		t.Helper()
		got, ok := r.Lookup(ctx, pid)
		if !ok || got.Owner != want || got.ID != "ctr-1" || got.PodUID != "uid-7" {
			t.Errorf("pid %d → %+v %v, want %v in ctr-1", pid, got, ok, want)
		}
	}
	named(task.Pid())
	for what, pid := range map[string]uint32{"the sandbox": sandbox.Pid(), "the test itself": uint32(os.Getpid())} {
		if got, ok := r.Lookup(ctx, pid); ok {
			t.Errorf("%s (pid %d) named %+v", what, pid, got)
		}
	}
	// The child starts after the resolver read containerd: an unknown pid
	// refreshes the mapping (at most once a second) instead of waiting for
	// it to age out.
	var child uint32
	deadline := time.Now().Add(10 * time.Second)
	for child == 0 {
		if kids := children(task.Pid()); len(kids) > 0 {
			child = kids[0]
		} else if time.Now().After(deadline) {
			t.Fatalf("the workload's child never appeared under pid %d", task.Pid())
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	named(child)
	if err := r.Err(); err != nil {
		t.Errorf("resolver: %v", err)
	}

}
