package gpunode_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/test/e2e/gpunode"
	"github.com/tessera-gpu/tessera/test/e2e/realnode"
)

func TestMain(m *testing.M) { os.Exit(gpunode.Main(m.Run)) }

// TestTesseraOnRealNode installs the chart onto the real node with the
// simulated 4-GPU H200 driver and runs the user scenario (package
// comment): every check of the report must hold.
func TestTesseraOnRealNode(t *testing.T) {
	realnode.RequireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	rep, err := gpunode.Run(ctx, gpunode.Options{Logf: t.Logf})
	if rep != nil {
		var b bytes.Buffer
		_ = rep.WriteText(&b)
		t.Logf("report:\n%s", b.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Checks) < 10 {
		t.Errorf("only %d checks ran", len(rep.Checks))
	}
	for _, c := range rep.Failed() {
		t.Errorf("%s: %s", c.What, c.Detail)
	}
	var pods []string
	for _, w := range rep.Workloads {
		pods = append(pods, w.Pod)
	}
	if strings.Join(pods, " ") != "trainer inference share-a share-b online-p0 batch-p3" || rep.Workloads[0].TotalMiB != 8192 {
		t.Errorf("workloads %v (the first saw %d MiB): want trainer (8 GiB), inference, share-a, share-b, online-p0, batch-p3", pods, rep.Workloads[0].TotalMiB)
	}
	if len(rep.Node.GPUs) != 4 {
		t.Errorf("node GPUs %v, want 4", rep.Node.GPUs)
	}
}
