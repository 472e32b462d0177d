package pods

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube/kubefake"
)

func mk(name string, at time.Time, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(at)},
		Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: phase}}
}

func TestPendingInAdmissionOrder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	elsewhere := mk("elsewhere", t0, corev1.PodPending)
	elsewhere.Spec.NodeName = "other"
	client := kubefake.NewNode("n", mk("late", t0.Add(time.Minute), corev1.PodPending), mk("b", t0, corev1.PodPending),
		mk("a", t0, corev1.PodPending), mk("running", t0.Add(-time.Hour), corev1.PodRunning), elsewhere)
	inf := NewInformer(client, "n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := inf.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range inf.Pending() {
		names = append(names, p.Name)
	}
	if len(names) != 3 || names[0] != "a" || names[1] != "b" || names[2] != "late" {
		t.Fatalf("pending order = %v", names)
	}
	if inf.Get("ns", "running") == nil || inf.Get("ns", "nope") != nil || inf.Get("ns", "elsewhere") != nil {
		t.Fatal("Get")
	}
	// A pod created after the first sync arrives through the watch.
	if err := client.CreatePod(mk("new", t0.Add(2*time.Minute), corev1.PodPending)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for inf.Get("ns", "new") == nil {
		if time.Now().After(deadline) {
			t.Fatal("pod created after sync never seen")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(inf.Pending()); n != 4 {
		t.Fatalf("pending after create = %d, want 4", n)
	}
}

func TestContainersAndRequest(t *testing.T) {
	p := mk("p", time.Now(), corev1.PodPending)
	p.Spec.InitContainers = []corev1.Container{{Name: "init"}}
	p.Spec.Containers = []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{"tessera.io/gpu-mem": resource.MustParse("12")}}}}
	cs := Containers(p)
	if len(cs) != 2 || cs[0].Name != "init" {
		t.Fatalf("order = %v", cs)
	}
	if Request(&cs[1], "tessera.io/gpu-mem") != 12 || Request(&cs[0], "tessera.io/gpu-mem") != 0 {
		t.Fatal("Request")
	}
}

// TestSameSecondPodsInArrivalOrder: creation timestamps have one-second
// resolution, so pods a controller creates in a burst tie. Kubelet admits
// them as its watch delivers them (bound to the node), so the tie is
// broken by the order the plugin's own watch delivered them, not by name.
func TestSameSecondPodsInArrivalOrder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	client := kubefake.NewNode("n")
	inf := NewInformer(client, "n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := inf.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web-zq4", "web-b7x", "web-m2c"} {
		if err := client.CreatePod(mk(name, t0, corev1.PodPending)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for inf.Get("ns", name) == nil {
			if time.Now().After(deadline) {
				t.Fatal("pod never seen")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var names []string
	for _, p := range inf.Pending() {
		names = append(names, p.Name)
	}
	if fmt.Sprint(names) != "[web-zq4 web-b7x web-m2c]" {
		t.Fatalf("pending order = %v, want the order kubelet received them", names)
	}
}
