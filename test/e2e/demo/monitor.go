package demo

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tessera-gpu/tessera/test/e2e/process"
	"github.com/tessera-gpu/tessera/test/e2e/scrape"
)

// monitor is the node monitor binary (cmd/vgpu-monitor) running over the
// node's state directory, reading identities from the PodResources socket
// and the simulated driver's NVML.
type monitor struct {
	proc *process.Process
	url  string
}

// startMonitor runs bin/vgpu-monitor and waits until it is ready (it has
// read PodResources once).
func startMonitor(ctx context.Context, bin string, n *simNode) (*monitor, error) {
	sock := filepath.Join(n.dir, "pod-resources.sock")
	if err := n.podRes.serve(sock); err != nil {
		return nil, err
	}
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`version: v1
nodeName: %s
stateDir: %s
procRoot: /proc
podResourcesSocket: %s
listenAddress: %s
identityInterval: 200ms
reapInterval: 100ms
enforcement: {policy: report, events: false}
containerd: {socket: ""}
log: {level: warn, format: text}
`, nodeName, n.stateDir, sock, addr)
	path := filepath.Join(n.dir, "vgpu-monitor.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	env := append([]string{}, n.driverEnv[1:]...) // the driver's state and devices; NVML by path
	p, err := process.Start(process.Spec{Name: "vgpu-monitor", Path: bin, LogDir: n.dir, Env: env,
		Args: []string{"--config", path, "--nvml-library", filepath.Join(n.libDir, "fakegpu", "libnvidia-ml.so.1")}})
	if err != nil {
		return nil, err
	}
	m := &monitor{proc: p, url: "http://" + addr}
	if err := m.awaitReady(ctx, patience); err != nil {
		m.stop()
		return nil, err
	}
	return m, nil
}

// awaitReady waits up to wait for /readyz to answer 200 OK.
func (m *monitor) awaitReady(ctx context.Context, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err := m.proc.WaitReady(ctx, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.url+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("vgpu-monitor not ready in %s: %w: %s", wait, err, logTail(m.proc.LogPath))
	}
	return nil
}

func (m *monitor) stop() { _ = m.proc.Stop(5 * time.Second) }

// rows scrapes /metrics and returns one row per container and GPU.
func (m *monitor) rows(ctx context.Context) ([]MetricRow, map[string]*dto.MetricFamily, error) {
	fams, err := scrape.Families(ctx, m.url+"/metrics")
	if err != nil {
		return nil, nil, err
	}
	type key struct{ ns, pod, ctr, gpu string }
	byKey := map[key]*MetricRow{}
	set := func(name string, apply func(r *MetricRow, v float64)) {
		f := fams[name]
		if f == nil {
			return
		}
		for _, s := range f.Metric {
			l := labels(s)
			k := key{l["namespace"], l["pod"], l["container"], l["gpu_uuid"]}
			r := byKey[k]
			if r == nil {
				r = &MetricRow{Namespace: k.ns, Pod: k.pod, Container: k.ctr, GPU: k.gpu}
				byKey[k] = r
			}
			apply(r, value(s))
		}
	}
	set("tessera_container_gpu_memory_used_bytes", func(r *MetricRow, v float64) { r.Used = uint64(v) })
	set("tessera_container_gpu_memory_limit_bytes", func(r *MetricRow, v float64) { r.Limit = uint64(v) })
	set("tessera_container_gpu_memory_peak_bytes", func(r *MetricRow, v float64) { r.Peak = uint64(v) })
	set("tessera_container_gpu_allocations_refused_total", func(r *MetricRow, v float64) { r.Refused = v })
	set("tessera_container_gpu_compute_limit_ratio", func(r *MetricRow, v float64) { r.ComputeRatio = v })
	out := make([]MetricRow, 0, len(byKey))
	for _, r := range byKey {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace+out[i].Pod < out[j].Namespace+out[j].Pod })
	return out, fams, nil
}

// gpuUsed is the node-wide memory in use on a GPU (NVML, as the monitor reads it).
func gpuUsed(fams map[string]*dto.MetricFamily, uuid string) (uint64, bool) {
	f := fams["tessera_gpu_memory_used_bytes"]
	if f == nil {
		return 0, false
	}
	for _, s := range f.Metric {
		if labels(s)["gpu_uuid"] == uuid {
			return uint64(value(s)), true
		}
	}
	return 0, false
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// freeLoopbackAddr is a port of 127.0.0.1 nobody listens on now.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// logTail is the end of a component's log, for errors.
func logTail(path string) string {
	b, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	if s == "" {
		return "(no log output)"
	}
	return s
}
