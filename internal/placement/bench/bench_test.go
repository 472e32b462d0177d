package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/internal/placement/sim"
)

func shippedPods(t *testing.T) sim.Trace {
	t.Helper()
	tr, err := sim.Load("../testdata/openb/openb_node_list_gpu_node.csv", "../testdata/openb/openb_pod_list_default.csv")
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestThroughputOnSmallSyntheticCluster(t *testing.T) {
	tr := shippedPods(t)
	syn := Synthetic{Nodes: 200, GPUs: 8, Models: 2, CPU: 128000, MemMiB: 1 << 20}
	r, err := RunThroughput(syn.Specs(), Unconstrained(tr.Pods), "tessera", false, 1.0, 42, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Decisions < 1500 || r.Placed < r.Decisions*9/10 || r.P99 < r.P50 || r.Max < r.P99 || r.StateBytes == 0 {
		t.Fatalf("implausible measurement: %+v", r)
	}
	if r.UnallocPct < 0 || r.UnallocPct > 20 {
		t.Fatalf("filling 200 nodes to 100%% left %.2f%% unallocated", r.UnallocPct)
	}
	limited, _ := RunThroughput(syn.Specs(), Unconstrained(tr.Pods), "tessera", true, 1.0, 42, 50)
	if limited.Decisions != 50 {
		t.Fatalf("limit 50 made %d decisions", limited.Decisions)
	}
}

func TestIndexAgreesWithScanOnSyntheticCluster(t *testing.T) {
	tr := shippedPods(t)
	syn := Synthetic{Nodes: 60, GPUs: 8, Models: 2, CPU: 96000, MemMiB: 1 << 20}
	pods := Unconstrained(tr.Pods[:2000])
	n, differ, err := CompareIndexScan(syn.Specs(), pods, "tessera", 7, 1.2, 0)
	if err != nil || n < 500 || differ != 0 {
		t.Fatalf("compared %d, %d differ, err %v", n, differ, err)
	}
}

func TestReadPublished(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "summary.csv")
	os.WriteFile(path, []byte("workload,sc_policy,arrived_pct_of_gpu_capacity,n_seeds,unalloc_gpu_pct_median\n"+
		"openb_pod_list_default,06-FGD,100,10,4.77\nopenb_pod_list_default,05-BestFit,100,10,7.09\n"), 0o644)
	p, err := ReadPublished(path)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := p.Median("default", "fgd", 100); !ok || v != 4.77 {
		t.Errorf("fgd: %v %v", v, ok)
	}
	if _, ok := p.Median("default", "tessera", 100); ok {
		t.Error("tessera has no published counterpart")
	}
	os.WriteFile(path, []byte("workload,sc_policy,arrived_pct_of_gpu_capacity,unalloc_gpu_pct_median\nw,p,100,abc\n"), 0o644)
	if _, err := ReadPublished(path); err == nil || !strings.Contains(err.Error(), "summary.csv:2: field unalloc_gpu_pct_median") {
		t.Errorf("bad median: %v", err)
	}
	os.WriteFile(path, []byte("workload,sc_policy\n"), 0o644)
	if _, err := ReadPublished(path); err == nil || !strings.Contains(err.Error(), "missing column") {
		t.Errorf("missing column: %v", err)
	}
}

func TestVariants(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"openb_pod_list_default.csv", "openb_pod_list_cpu050.csv", "openb_node_list_gpu_node.csv"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o644)
	}
	v, err := Variants(dir)
	if err != nil || strings.Join(v, ",") != "cpu050,default" {
		t.Fatalf("variants %v %v", v, err)
	}
}
