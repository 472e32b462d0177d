package scheduler

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/test/e2e/kwoknodes"
	"github.com/tessera-gpu/tessera/test/e2e/tesserascheduler"
	"github.com/tessera-gpu/tessera/test/e2e/workload"
)

const (
	hostnameKey = "kubernetes.io/hostname"
	zoneKey     = "topology.kubernetes.io/zone"
)

// Inter-pod rules on a real API server and controller manager: a
// Deployment whose replicas avoid each other per node puts 3 of its 4
// replicas on the 3 nodes and the 4th waits, told why as kube-scheduler
// words it; pods spread over zones with maxSkew 1 land 2 and 2 though
// bestfit would pack them.
func TestInterPodAffinityAndSpread(t *testing.T) {
	nodes := kwoknodes.UniformNodes("ipa", 3, kwoknodes.L4, 4)
	for i, zone := range []string{"a", "a", "b"} {
		nodes[i].Labels = map[string]string{hostnameKey: nodes[i].Name, zoneKey: zone}
	}
	zoneOf := map[string]string{nodes[0].Name: "a", nodes[1].Name: "a", nodes[2].Name: "b"}
	c, ctx := setup(t, nodes)
	startScheduler(t, ctx, c, tesserascheduler.Options{})
	client := c.Client()

	web := map[string]string{"app": "web"}
	tmpl := workload.WholeGPUPod(ns, "", workload.TesseraScheduler, 1)
	tmpl.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: web}, TopologyKey: hostnameKey}}}}
	replicas := int32(4)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: appsv1.DeploymentSpec{
		Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: web},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: web}, Spec: tmpl.Spec}}}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
	eventually(t, ctx, "3 replicas on 3 nodes, the 4th told why", func() bool {
		l, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil || len(l.Items) != 4 {
			return false
		}
		on, waiting := map[string]bool{}, ""
		for _, p := range l.Items {
			if p.Spec.NodeName == "" {
				waiting = p.Name
				continue
			}
			if on[p.Spec.NodeName] {
				t.Fatalf("two replicas on %s despite their anti-affinity", p.Spec.NodeName)
			}
			on[p.Spec.NodeName] = true
		}
		return len(on) == 3 && waiting != "" && hasEvent(ctx, client, waiting, "FailedScheduling", want)
	})

	spread := numbered("spread", 4, func(_ int, name string) *corev1.Pod {
		p := workload.WholeGPUPod(ns, name, workload.TesseraScheduler, 1)
		p.Labels = map[string]string{"app": "spread"}
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: zoneKey,
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}}}}
		return p
	})
	create(t, ctx, c, spread...)
	perZone := map[string]int{}
	eventually(t, ctx, "the spread pods bound", func() bool {
		clear(perZone)
		for _, p := range spread {
			n := nodeOf(t, ctx, client, p.Name)
			if n == "" {
				return false
			}
			perZone[zoneOf[n]]++
		}
		return true
	})
	if perZone["a"] != 2 || perZone["b"] != 2 {
		t.Fatalf("spread pods per zone %v, want 2 and 2", perZone)
	}
	if got := checkCapacity(t, ctx, client); got != 7 {
		t.Fatalf("%d pods bound, want 7", got)
	}
}
