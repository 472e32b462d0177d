package kubesched

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/engine"
	"github.com/tessera-gpu/tessera/internal/kubesched/interpod"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/quota"
)

var everything = labels.Everything()

// rebuild builds the engine from the informers' caches and the loop's own
// promises (binds in flight, nominated pods), in this order: nodes (in
// name order), pods bound to them (tessera.io/allocated, else
// tessera.io/assignment), promised placements, then pending pods in
// creation order. A restarted scheduler has no promises; the bound pods
// are then everything, so it neither loses nor double-books a pod.
func (s *Scheduler) rebuild(why string) error {
	s.rebuildWanted = false
	old := s.podState
	nodes := s.readNodes(s.nodeState)
	var specs []partition.NodeSpec
	for _, n := range nodes {
		if n.err == nil {
			n.index = len(specs)
			specs = append(specs, n.inv.Spec)
		}
	}
	cluster, err := placement.NewCluster(specs)
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	pol, err := placement.NewPolicy(s.cfg.Policy, cluster, placement.Options{})
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	sched := placement.NewScheduler(cluster, pol, false)
	eng, admit, err := s.newEngine(sched)
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	s.cluster, s.sched, s.eng, s.admit, s.frag = cluster, sched, eng, admit, nil
	s.nodeState = map[string]*nodeEntry{}
	s.byIndex = make([]*nodeEntry, len(specs))
	for _, n := range nodes {
		s.nodeState[n.name] = n
		if n.err != nil {
			continue
		}
		s.byIndex[n.index] = n
		for _, g := range n.inv.Unhealthy { // held whole: nothing new lands on a sick GPU
			hold := placement.Decision{Node: n.index, NodeName: n.name, Grant: partition.Grant{Shares: []partition.Share{{GPU: g, Milli: partition.MilliPerGPU, MemMiB: n.inv.Spec.GPUMemMiB}}}}
			_ = cluster.Reserve(hold)
		}
	}
	cluster.SetNodeFilter(s.nodeFits)
	// The inter-pod index starts empty and learns every pod booked from
	// here on (adopted, promised, placed); keys known before are wanted
	// again.
	s.affinity = interpod.NewIndex(view{s})
	for key, f := range s.fits {
		if f.pods != nil {
			s.affinity.Want(key, f.pods, f.node)
		}
	}
	eng.OnPlacement(s.placementChanged)
	eng.OnTrial(s.memberTrial)
	s.trials = map[string][]string{}
	s.podState = map[string]*podEntry{}
	s.floors, s.reclaims = map[string]int32{}, map[string]*podEntry{}
	pods, _ := s.pods.List(everything)
	sortPods(pods)
	var borrowers []*corev1.Pod
	nominees, victimOf := s.nominations(pods, old)
	victimPods := map[string][]*corev1.Pod{} // by nominee
	for _, p := range pods {
		if p.Spec.NodeName == "" {
			continue
		}
		if o := old[translate.Key(p)]; o != nil && o.uid == p.UID && o.phase == evicting && o.preemptor != "" {
			s.podState[o.key] = o // its preemptor (or its owner) holds its capacity
			if o.reclaimFor != "" {
				s.reclaims[o.key] = o // asked again at once: the eviction may have been lost
			}
			continue
		}
		if _, ok := p.Annotations[annv1.BorrowedKey]; ok && s.ours(p) {
			borrowers = append(borrowers, p) // after the owners and their floors
			continue
		}
		if by, ok := victimOf[translate.Key(p)]; ok {
			victimPods[by] = append(victimPods[by], p)
			continue
		}
		s.adoptBound(p)
	}
	s.setFloors(s.lenders())
	s.balloonsDirty = true // reclaims are decided in the loop, with the borrowers booked
	for _, p := range borrowers {
		s.adoptBorrower(p)
	}
	for _, p := range pods {
		if p.Spec.NodeName != "" || !s.ours(p) {
			continue
		}
		key := translate.Key(p)
		o := old[key]
		switch {
		case o != nil && o.uid == p.UID && (o.phase == assumed || o.phase == nominated) && s.keepPromise(o):
		case o != nil && o.uid == p.UID && o.phase == held:
			s.podState[o.key] = o
		case nominees[key] && s.renominate(p, victimPods[key]):
		default:
			for _, v := range victimPods[key] { // they hold their capacity until gone
				s.adoptBound(v)
			}
			s.admitPending(p)
		}
	}
	s.metrics.EngineRebuilds.Inc()
	s.log.Info("engine rebuilt from the API server", "why", why, "nodes", len(specs), "pods", len(s.podState), "pending", s.eng.Pending(), "running", s.eng.RunningCount())
	return nil
}

// newEngine builds the engine and quota admission from the current queue
// configuration.
func (s *Scheduler) newEngine(sched *placement.Scheduler) (*engine.Engine, *engine.QuotaAdmission, error) {
	ecfg, err := engine.ConfigFrom(s.engineCfg)
	if err != nil {
		return nil, nil, err
	}
	ecfg.PreemptionSearches = s.cfg.PreemptionSearches
	ecfg.GangTimeout = s.engineCfg.Gang.Timeout.Duration
	var admit *engine.QuotaAdmission
	var adm engine.Admission
	if len(s.engineCfg.Queues) > 0 {
		books, err := quota.New(s.engineCfg)
		if err != nil {
			return nil, nil, err
		}
		admit = &engine.QuotaAdmission{Books: books, Cluster: sched.Cluster()}
		adm = admit
	}
	eng, err := engine.New(ecfg, sched, adm)
	return eng, admit, err
}

// keepPromise re-reserves a placement made before the rebuild whose bind
// or victims are still outstanding; false when it no longer fits (then
// the pod is queued again).
func (s *Scheduler) keepPromise(o *podEntry) bool {
	n := s.nodeState[o.node]
	if n == nil || n.index < 0 || o.pod == nil {
		return false
	}
	d := placement.Decision{Node: n.index, NodeName: n.name, Grant: partition.Grant{CPU: o.pod.Request.CPUMilli, MemMiB: o.pod.Request.MemMiB}}
	for _, u := range o.uuids {
		g := n.inv.GPUIndex(u)
		if g < 0 {
			return false
		}
		d.Grant.Shares = append(d.Grant.Shares, partition.Share{GPU: g, Milli: o.pod.Request.GPUMilli, MemMiB: o.pod.Request.GPUMemMiB})
	}
	if s.eng.Adopt(o.pod, d, o.created) != nil {
		return false
	}
	s.podState[o.key] = o
	return true
}

// sortPods orders pods by creation, then name: the queue's FIFO order and
// a deterministic adoption order.
func sortPods(pods []*corev1.Pod) {
	less := func(a, b *corev1.Pod) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		if a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name {
			return -1
		}
		return 1
	}
	slices.SortFunc(pods, less)
}

// nominations finds the preemptions a previous leader left in flight,
// from the API server alone: a pending pod of ours that this loop has no
// record of, with status.nominatedNodeName, and the pods terminating on
// that node (its victims, or pods leaving anyway). The first such pod per
// node, in queue order, takes them all; victimOf maps each to it.
func (s *Scheduler) nominations(pods []*corev1.Pod, old map[string]*podEntry) (map[string]bool, map[string]string) {
	nominee := map[string]string{} // node -> pod key
	for _, p := range pods {
		node := p.Status.NominatedNodeName
		if p.Spec.NodeName != "" || !s.ours(p) || node == "" || old[translate.Key(p)] != nil {
			continue
		}
		if _, taken := nominee[node]; !taken {
			nominee[node] = translate.Key(p)
		}
	}
	nominees, victimOf := map[string]bool{}, map[string]string{}
	for _, p := range pods {
		if by, ok := nominee[p.Spec.NodeName]; ok && p.Spec.NodeName != "" && p.DeletionTimestamp != nil {
			victimOf[translate.Key(p)] = by
			nominees[by] = true
		}
	}
	return nominees, victimOf
}

// renominate holds, for a preemptor found by nominations, the capacity
// its terminating victims free on its nominated node, as the leader
// before did: the victims are not booked, the preemptor is placed there in
// the engine and bound when the last victim is gone. False when it no
// longer fits there (the caller books the victims and queues the pod).
func (s *Scheduler) renominate(p *corev1.Pod, victims []*corev1.Pod) bool {
	n := s.nodeState[p.Status.NominatedNodeName]
	if n == nil || n.index < 0 || len(victims) == 0 {
		return false
	}
	constraint, err := s.constrain(p)
	if err != nil {
		return false
	}
	ep, sh, err := translate.EnginePod(p, s.engineCfg, s.memUnit())
	if err != nil {
		return false
	}
	ep.Request.NodeConstraint = constraint
	d, ok := s.sched.ScheduleOn(n.index, &ep.Request)
	if !ok || s.eng.Adopt(ep, d, p.CreationTimestamp.Time) != nil {
		return false
	}
	key := translate.Key(p)
	e := &podEntry{key: key, uid: p.UID, phase: nominated, pod: ep, shape: sh, node: n.name, victims: map[string]bool{}, created: p.CreationTimestamp.Time}
	for _, g := range d.Grant.Shares {
		e.uuids = append(e.uuids, n.inv.UUIDs[g.GPU])
	}
	for _, v := range victims {
		vk := translate.Key(v)
		e.victims[vk] = true
		s.podState[vk] = &podEntry{key: vk, uid: v.UID, phase: evicting, preemptor: key, created: v.CreationTimestamp.Time}
	}
	s.podState[key] = e
	s.log.Info("preemption in flight taken over", "pod", key, "node", n.name, "victims", len(victims))
	return true
}
