package kubesched

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
)

func (a *api) editNode(name string, edit func(n *corev1.Node)) {
	a.t.Helper()
	n, err := a.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	edit(n)
	if _, err := a.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		a.t.Fatal(err)
	}
}

func nodeSelector(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			p.Spec.NodeSelector[kv[i]] = kv[i+1]
		}
	}
}

func tolerate(key string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists})
	}
}

func prefer(weight int32, key, value string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: weight, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{value}}}}}}}}
	}
}

// Kubernetes' node constraints come before GPU placement: a tainted node
// takes only pods that tolerate the taint, a nodeSelector pins a pod, a
// cordoned node takes nothing new, preferred affinity picks among nodes
// that fit; a pod no node admits is told why in kube-scheduler's words,
// and a label added later lets it in.
func TestNodeConstraintsBeforeGPUPlacement(t *testing.T) {
	a := newAPI(t)
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		a.gpuNode(n, 2, 16*gib, "T4")
	}
	a.editNode("n1", func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "training", Effect: corev1.TaintEffectNoSchedule}}
	})
	a.editNode("n2", func(n *corev1.Node) { n.Labels = map[string]string{"pool": "inference"} })
	a.editNode("n3", func(n *corev1.Node) { n.Spec.Unschedulable = true })
	a.editNode("n4", func(n *corev1.Node) { n.Labels = map[string]string{"zone": "b"} })
	a.start(testConfig())
	gpu := res(string(translate.ResourceGPU), "1")

	// Untolerating pods fill n2 and n4 (two GPUs each), never n1 or n3.
	for _, name := range []string{"u1", "u2", "u3", "u4"} {
		a.pod(name, gpu)
	}
	eventually(t, "u1-u4 bound", func() bool {
		for _, name := range []string{"u1", "u2", "u3", "u4"} {
			if n := a.get(name).Spec.NodeName; n != "n2" && n != "n4" {
				return false
			}
		}
		return true
	})
	a.pod("u5", gpu)
	eventually(t, "u5 told why", func() bool {
		return a.eventFor("u5", "FailedScheduling", "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: training}, 1 node(s) were unschedulable, 2 Insufficient tessera.io/gpu.")
	})
	// A pod that tolerates the taint goes to n1.
	a.pod("t1", gpu, tolerate("dedicated"))
	eventually(t, "t1 on the tainted node", func() bool { return a.get("t1").Spec.NodeName == "n1" })
	a.deletePod("u5")

	// A selector no node matches: told so; a label added later admits it.
	a.pod("s1", gpu, nodeSelector("pool", "training"), tolerate("dedicated"))
	eventually(t, "s1 told why", func() bool {
		return a.eventFor("s1", "FailedScheduling", "0/4 nodes are available: 1 node(s) were unschedulable, 3 node(s) didn't match Pod's node affinity/selector.")
	})
	a.editNode("n1", func(n *corev1.Node) { n.Labels = map[string]string{"pool": "training"} })
	eventually(t, "s1 on n1 once labelled", func() bool { return a.get("s1").Spec.NodeName == "n1" })

	// Uncordoning n3 opens it; preferred affinity picks zone a among n3
	// and a freed n4.
	a.deletePod(a.podOn("n4"))
	a.editNode("n3", func(n *corev1.Node) {
		n.Spec.Unschedulable = false
		n.Labels = map[string]string{"zone": "a"}
	})
	a.pod("p1", gpu, prefer(50, "zone", "a"))
	eventually(t, "p1 on the preferred node", func() bool { return a.get("p1").Spec.NodeName == "n3" })
	a.pod("p2", gpu, prefer(50, "zone", "b"))
	eventually(t, "p2 on the preferred node", func() bool { return a.get("p2").Spec.NodeName == "n4" })
	a.checkCapacity(16 * gib)
}

// podOn names one pod bound to node.
func (a *api) podOn(node string) string {
	a.t.Helper()
	l, _ := a.client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	for _, p := range l.Items {
		if p.Spec.NodeName == node {
			return p.Name
		}
	}
	a.t.Fatalf("no pod on %s", node)
	return ""
}

func hostPort(port int32, protocol corev1.Protocol) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: port, HostPort: port, Protocol: protocol})
	}
}

// Host ports as kube-scheduler's NodePorts filter checks them: a node
// where a pod of any scheduler binds the port refuses a pod asking for it
// (told so in kube-scheduler's words), two pods placed in one cycle do not
// both get one node's port, another protocol does not conflict, and a
// port freed lets the waiting pod in.
func TestHostPortsRefuseANodeWhereThePortIsTaken(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 4, 16*gib, "T4")
	a.gpuNode("n2", 4, 16*gib, "T4")
	a.pod("web", onNode("n1"), scheduler("default-scheduler"), hostPort(80, ""))
	gpu := res(string(translate.ResourceGPU), "1")
	a.pod("a", gpu, hostPort(80, corev1.ProtocolTCP)) // in the first cycle together
	a.pod("b", gpu, hostPort(80, ""))
	a.start(testConfig())
	var waiting, placed string
	eventually(t, "one of a and b bound to n2, the other told why", func() bool {
		for _, pair := range [][2]string{{"a", "b"}, {"b", "a"}} {
			if a.get(pair[0]).Spec.NodeName == "n2" && a.get(pair[1]).Spec.NodeName == "" &&
				a.eventFor(pair[1], "FailedScheduling", "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports.") {
				placed, waiting = pair[0], pair[1]
				return true
			}
		}
		return false
	})
	a.pod("udp", gpu, hostPort(80, corev1.ProtocolUDP))
	a.pod("free", gpu)
	eventually(t, "pods without a conflicting port bound", func() bool {
		return a.get("udp").Spec.NodeName != "" && a.get("free").Spec.NodeName != ""
	})
	if a.get(waiting).Spec.NodeName != "" {
		t.Fatalf("%s bound while port 80 is taken on both nodes", waiting)
	}
	a.deletePod("web")
	eventually(t, waiting+" bound to n1 once web is gone", func() bool { return a.get(waiting).Spec.NodeName == "n1" })
	if a.bindsOf("default/"+placed) != 1 || a.bindsOf("default/"+waiting) != 1 {
		t.Fatalf("binds: %s %d, %s %d; want one each", placed, a.bindsOf("default/"+placed), waiting, a.bindsOf("default/"+waiting))
	}
	a.checkCapacity(16 * gib)
}
