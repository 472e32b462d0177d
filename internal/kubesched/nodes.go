package kubesched

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
)

// nodeEntry is the loop's record of one node carrying an inventory.
type nodeEntry struct {
	name string
	obj  *corev1.Node
	inv  *translate.Inventory
	// err is why the inventory is unusable (then index is -1).
	err   error
	index int
	// fingerprint is what the engine's node was built from: a change
	// rebuilds the engine.
	fingerprint string
	conflicts   int
	// balloons is the node's parsed tessera.io/node-balloons (nil: none usable),
	// balloonsRaw its value.
	balloons    *annv1.NodeBalloons
	balloonsRaw string
}

func fingerprint(n *corev1.Node) string {
	return n.Annotations[annv1.NodeGPUsKey] + "|" + n.Status.Allocatable.Cpu().String() + "|" + n.Status.Allocatable.Memory().String()
}

// syncNode follows a node: a change of labels, taints or cordon is
// applied in place (nodefit); a node that
// joins, leaves or changes its inventory or allocatable rebuilds the
// engine (rare, and the rebuild is the path a restart takes, tested).
func (s *Scheduler) syncNode(name string) {
	n, err := s.nodes.Get(name)
	e := s.nodeState[name]
	switch {
	case err != nil || !translate.HasInventory(n):
		if e != nil {
			s.rebuildWanted = true
		}
		// Pods on it may count for inter-pod rules in its domain.
		s.refilterPods(s.affinity.NodeChanged(name))
	case e == nil || e.fingerprint != fingerprint(n):
		s.rebuildWanted = true
	default:
		old := e.obj
		e.obj = n
		if raw := n.Annotations[annv1.NodeBalloonsKey]; raw != e.balloonsRaw {
			s.readBalloons(n, e, e.balloonsRaw)
			s.balloonsDirty = true
		}
		if e.index >= 0 && constraintsChanged(old, n) {
			// Labels, taints or cordon: which pods the node admits
			// changed, not its capacity.
			s.cluster.RefilterNode(e.index)
			s.eng.ClusterChanged()
		}
		if constraintsChanged(old, n) {
			// Its topology domains may have moved (labels), or which spread
			// domains count for pods honouring taints (nodeTaintsPolicy).
			s.topologyChanged()
		}
	}
}

// readNodes reads every node with an inventory, in name order (the
// engine's tie-break order), reporting unusable inventories once per
// distinct error.
func (s *Scheduler) readNodes(previous map[string]*nodeEntry) []*nodeEntry {
	all, _ := s.nodes.List(everything)
	slices.SortFunc(all, func(a, b *corev1.Node) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	var out []*nodeEntry
	invalid := 0
	for _, n := range all {
		if !translate.HasInventory(n) {
			continue
		}
		e := &nodeEntry{name: n.Name, obj: n, index: -1, fingerprint: fingerprint(n)}
		e.inv, e.err = translate.NodeInventory(n)
		prevBalloons := ""
		if old := previous[n.Name]; old != nil {
			prevBalloons = old.balloonsRaw
		}
		s.readBalloons(n, e, prevBalloons)
		if e.err != nil {
			invalid++
			if old := previous[n.Name]; old == nil || old.err == nil || old.err.Error() != e.err.Error() {
				s.log.Warn("node inventory unusable; nothing is placed there", "node", n.Name, "err", e.err)
				s.recorder.Event(n, corev1.EventTypeWarning, "TesseraInventoryInvalid", e.err.Error()+"; tessera places nothing on this node until the inventory is fixed")
			}
		}
		out = append(out, e)
	}
	s.metrics.InvalidNodes.Set(float64(invalid))
	return out
}
