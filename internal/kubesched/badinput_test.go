package kubesched

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
)

// Bad input is named in an event and stops nothing else: a malformed
// inventory, an inventory that lies (bound pods claim more than it has),
// a malformed assignment on a pending pod, an unknown priority.
func TestBadInputIsNamedAndNothingElseStops(t *testing.T) {
	a := newAPI(t)
	a.rawNode("broken", `{"version":"v1","gpus":[{"uuid":"GPU-x","index":0,"model":"T4","memoryMiB":"lots"}]}`)
	a.gpuNode("liar", 1, 16*gib, "T4")
	a.gpuNode("good", 1, 16*gib, "T4")
	lie := `{"version":"v1","containers":[{"name":"main","gpus":[{"uuid":"GPU-liar-0"}]}]}`
	a.pod("claim1", res(string(translate.ResourceGPU), "1"), onNode("liar"), created(time.Hour), ann(annv1.AssignmentKey, lie))
	a.pod("claim2", res(string(translate.ResourceGPU), "1"), onNode("liar"), created(time.Hour), ann(annv1.AssignmentKey, lie))
	a.pod("garbled", res(string(translate.ResourceGPU), "1"), onNode("good"), created(time.Hour), ann(annv1.AssignmentKey, "{not json"))
	a.start(testConfig())
	eventually(t, "inventory event on the broken node", func() bool { return a.eventFor("broken", "TesseraInventoryInvalid", "memoryMiB") })
	eventually(t, "conflict event on the liar", func() bool { return a.eventFor("liar", "TesseraConflictingPlacement", "GPU 0") })
	eventually(t, "garbled assignment named", func() bool { return a.eventFor("garbled", "TesseraAnnotationUnusable", "malformed JSON") })

	// garbled still counts on good's only GPU, so a new whole-GPU pod fits nowhere.
	a.pod("typo", res(string(translate.ResourceGPU), "1"), ann(schedv1.PriorityAnnotation, "urgnt"))
	eventually(t, "unknown priority named", func() bool { return a.eventFor("typo", "FailedScheduling", `"urgnt"`) })
	a.pod("waits", res(string(translate.ResourceGPU), "1"))
	eventually(t, "waits explained", func() bool {
		for _, e := range a.events("FailedScheduling") {
			if e.InvolvedObject.Name == "waits" {
				m := e.Message
				return strings.HasPrefix(m, "0/3 nodes are available: ") && strings.Contains(m, "1 Insufficient tessera.io/gpu") &&
					strings.Contains(m, "1 node(s) had an unusable tessera.io/node-gpus inventory") && strings.Contains(m, "1 node(s) had conflicting GPU placements")
			}
		}
		return false
	})
	a.deletePod("garbled")
	a.pod("malformed", res(string(translate.ResourceMemory), "2"), ann(annv1.AssignmentKey, `{"version":"v9"}`))
	eventually(t, "waits or malformed bound on good", func() bool {
		return a.get("waits").Spec.NodeName == "good" || a.get("malformed").Spec.NodeName == "good"
	})
	eventually(t, "malformed assignment on a pending pod named", func() bool {
		return a.eventFor("malformed", "TesseraAnnotationIgnored", "version")
	})
}

const queuesV1 = `apiVersion: scheduler.tessera.io/v1
kind: SchedulerConfig
queues:
- name: team-a
  nominal: {gpus: %s}
defaultQueue: team-a
`

// The queue ConfigMap is read at start and on change; a bad edit keeps
// the last good configuration (quotas still enforced) and says why on the
// ConfigMap.
func TestQueueConfigReloadKeepsLastGood(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 2, 16*gib, "T4")
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "tessera", Name: "queues"}, Data: map[string]string{"config.yaml": strings.Replace(queuesV1, "%s", "1", 1)}}
	if _, err := a.client.CoreV1().ConfigMaps("tessera").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.QueueConfigMap = "tessera/queues"
	r := a.start(cfg)
	a.pod("first", res(string(translate.ResourceGPU), "1"))
	a.pod("second", res(string(translate.ResourceGPU), "1"), created(-time.Second))
	eventually(t, "first bound", func() bool { return a.get("first").Spec.NodeName == "n1" })
	defer func() {
		if t.Failed() {
			for _, e := range a.events("FailedScheduling") {
				t.Logf("%s: %s", e.InvolvedObject.Name, e.Message)
			}
			t.Logf("second on %q", a.get("second").Spec.NodeName)
		}
	}()
	eventually(t, "second held by quota", func() bool { return a.eventFor("second", "FailedScheduling", "quota") })

	cm.ResourceVersion = ""
	cm.Data["config.yaml"] = "apiVersion: scheduler.tessera.io/v1\nkind: SchedulerConfig\nqueues: [{name: team-a, nominal: {gpus: -3}}]\n"
	if _, err := a.client.CoreV1().ConfigMaps("tessera").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "bad config named on the ConfigMap", func() bool { return a.eventFor("queues", "InvalidSchedulerConfig", "queues[0]") })
	if got := testutilValue(t, r.s.metrics.ConfigLastGood); got != 0 {
		t.Fatalf("config_last_reload_successful = %v after a bad config", got)
	}
	time.Sleep(200 * time.Millisecond)
	if a.get("second").Spec.NodeName != "" {
		t.Fatal("second bound: the bad config dropped the quota")
	}
	cm.Data["config.yaml"] = strings.Replace(queuesV1, "%s", "2", 1)
	if _, err := a.client.CoreV1().ConfigMaps("tessera").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "second bound under the raised quota", func() bool { return a.get("second").Spec.NodeName == "n1" })
	if got := testutilValue(t, r.s.metrics.ConfigLastGood); got != 1 {
		t.Fatalf("config_last_reload_successful = %v after a good config", got)
	}
}
