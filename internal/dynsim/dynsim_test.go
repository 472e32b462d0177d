package dynsim

import (
	"os"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/placement/sim"
	"github.com/tessera-gpu/tessera/internal/placement/trace"
)

const shipped = "../placement/testdata/openb/"

func load(t testing.TB) (nodes []trace.Node, pods []trace.Pod) {
	nodes, err := trace.ReadNodesFile(shipped + "openb_node_list_gpu_node.csv")
	if err != nil {
		t.Fatal(err)
	}
	pods, err = trace.ReadPodsFile(shipped + "openb_pod_list_default.csv")
	if err != nil {
		t.Fatal(err)
	}
	return nodes, pods
}

func TestCompareQuick(t *testing.T) {
	nodes, pods := load(t)
	o := DefaultOptions()
	o.Workload.Horizon = 3 * time.Hour
	if h := os.Getenv("DYNSIM_HOURS"); h != "" {
		d, _ := time.ParseDuration(h)
		o.Workload.Horizon = d
	}
	start := time.Now()
	res, info, err := Compare(sim.FromTrace(nodes, nil).Nodes, pods, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v in %v", info, time.Since(start))
	WriteTable(os.Stdout, res)
}
