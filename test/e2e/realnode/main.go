// Package realnode runs a real single Kubernetes node for end-to-end tests:
// kubelet v1.37.2 and containerd v2.4.2 (CRI) with Debian's runc, beside
// the harness's control plane (package controlplane), all inside one
// network namespace made for the run. The node's address is a second
// address on the namespace's own loopback interface (the kubelet refuses a
// 127/8 node IP); nothing binds or sends outside the namespace, and no
// address is added to the host's interfaces.
//
// The test binary itself runs in the namespace: Main, called from
// TestMain, creates the namespace and re-executes the test binary under
// `nsenter --net=/run/netns/<name>` (not `ip netns exec`, which remounts
// /sys and hides the cgroups the kubelet and runc need), so the control
// plane, the node and the test's clients share one loopback. When the
// inner run ends, Main removes what a crashed or killed run left (shims,
// processes in the node's cgroups, mounts under its directory, the
// cgroups, the directory) and deletes the namespace, and fails the run if
// it had anything to remove.
//
// Images come from no registry: the pause image and the workload image are
// built here from a static Go program (./pause) with go-containerregistry
// and imported with ctr.
package realnode

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// Environment of the inner run.
const (
	envID      = "TESSERA_REALNODE_ID"
	envDir     = "TESSERA_REALNODE_DIR"
	envNodeIP  = "TESSERA_REALNODE_NODE_IP"
	envPodCIDR = "TESSERA_REALNODE_POD_CIDR"
)

type insideEnv struct {
	id, dir string
	nodeIP  netip.Addr
	podCIDR netip.Prefix
}

// inside returns the namespace's parameters when this process runs in it.
func inside() (insideEnv, error) {
	e := insideEnv{id: os.Getenv(envID), dir: os.Getenv(envDir)}
	if e.id == "" {
		return e, errNotInside
	}
	var err error
	if e.nodeIP, err = netip.ParseAddr(os.Getenv(envNodeIP)); err != nil {
		return e, fmt.Errorf("%s: %w", envNodeIP, err)
	}
	if e.podCIDR, err = netip.ParsePrefix(os.Getenv(envPodCIDR)); err != nil {
		return e, fmt.Errorf("%s: %w", envPodCIDR, err)
	}
	return e, nil
}

var errNotInside = errors.New("not inside a real-node network namespace (the test binary's TestMain must call realnode.Main)")

// Unavailable says why this run cannot start a real node ("" when it can).
// Tests skip with it; Main has already refused to skip under CI=true.
func Unavailable() string {
	if _, err := inside(); err == nil {
		return ""
	}
	if os.Geteuid() != 0 {
		return "the real node needs root (network namespace, cgroups, mounts); running as uid " + fmt.Sprint(os.Geteuid())
	}
	return errNotInside.Error()
}

// RequireNode skips t when the real node cannot start here, saying why —
// except under CI=true, where that is a failure: CI runs as root and must
// run the real node.
func RequireNode(t testing.TB) {
	t.Helper()
	why := Unavailable()
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: the real node must run: %s", why)
	}
	t.Skip(why)
}

// Main runs the tests of m inside a fresh network namespace and returns the
// exit code for os.Exit. Not root: the tests run here and skip, except
// under CI=true, where that is a failure.
func Main(m *testing.M) int {
	if os.Geteuid() != 0 && os.Getenv(envID) == "" && os.Getenv("CI") == "true" {
		fmt.Fprintln(os.Stderr, "realnode: CI=true and not root: the real node cannot start, and CI must not skip it")
		return 1
	}
	return MainFunc(m.Run)
}

// MainFunc is Main for any program (make demo's, for one): as root it
// runs this program again, with the same arguments, inside a fresh network
// namespace, where run is called; it cleans up after the inner run and
// returns its exit code. Not root, or already inside, it calls run here
// (where Unavailable says why a node cannot start).
func MainFunc(run func() int) int {
	if os.Getenv(envID) != "" || os.Geteuid() != 0 {
		return run()
	}
	code, err := superviseInNamespace()
	if err != nil {
		fmt.Fprintln(os.Stderr, "realnode:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// superviseInNamespace creates the namespace and the node directory, runs
// this test binary again inside, then cleans up and checks.
func superviseInNamespace() (code int, err error) {
	unlock, err := lockHost()
	if err != nil {
		return 1, err
	}
	defer unlock()
	id, err := randomID()
	if err != nil {
		return 1, err
	}
	ns, err := createNamespace(id)
	if err != nil {
		return 1, err
	}
	sysctls, err := saveSysctls(kubeletSysctls)
	if err != nil {
		return 1, errors.Join(err, deleteNamespace(ns.Name))
	}
	absent := absentHostPaths()
	dir, err := os.MkdirTemp("", "tessera-realnode-"+id+"-")
	if err != nil {
		return 1, errors.Join(err, deleteNamespace(ns.Name))
	}
	l := layout{Dir: dir, CgroupRoot: "/tessera-e2e-" + id}
	podCIDR := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, ns.NodeIP.As4()[2], 0}), 24)

	args := append([]string{"--net=" + ns.Path(), "--", os.Args[0]}, os.Args[1:]...)
	cmd := exec.Command("nsenter", args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), envID+"="+id, envDir+"="+dir, envNodeIP+"="+ns.NodeIP.String(), envPodCIDR+"="+podCIDR.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	runErr := cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if runErr != nil && code == 0 {
		code = 1
	}

	// What the inner run should have removed itself: finding any of it
	// here is a failure, after removing it.
	var errs []error
	found := leftovers(l, shimPIDs(l.ContainerdSocket()))
	if found != nil {
		errs = append(errs, fmt.Errorf("the test run left behind (removed now): %w", found))
		for _, pid := range shimPIDs(l.ContainerdSocket()) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		errs = append(errs, removeCgroups(l.CgroupRoot), unmountUnder(dir))
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, deleteNamespace(ns.Name))
	created, err := removeCreatedHostPaths(absent)
	errs = append(errs, err)
	if len(created) > 0 {
		fmt.Fprintf(os.Stderr, "realnode: removed the host directories the runtime and kubelet created: %v\n", created)
	}
	restored, err := restoreSysctls(sysctls)
	errs = append(errs, err)
	if len(restored) > 0 {
		fmt.Fprintf(os.Stderr, "realnode: restored the kernel settings the kubelet changed: %v\n", restored)
	}
	if err := errors.Join(errs...); err != nil {
		return code, err
	}
	fmt.Fprintf(os.Stderr, "realnode: namespace %s deleted; no processes, mounts or cgroups left; kernel settings as before\n", ns.Name)
	return code, nil
}

// hostLock serialises real nodes on this machine: the kubelet's
// device-plugin directory (/var/lib/kubelet/device-plugins) and the other
// hostPaths are fixed, so two nodes at once (go test runs the packages
// that start one in parallel) would take over each other's kubelet.sock,
// and one run's cleanup would remove what the other uses.
const hostLock = "/run/tessera-realnode.lock"

// lockHost waits for the machine's real-node lock and returns its release.
func lockHost() (func(), error) {
	f, err := os.OpenFile(hostLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("real node lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Fprintf(os.Stderr, "realnode: another real node runs on this machine; waiting for it (%s)\n", hostLock)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("real node lock: %w", err)
		}
	}
	return func() { f.Close() }, nil
}
