package kubesched

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/engine"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
)

// Pods submitted one at a time get exactly the assignments the engine
// alone chooses for the same sequence (same nodes, same policy): the
// Kubernetes side adds no placement decisions of its own.
func TestAssignmentsEqualTheEnginesChoice(t *testing.T) {
	a := newAPI(t)
	for i := range 10 {
		a.gpuNode(fmt.Sprintf("n%d", i), 4, []uint64{24 * gib, 80 * gib}[i%2], []string{"L4", "H100"}[i%2])
	}
	cfg := testConfig()
	cfg.Policy = "tessera"
	a.start(cfg)
	var pods []*corev1.Pod
	for i := range 40 {
		p := a.pod(fmt.Sprint("p", i), mixedShape(i))
		pods = append(pods, p)
		eventually(t, fmt.Sprint("p", i, " bound"), func() bool { return a.get(p.Name).Spec.NodeName != "" })
	}

	nodes, _ := a.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	slices.SortFunc(nodes.Items, func(x, y corev1.Node) int { return cmp.Compare(x.Name, y.Name) }) // the scheduler's order
	var specs []partition.NodeSpec
	var invs []*translate.Inventory
	for i := range nodes.Items {
		inv, err := translate.NodeInventory(&nodes.Items[i])
		if err != nil {
			t.Fatal(err)
		}
		specs, invs = append(specs, inv.Spec), append(invs, inv)
	}
	c, _ := placement.NewCluster(specs)
	pol, _ := placement.NewPolicy("tessera", c, placement.Options{})
	ecfg, _ := engine.ConfigFrom(schedv1.Default())
	eng, err := engine.New(ecfg, placement.NewScheduler(c, pol, false), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, p := range pods {
		ep, _, err := translate.EnginePod(p, schedv1.Default(), 1024)
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.Submit(ep); err != nil {
			t.Fatal(err)
		}
		eng.Cycle(now)
		var want []string
		node := ""
		for _, ev := range eng.Events() {
			if ev.Kind == engine.Placed {
				node = ev.Decision.NodeName
				for _, sh := range ev.Decision.Grant.Shares {
					want = append(want, invs[ev.Decision.Node].UUIDs[sh.GPU])
				}
			}
		}
		got := a.get(p.Name)
		as, err := annv1.ParseAssignment(got.Annotations[annv1.AssignmentKey])
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		var have []string
		for _, g := range as.Containers[0].GPUs {
			have = append(have, g.UUID)
		}
		if got.Spec.NodeName != node || !slices.Equal(have, want) {
			t.Fatalf("%s: scheduler put it on %s %v, the engine alone on %s %v", p.Name, got.Spec.NodeName, have, node, want)
		}
	}
}

func mixedShape(i int) podOpt {
	switch i % 4 {
	case 0:
		return res(string(translate.ResourceMemory), fmt.Sprint(2+i%10), string(translate.ResourceCore), fmt.Sprint(10+10*(i%5)))
	case 1:
		return res(string(translate.ResourceMemory), fmt.Sprint(4+i%16))
	case 2:
		return res(string(translate.ResourceGPU), "1")
	}
	return res(string(translate.ResourceGPU), "2", string(translate.ResourceCore), "200")
}
