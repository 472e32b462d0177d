package kubesched

import (
	"github.com/tessera-gpu/tessera/internal/engine"
	"github.com/tessera-gpu/tessera/internal/placement"
)

// observe sets the gauges from the engine: pending pods per class and
// queue, GPU memory and compute allocated (bound) and promised (assumed or
// nominated) per node and queue, and the cluster's fragmentation.
func (s *Scheduler) observe() {
	m := s.metrics
	m.Pending.Reset()
	s.eng.EachPending(func(p *engine.Pod) {
		m.Pending.WithLabelValues(p.Class.String(), s.queueOf(p)).Inc()
	})
	for _, g := range []interface{ Reset() }{m.NodeAllocatedMemMiB, m.NodeAllocatedMilli, m.NodePromisedMemMiB, m.NodePromisedMilli,
		m.QueueAllocatedMemMiB, m.QueueAllocatedMilli, m.QueuePromisedMemMiB, m.QueuePromisedMilli} {
		g.Reset()
	}
	for _, n := range s.nodeState {
		if n.index >= 0 {
			m.NodeAllocatedMemMiB.WithLabelValues(n.name).Set(0)
			m.NodeAllocatedMilli.WithLabelValues(n.name).Set(0)
		}
	}
	for key, e := range s.podState {
		r, ok := s.eng.Running(key)
		if !ok {
			continue
		}
		var mem, milli float64
		for _, sh := range r.Decision.Grant.Shares {
			mem += float64(sh.MemMiB)
			milli += float64(sh.Milli)
		}
		node, queue := m.NodeAllocatedMemMiB, m.QueueAllocatedMemMiB
		nodeC, queueC := m.NodeAllocatedMilli, m.QueueAllocatedMilli
		if e.phase == assumed || e.phase == nominated {
			node, queue, nodeC, queueC = m.NodePromisedMemMiB, m.QueuePromisedMemMiB, m.NodePromisedMilli, m.QueuePromisedMilli
		}
		q := s.queueOf(r.Pod)
		node.WithLabelValues(r.Decision.NodeName).Add(mem)
		nodeC.WithLabelValues(r.Decision.NodeName).Add(milli)
		queue.WithLabelValues(q).Add(mem)
		queueC.WithLabelValues(q).Add(milli)
	}
	if s.frag == nil {
		s.frag = placement.NewFragmentation(placement.NewWorkload(s.cluster, fragmentationMix, 1))
	}
	m.Fragmentation.Set(s.frag.Cluster(s.cluster))
}

// fragmentationMix is the workload fragmentation is measured against:
// whole, half and quarter GPUs alike (the trace-driven workload of the
// simulator is not known to a live cluster).
var fragmentationMix = []placement.Request{{NumGPU: 1, GPUMilli: 1000}, {NumGPU: 1, GPUMilli: 500}, {NumGPU: 1, GPUMilli: 250}}

func (s *Scheduler) queueOf(p *engine.Pod) string {
	if s.admit != nil {
		return s.admit.Books.QueueOf(p.Team)
	}
	if p.Team == "" {
		return "none"
	}
	return p.Team
}
