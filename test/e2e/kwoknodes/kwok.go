// Package kwoknodes simulates GPU nodes on an end-to-end control plane:
// Node objects carrying the tessera device plugin's GPU inventory
// annotation and the capacity it would advertise, kept Ready by kwok
// (sigs.k8s.io/kwok, no kubelet), which also moves the pods bound to them
// to Running and finishes their deletion.
package kwoknodes

import (
	"context"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tessera-gpu/tessera/test/e2e/binaries"
	"github.com/tessera-gpu/tessera/test/e2e/controlplane"
	"github.com/tessera-gpu/tessera/test/e2e/process"
)

// ManagedAnnotation marks the nodes kwok manages (kwokctl's convention);
// Node sets it.
const (
	ManagedAnnotation = "kwok.x-k8s.io/node"
	ManagedValue      = "fake"
)

// PodCIDR is where kwok draws pod IPs from: room for any benchmark.
const PodCIDR = "10.64.0.0/10"

// stages are kwok's "fast" stages (sigs.k8s.io/kwok v0.8.0,
// kustomize/stage/{node,pod}/fast, Apache-2.0): a node becomes Ready once,
// its lease is renewed by kwok, a bound pod becomes Running at once, a
// Job's pod completes, and a deleted pod is removed; with them kwok's own
// options (kwok-configuration.yaml: more node workers, so 1,000 nodes come
// up quickly).
//
//go:embed stages/*.yaml
var stages embed.FS

// Start runs kwok against cp, managing the nodes with ManagedAnnotation,
// and waits until its health endpoint answers. cp.Stop stops it.
func Start(ctx context.Context, cp *controlplane.ControlPlane) (*process.Process, error) {
	path, err := binaries.Kwok.Path()
	if err != nil {
		return nil, fmt.Errorf("kwok: %w", err)
	}
	dir := filepath.Join(cp.Dir, "kwok")
	// HOME: kwok also reads ~/.kwok/kwok.yaml; a user's file must not
	// change the test.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("kwok: %w", err)
	}
	cfgPath, err := writeConfig(dir)
	if err != nil {
		return nil, err
	}
	port, err := controlplane.FreePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p, err := cp.StartProcess(process.Spec{
		Name: "kwok",
		Path: path,
		Args: []string{
			"--config=" + cfgPath,
			"--kubeconfig=" + cp.AdminKubeconfig,
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=" + ManagedAnnotation + "=" + ManagedValue,
			"--cidr=" + PodCIDR,
			"--node-ip=10.63.0.1",
			"--server-address=" + addr,
		},
		Env: []string{"HOME=" + dir},
	})
	if err != nil {
		return nil, err
	}
	if err := controlplane.WaitHealthy(ctx, p, "http://"+addr+"/healthz"); err != nil {
		cp.StopProcess(p)
		return nil, fmt.Errorf("kwok %s did not become ready: %w; log tail (%s):\n%s", binaries.Kwok.Version, err, p.LogPath, p.Tail(4096))
	}
	return p, nil
}

// writeConfig writes the stages as one multi-document kwok config.
func writeConfig(dir string) (string, error) {
	entries, err := stages.ReadDir("stages")
	if err != nil {
		return "", fmt.Errorf("kwok stages: %w", err)
	}
	docs := make([]string, 0, len(entries))
	for _, e := range entries {
		b, err := stages.ReadFile("stages/" + e.Name())
		if err != nil {
			return "", fmt.Errorf("kwok stages: %w", err)
		}
		docs = append(docs, string(b))
	}
	path := filepath.Join(dir, "kwok.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")), 0o600); err != nil {
		return "", fmt.Errorf("kwok config: %w", err)
	}
	return path, nil
}
