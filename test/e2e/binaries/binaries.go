// Package binaries finds the real binaries an end-to-end cluster runs, as
// hack/e2e-binaries.sh builds them: $TESSERA_CACHE/bin/<name>-<version>,
// $TESSERA_CACHE defaulting to $HOME/.cache/tessera. The versions here and
// in the script must agree.
package binaries

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Binary is one pinned binary.
type Binary struct {
	Name    string
	Version string
}

// The binaries of the control plane and the simulated nodes.
var (
	Etcd                  = Binary{"etcd", "v3.7.3"}
	KubeAPIServer         = Binary{"kube-apiserver", "v1.37.2"}
	KubeControllerManager = Binary{"kube-controller-manager", "v1.37.2"}
	KubeScheduler         = Binary{"kube-scheduler", "v1.37.2"}
	Kwok                  = Binary{"kwok", "v0.8.0"}
	// The real node (package realnode).
	Kubelet        = Binary{"kubelet", "v1.37.2"}
	Containerd     = Binary{"containerd", "v2.4.2"}
	ContainerdShim = Binary{"containerd-shim-runc-v2", "v2.4.2"}
	Ctr            = Binary{"ctr", "v2.4.2"}
	// Helm installs the chart onto the real node (package gpunode).
	Helm = Binary{"helm", "v3.22.0"}
)

// Dir is where the binaries live.
func Dir() (string, error) {
	cache := os.Getenv("TESSERA_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("binary cache: TESSERA_CACHE unset and no home directory: %w", err)
		}
		cache = filepath.Join(home, ".cache", "tessera")
	}
	return filepath.Join(cache, "bin"), nil
}

// Path returns the path of b, or an error that says how to build it.
func (b Binary) Path() (string, error) {
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, b.Name+"-"+b.Version)
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("%s %s is missing: no %s (build it with `hack/e2e-binaries.sh %s`, or `make e2e-binaries`; TESSERA_CACHE selects the cache)",
			b.Name, b.Version, p, b.Name)
	case err != nil:
		return "", fmt.Errorf("%s %s: %w", b.Name, b.Version, err)
	case st.IsDir() || st.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("%s %s: %s is not an executable file", b.Name, b.Version, p)
	}
	return p, nil
}

// Paths resolves every binary in bs, reporting all the missing ones at once.
func Paths(bs ...Binary) (map[Binary]string, error) {
	out := make(map[Binary]string, len(bs))
	var errs []error
	for _, b := range bs {
		p, err := b.Path()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[b] = p
	}
	return out, errors.Join(errs...)
}
