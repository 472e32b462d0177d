package realnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupFS is where the cgroup hierarchies are mounted (v1 controllers,
// name=systemd and the unified v2 tree on this machine).
const cgroupFS = "/sys/fs/cgroup"

// cgroupDirs are the kubelet's cgroup root in every hierarchy.
func cgroupDirs(root string) ([]string, error) {
	hier, err := os.ReadDir(cgroupFS)
	if err != nil {
		return nil, fmt.Errorf("cgroup hierarchies: %w", err)
	}
	var dirs []string
	for _, h := range hier {
		if h.IsDir() {
			dirs = append(dirs, filepath.Join(cgroupFS, h.Name(), root))
		}
	}
	return dirs, nil
}

// createCgroupRoot makes the kubelet's cgroup root in every hierarchy (the
// kubelet refuses a cgroupRoot that does not exist). cpuset children start
// with empty cpus and mems, so they are copied from the parent.
func createCgroupRoot(root string) error {
	dirs, err := cgroupDirs(root)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup root: %w", err)
		}
		if filepath.Base(filepath.Dir(d)) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
				if err != nil {
					return fmt.Errorf("cgroup root: %w", err)
				}
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return fmt.Errorf("cgroup root %s: %w", f, err)
				}
			}
		}
	}
	return nil
}

// cgroupTree lists d and every cgroup below it, deepest first.
func cgroupTree(d string) []string {
	var out []string
	_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return out
}

// cgroupProcs lists the PIDs in the cgroups below root, in every hierarchy.
func cgroupProcs(root string) []int {
	dirs, _ := cgroupDirs(root)
	seen := map[int]bool{}
	var pids []int
	for _, d := range dirs {
		for _, c := range cgroupTree(d) {
			b, err := os.ReadFile(filepath.Join(c, "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					pids = append(pids, pid)
				}
			}
		}
	}
	sort.Ints(pids)
	return pids
}

// removeCgroups kills what still runs in the cgroups below root and removes
// them, deepest first.
func removeCgroups(root string) error {
	for _, pid := range cgroupProcs(root) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	dirs, err := cgroupDirs(root)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		for _, c := range cgroupTree(d) {
			if err := rmdirRetry(c); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// rmdirRetry removes a cgroup, retrying while its killed tasks exit.
func rmdirRetry(d string) error {
	var err error
	for range 50 {
		if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", d, err)
}

// mountsUnder lists the mount points at or below dir from
// /proc/self/mountinfo, deepest (latest) first.
func mountsUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	return parseMountsUnder(string(b), dir), nil
}

// parseMountsUnder reads mountinfo text (field 5 is the mount point, with
// spaces and the like octal-escaped) and returns the points at or below
// dir, last mounted first (so stacked mounts come off in order).
func parseMountsUnder(mountinfo, dir string) []string {
	dir = filepath.Clean(dir)
	var out []string
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// unescapeMountinfo undoes the kernel's \ooo escapes.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder detaches every mount at or below dir.
func unmountUnder(dir string) error {
	mps, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, mp := range mps {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// shimPIDs finds the PIDs of the runc shims serving the containerd at
// socket: each is started with `-address <socket>` and leaves containerd's
// process group, so stopping containerd does not end it. containerd v2.4
// writes no shim PID file, and the socket path is unique to one node.
func shimPIDs(socket string) []int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	want := "\x00-address\x00" + socket + "\x00"
	var pids []int
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), want) || !strings.Contains(string(b), "containerd-shim") {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	return pids
}

// alive reports whether pid is a live, non-zombie process.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// leftovers reports what a node left behind: live shims, processes in its
// cgroups, its cgroups, mounts below its directory.
func leftovers(l layout, shims []int) error {
	var errs []error
	for _, pid := range shims {
		if alive(pid) {
			errs = append(errs, fmt.Errorf("containerd shim %d still running", pid))
		}
	}
	if pids := cgroupProcs(l.CgroupRoot); len(pids) > 0 {
		errs = append(errs, fmt.Errorf("processes %v still in cgroup %s", pids, l.CgroupRoot))
	}
	dirs, err := cgroupDirs(l.CgroupRoot)
	if err != nil {
		errs = append(errs, err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			errs = append(errs, fmt.Errorf("cgroup %s still exists", d))
		}
	}
	mps, err := mountsUnder(l.Dir)
	if err != nil {
		errs = append(errs, err)
	}
	for _, mp := range mps {
		errs = append(errs, fmt.Errorf("mount %s still present", mp))
	}
	return errors.Join(errs...)
}
