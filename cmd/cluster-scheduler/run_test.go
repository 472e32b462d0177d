package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/internal/kubesched/metrics"
)

// Flags win over the file, the file over the defaults; bad values are
// named; --help explains without failing.
func TestRunConfigLayers(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "s.yaml")
	if err := os.WriteFile(file, []byte("version: v1\nbindWorkers: 8\nkubeAPIQPS: 200\nleaderElection: {leaseName: from-file}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	c, err := runConfig([]string{"--config=" + file, "--kube-api-qps=1000", "--kube-api-burst=2000", "--leader-elect", "--lease-namespace=tessera", "--queue-config-map=tessera/queues"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if c.BindWorkers != 8 || c.KubeAPIQPS != 1000 || c.KubeAPIBurst != 2000 || !c.LeaderElection.Enabled || c.LeaderElection.LeaseName != "from-file" ||
		c.LeaderElection.LeaseNamespace != "tessera" || c.QueueConfigMap != "tessera/queues" || c.SchedulerName != "tessera-scheduler" {
		t.Fatalf("resolved %+v", c)
	}
	if c, err := runConfig([]string{"--leader-elect=false"}, &stderr); err != nil || c.LeaderElection.Enabled {
		t.Fatalf("--leader-elect=false: %+v, %v", c, err)
	}
	if _, err := runConfig([]string{"--kube-api-burst=many"}, &stderr); err == nil || !strings.Contains(err.Error(), "--kube-api-burst=many") {
		t.Fatalf("bad burst: %v", err)
	}
	if _, err := runConfig([]string{"--queue-config-map=queues"}, &stderr); err == nil || !strings.Contains(err.Error(), "queueConfigMap") {
		t.Fatalf("bad ConfigMap reference: %v", err)
	}
	stderr.Reset()
	if err := runRun([]string{"--help"}, &stderr, &stderr); err != nil || !strings.Contains(stderr.String(), "schedulerName") || !strings.Contains(stderr.String(), "--leader-elect") {
		t.Fatalf("help: %v\n%s", err, stderr.String())
	}
}

// pprof is on the metrics listener only when asked for.
func TestProfilingOnlyWhenAsked(t *testing.T) {
	c, err := runConfig([]string{"--profiling"}, io.Discard)
	if err != nil || !c.Profiling {
		t.Fatalf("--profiling: %+v, %v", c, err)
	}
	if c, _ := runConfig(nil, io.Discard); c.Profiling {
		t.Fatal("profiling is on by default")
	}
	for _, on := range []bool{false, true} {
		srv, err := serveMetrics("127.0.0.1:0", on, metrics.New(), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get("http://" + srv.Addr + "/debug/pprof/goroutine?debug=1")
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := resp.StatusCode == http.StatusOK && strings.Contains(string(body), "goroutine profile"); got != on {
			t.Fatalf("profiling %v: status %d, body %.80q", on, resp.StatusCode, body)
		}
	}
}
