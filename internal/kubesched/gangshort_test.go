package kubesched

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/internal/gang"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
)

// A pod group whose min-member is more than the pods that exist is named
// as such when it times out — "pod-group x: min-member 3 but only 2 pods
// exist", in the event and the PodScheduled condition — and it is not
// given up: once the missing pod is created, the members are queued again
// and the group starts.
func TestGangShortOfPodsIsNamedAndRecovers(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 4, 16*gib, "T4")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "tessera", Name: "queues"},
		Data: map[string]string{"config.yaml": "apiVersion: scheduler.tessera.io/v1\nkind: SchedulerConfig\ngang: {timeout: 2s}\n"}}
	if _, err := a.client.CoreV1().ConfigMaps("tessera").Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.QueueConfigMap = "tessera/queues"
	a.start(cfg)
	member := func(name string) {
		a.pod(name, res(string(translate.ResourceGPU), "1"), ann(gang.GroupAnnotation, "x", gang.MinMemberAnnotation, "3"))
	}
	member("w0")
	member("w1")
	const want = "pod-group x: min-member 3 but only 2 pods exist"
	eventually(t, "the shortfall named in an event", func() bool { return a.eventFor("w0", "FailedScheduling", want) })
	eventually(t, "the shortfall named in the condition", func() bool {
		reason, msg := a.podScheduledReason("w1")
		return reason == corev1.PodReasonUnschedulable && strings.Contains(msg, want)
	})
	if a.get("w0").Spec.NodeName != "" {
		t.Fatal("a member of an incomplete group was bound")
	}
	member("w2")
	defer func() {
		if t.Failed() {
			for _, e := range a.events("FailedScheduling") {
				t.Logf("%s: %s", e.InvolvedObject.Name, e.Message)
			}
		}
	}()
	eventually(t, "the group bound once its third pod exists", func() bool {
		return a.get("w0").Spec.NodeName == "n1" && a.get("w1").Spec.NodeName == "n1" && a.get("w2").Spec.NodeName == "n1"
	})
}

// Pod groups are namespaced like pods: one pod of group "x" in each of two
// namespaces is not a group of two (before, the engine saw one group "x"
// and bound both).
func TestGroupsOfOneNameInTwoNamespacesAreTwoGroups(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 4, 16*gib, "T4")
	a.start(testConfig())
	other := a.pod("w0", res(string(translate.ResourceGPU), "1"), ann(gang.GroupAnnotation, "x", gang.MinMemberAnnotation, "2")).DeepCopy()
	other.Namespace, other.ResourceVersion, other.UID = "team-b", "", "uid-team-b-w0"
	if _, err := a.client.CoreV1().Pods("team-b").Create(context.Background(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the group in default reported short", func() bool {
		return a.eventFor("w0", "FailedScheduling", "pod group x (min-member 2)")
	})
	if a.get("w0").Spec.NodeName != "" {
		t.Fatal("default/w0 bound: it made a group of two with team-b/w0")
	}
	a.pod("w1", res(string(translate.ResourceGPU), "1"), ann(gang.GroupAnnotation, "x", gang.MinMemberAnnotation, "2"))
	eventually(t, "the group in default bound once whole", func() bool {
		return a.get("w0").Spec.NodeName == "n1" && a.get("w1").Spec.NodeName == "n1"
	})
	if p, err := a.client.CoreV1().Pods("team-b").Get(context.Background(), "w0", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("team-b/w0 bound alone (%v) or gone: %v", p.Spec.NodeName, err)
	}
}
