package realnode

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// kubeletSysctls are the machine-wide kernel settings the kubelet rewrites
// at start (setupKernelTunables: it modifies them unless
// protectKernelDefaults, which makes it refuse to start instead). They are
// not namespaced, so the supervisor saves them before the run and puts them
// back after it.
var kubeletSysctls = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// saveSysctls reads the current values of names under /proc/sys.
func saveSysctls(names []string) (map[string]string, error) {
	saved := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile("/proc/sys/" + n)
		if err != nil {
			return nil, fmt.Errorf("save sysctl %s: %w", n, err)
		}
		saved[n] = strings.TrimSpace(string(b))
	}
	return saved, nil
}

// restoreSysctls writes back every saved value that changed and returns
// the names it restored.
func restoreSysctls(saved map[string]string) ([]string, error) {
	var restored []string
	var errs []error
	for n, want := range saved {
		b, err := os.ReadFile("/proc/sys/" + n)
		if err != nil {
			errs = append(errs, fmt.Errorf("sysctl %s: %w", n, err))
			continue
		}
		if got := strings.TrimSpace(string(b)); got == want {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+n, []byte(want), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s to %s: %w", n, want, err))
			continue
		}
		restored = append(restored, n+"="+want)
	}
	return restored, errors.Join(errs...)
}
