package preferred

import (
	"fmt"
	"strings"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
)

// chooseMIG answers a mig-<profile> request of a known container: the MIG
// devices the cluster scheduler assigned it when the assignment can be
// honoured, otherwise (logged and reported on the pod, as for shares) the
// node's local policy.
func (c *Chooser) chooseMIG(res string, cand *Candidate, pool *pool, must []resource.ID, size int) []string {
	log := c.Log.With("pod", cand.Ref.Namespace+"/"+cand.Ref.Pod, "container", cand.Ref.Container, "resource", res, "size", size)
	ids, used, err := c.fromMIGAssignment(res, cand, pool, size)
	switch {
	case used && err == nil:
		log.Debug("preferred MIG allocation from assignment", "ids", ids)
		return ids
	case used:
		log.Warn("MIG assignment unusable, placing locally", "err", err)
		c.warn(cand.Pod, "TesseraAssignmentUnusable", fmt.Sprintf("container %s, %s: %v; placed by the node's local policy", cand.Ref.Container, res, err))
	}
	return pickLocal(resource.KindMIG, pool, must, size, c.Policy, c.Topology)
}

// fromMIGAssignment returns used=false when the pod has no assignment or
// the container's entry names no MIG devices at all (an assignment written
// before containers[].mig existed), and an error when the devices it
// names for this profile cannot be given: too few or too many, a device
// this plugin does not advertise (another node's, a wrong parent GPU, a
// layout changed since), or one kubelet does not offer as free.
func (c *Chooser) fromMIGAssignment(res string, cand *Candidate, pool *pool, size int) ([]string, bool, error) {
	ca, ok, err := assignedContainer(cand)
	if !ok || err != nil {
		return nil, ok, err
	}
	if len(ca.MIG) == 0 {
		return nil, false, nil
	}
	profile := strings.TrimPrefix(res, resource.MIGPrefix)
	var ids []string
	for _, m := range ca.MIG {
		if m.Profile != profile {
			continue // another of the container's MIG resources
		}
		id := resource.ID{GPU: m.Parent, Kind: resource.KindMIG, MIG: m.UUID}
		if len(c.Manager.Known(res, []string{id.String()})) == 0 {
			return nil, true, fmt.Errorf("assignment names MIG device %s (%s on GPU %s), which this node does not advertise", m.UUID, m.Profile, m.Parent)
		}
		if !pool.has(id) {
			return nil, true, fmt.Errorf("assigned MIG device %s is not free", m.UUID)
		}
		ids = append(ids, id.String())
	}
	if len(ids) != size {
		return nil, true, fmt.Errorf("assignment names %d MIG devices of %s but the container requests %d", len(ids), profile, size)
	}
	return ids, true, nil
}

// has reports whether the pool offers the ID.
func (p *pool) has(id resource.ID) bool {
	for _, f := range p.free[id.GPU] {
		if f == id {
			return true
		}
	}
	return false
}
