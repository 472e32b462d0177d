package kubesched

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
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

// A bound pod's tessera.io/deadline no longer matters and its
// tessera.io/checkpoint-interval only orders victims: an unreadable value
// (edited after the bind, or written before tessera read it) must not make
// the pod an unreadable one, booked as P0 and never preempted.
func TestBoundPodWithUnreadableTimingIsStillAVictim(t *testing.T) {
	for _, bad := range [][2]string{{translate.DeadlineAnnotation, "tomorrow"}, {translate.CheckpointAnnotation, "5"}} {
		t.Run(bad[0], func(t *testing.T) {
			a := newAPI(t)
			a.gpuNode("n1", 1, 16*gib, "T4")
			a.pod("victim", res(string(translate.ResourceGPU), "1"), onNode("n1"), created(time.Hour),
				ann(schedv1.PriorityAnnotation, "P3", annv1.AssignmentKey, wholeGPU0, bad[0], bad[1]))
			a.start(testConfig())
			a.pod("urgent", res(string(translate.ResourceGPU), "1"), ann(schedv1.PriorityAnnotation, "P0"))
			eventually(t, "victim evicted", func() bool {
				a.mu.Lock()
				defer a.mu.Unlock()
				return len(a.evicted) == 1 && a.evicted[0] == "default/victim"
			})
		})
	}
}
