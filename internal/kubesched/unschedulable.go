package kubesched

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/internal/engine"
	"github.com/tessera-gpu/tessera/internal/kubesched/bind"
	"github.com/tessera-gpu/tessera/internal/kubesched/explain"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
	"github.com/tessera-gpu/tessera/internal/placement"
)

// reportEvery bounds how often one pod's unchanged FailedScheduling is
// repeated (the event correlator counts repeats; this bounds API writes).
const reportEvery = time.Minute

// reportUnschedulable posts, for every pod that was pending before this
// cycle and still is, a FailedScheduling event and a PodScheduled=False
// condition (reason Unschedulable) with kube-scheduler's wording — when
// the message changed or a minute passed. Messages are computed once per
// request shape per cycle.
func (s *Scheduler) reportUnschedulable(ctx context.Context, cycleStart time.Time) {
	nodes := map[string][]explain.Node{} // by node constraint
	memo := map[placement.Shape]string{}
	s.eng.EachPending(func(p *engine.Pod) {
		e := s.podState[p.Key]
		if e == nil || e.phase != pending || !p.Submitted.Before(cycleStart) || e.created.After(cycleStart) {
			return
		}
		if e.reported != "" && cycleStart.Sub(e.reportedAt) < reportEvery {
			// Unchanged within the minute: not even worth the message.
			return
		}
		msg := s.whyPending(p, nodes, memo)
		if msg == e.reported && cycleStart.Sub(e.reportedAt) < reportEvery {
			return
		}
		e.reported, e.reportedAt = msg, cycleStart
		s.metrics.Unschedulable.Inc()
		s.event(e, corev1.EventTypeWarning, "FailedScheduling", msg)
		s.condition(e, corev1.PodReasonUnschedulable, msg)
	})
	_ = ctx
}

// whyPending words why p waits: its queue's quota, or the nodes.
func (s *Scheduler) whyPending(p *engine.Pod, nodesBy map[string][]explain.Node, memo map[placement.Shape]string) string {
	if s.admit != nil {
		if err := s.admit.Admit(p, s.now()); err != nil {
			return "pod is held by its queue's quota: " + err.Error()
		}
	}
	if f := s.fits[p.Request.NodeConstraint]; f != nil && f.volumes != nil {
		// kube-scheduler's VolumeBinding PreFilter: no node is asked.
		if why := s.volumes.PodRefusal(f.volumes); why != "" {
			return fmt.Sprintf("0/%d nodes are available: %s.", len(s.nodeState), why)
		}
	}
	sh := s.cluster.ShapeOf(&p.Request)
	msg, ok := memo[sh]
	if !ok {
		key := p.Request.NodeConstraint
		nodes, seen := nodesBy[key]
		if !seen {
			nodes = s.explainNodes(key)
			nodesBy[key] = nodes
		}
		msg = explain.Message(nodes, &p.Request)
		memo[sh] = msg
	}
	everyNodeFits := msg == fmt.Sprintf("0/%d nodes are available.", len(s.nodeState))
	if p.Gang != nil {
		if everyNodeFits {
			msg = msg[:len(msg)-1] + ": " + s.whyGangApart(p.Request.NodeConstraint)
		}
		return fmt.Sprintf("pod group %s (min-member %d) is placed all or nothing: %s", translate.GroupName(p.Gang.Name), p.Gang.MinMember, msg)
	}
	if everyNodeFits {
		// Every node fits the request as far as totals go: the queue
		// order or the placement's finer rules (islands, held capacity)
		// decided.
		return msg[:len(msg)-1] + ": capacity is held for pods ahead in the queue or the request's NVLink/model constraints are not met together."
	}
	return msg
}

// whyGangApart words why a gang member that some node admits alone still
// waits: the members do not fit together, and when they carry inter-pod
// rules each member placed counts for the next (a group that wants one
// member per node needs as many nodes as members).
func (s *Scheduler) whyGangApart(key string) string {
	if f := s.fits[key]; f != nil && f.pods != nil {
		return "a member fits alone, but the members do not fit together: each member placed counts for the next one's inter-pod affinity, anti-affinity and topology spread."
	}
	return "a member fits alone, but the members do not fit together, or capacity is held for pods ahead in the queue."
}

// explainNodes is every node with an inventory as the explanation sees it
// for pods of node constraint key.
func (s *Scheduler) explainNodes(key string) []explain.Node {
	out := make([]explain.Node, 0, len(s.nodeState))
	for _, n := range s.nodeState {
		if n.index < 0 {
			out = append(out, explain.Node{Unusable: true})
			continue
		}
		out = append(out, explain.Node{State: &s.cluster.Nodes[n.index], Cordoned: s.cluster.IsCordoned(n.index), Refused: s.refusal(key, n),
			VolumesRefused: s.volumeRefusal(key, n), PodsRefused: s.podRefusal(key, n)})
	}
	return out
}

// condition patches PodScheduled=False with reason and message.
func (s *Scheduler) condition(e *podEntry, reason, msg string) {
	ns, name := splitRef(e.key)
	c := &corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(s.now())}
	if s.pool != nil {
		s.pool.Submit(context.Background(), &bind.Job{Kind: bind.Patch, Namespace: ns, Name: name, Condition: c})
	}
}

func objectMeta(ns, name string, uid types.UID) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid}
}
