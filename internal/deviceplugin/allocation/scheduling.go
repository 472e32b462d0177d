package allocation

import (
	"fmt"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/priority"
	"github.com/tessera-gpu/tessera/internal/region"
)

// PolicyAnnotation is the pod annotation choosing the compute policy of its
// containers' gpu-core shares: "guaranteed" (default) or "hard".
const PolicyAnnotation = "tessera.io/compute-policy"

// Scheduling is what a gpu-core allocation's limits file says besides the
// shares: how the node agent's arbiter treats the container.
type Scheduling struct {
	Policy   uint64 // region.PolicyGuaranteed or region.PolicyHard
	Priority int32  // 0 (highest) .. 3
}

// Unattributed is the scheduling of an allocation whose pod is not known (yet):
// guaranteed, and the least urgent class, so that a guess never throttles
// anyone; the reconciliation corrects it once PodResources names the pod.
var Unattributed = Scheduling{Policy: region.PolicyGuaranteed, Priority: int32(priority.Lowest)}

// SchedulingOf resolves a pod's compute policy and priority class (table:
// tessera.io/priority and PriorityClass values). A bad annotation is an error
// naming it; the caller falls back to Unattributed and says so.
func SchedulingOf(p *corev1.Pod, table *priority.Table) (Scheduling, error) {
	s := Unattributed
	pol, err := region.ParsePolicy(p.Annotations[PolicyAnnotation])
	if err != nil {
		return s, fmt.Errorf("annotation %s: %w", PolicyAnnotation, err)
	}
	value := int32(0)
	if p.Spec.Priority != nil {
		value = *p.Spec.Priority
	}
	ann, annotated := p.Annotations[priority.AnnotationKey]
	class, err := table.Resolve(ann, annotated, value)
	if err != nil {
		return s, err
	}
	return Scheduling{Policy: pol, Priority: int32(class)}, nil
}

func (s Scheduling) String() string {
	return region.PolicyName(s.Policy) + "/P" + strconv.Itoa(int(s.Priority))
}

// SetScheduling corrects a running gpu-core allocation's policy and priority
// in place (its hooks and the arbiter keep the file mapped). A missing file
// is left to Restore.
func (b *Builder) SetScheduling(ids []string, s Scheduling) error {
	l, err := region.OpenLimits(filepath.Join(b.ContainerDir(resource.KindCore, ids), "core-limits"))
	if err != nil {
		return err
	}
	defer l.Close()
	for _, d := range l.Devices() {
		if err := l.SetScheduling(d.UUID, s.Policy, s.Priority); err != nil {
			return err
		}
	}
	return nil
}
