package realnode

import (
	"errors"
	"fmt"
	"os"
)

// hostPaths are the fixed host directories containerd, runc, the CNI
// library and the kubelet create whatever their configured roots: shim
// sockets (/run/containerd/s), runc state (/run/containerd/runc), the opt
// plugin, CNI results (/var/lib/cni), the kubelet's device-plugin directory
// and its container-log links. A run removes those it created.
var hostPaths = []string{"/run/containerd", "/opt/containerd", "/var/lib/cni", "/var/lib/kubelet", "/var/log/containers", "/var/log/pods"}

// absentHostPaths lists the hostPaths that do not exist yet.
func absentHostPaths() []string {
	var absent []string
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			absent = append(absent, p)
		}
	}
	return absent
}

// removeCreatedHostPaths removes the paths (absent before the run) that
// the run created, and names them.
func removeCreatedHostPaths(absentBefore []string) ([]string, error) {
	var removed []string
	var errs []error
	for _, p := range absentBefore {
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", p, err))
			continue
		}
		removed = append(removed, p)
	}
	return removed, errors.Join(errs...)
}
