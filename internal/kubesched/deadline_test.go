package kubesched

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
)

// podScheduledReason is the reason of the pod's PodScheduled=False
// condition ("" without one).
func (a *api) podScheduledReason(name string) (string, string) {
	for _, c := range a.get(name).Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return c.Reason, c.Message
		}
	}
	return "", ""
}

// A pod still pending past its tessera.io/deadline is dropped with a
// DeadlineExceeded event and condition that name the deadline; the pod is
// not deleted, and a pod without a deadline keeps waiting as Unschedulable.
func TestPodPastItsDeadlineIsDroppedWithTheReason(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 1, 16*gib, "T4")
	a.pod("late", res(string(translate.ResourceGPU), "2"), created(time.Hour), ann(translate.DeadlineAnnotation, "30m"))
	a.pod("waits", res(string(translate.ResourceGPU), "2"), created(time.Hour))
	a.start(testConfig())
	eventually(t, "the late pod's DeadlineExceeded event", func() bool {
		return a.eventFor("late", ReasonDeadlineExceeded, "deadline ")
	})
	eventually(t, "the late pod's condition", func() bool {
		reason, msg := a.podScheduledReason("late")
		return reason == ReasonDeadlineExceeded && strings.Contains(msg, translate.DeadlineAnnotation)
	})
	eventually(t, "the waiting pod reported unschedulable", func() bool {
		reason, _ := a.podScheduledReason("waits")
		return reason == corev1.PodReasonUnschedulable
	})
	if a.get("late").DeletionTimestamp != nil || a.eventFor("waits", ReasonDeadlineExceeded, "") {
		t.Errorf("the late pod was deleted, or the pod without a deadline was dropped")
	}
}
