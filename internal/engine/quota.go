package engine

import (
	"fmt"
	"slices"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/quota"
)

// QuotaAdmission is the admission stage over internal/quota's books: a pod
// starts when its queue's guarantee covers it or the cohort lends it idle
// capacity; a pod within its guarantee whose capacity others borrowed is
// admitted too, and placement's failure then lets preemption reclaim the
// borrowed pods (internal/preempt, WithinGuarantee/Borrowing).
type QuotaAdmission struct {
	Books   *quota.Books
	Cluster *placement.Cluster
}

// usageBefore is what a pending pod would be charged: on the first model
// it accepts (any model: the default weight).
func usageBefore(p *Pod) quota.Usage {
	model := ""
	if len(p.Request.Models) > 0 {
		model = p.Request.Models[0]
	}
	return quota.UsageOf(&p.Request, model, 0)
}

// Admit implements Admission.
func (a *QuotaAdmission) Admit(p *Pod, _ time.Time) error {
	d := a.Books.Decide(p.Team, usageBefore(p))
	if d.Admit() || d.Verdict == quota.NeedsReclaim {
		return nil
	}
	return fmt.Errorf("pod %s: %s", p.Key, d.Reason)
}

// AdmitAll admits pods as one (a gang's members): each is decided with
// the ones before it booked, so members that fit one by one but not
// together are refused. The trial bookings are removed before it returns.
func (a *QuotaAdmission) AdmitAll(pods []*Pod, now time.Time) error {
	var trial []string
	defer func() {
		for _, id := range trial {
			_ = a.Books.Remove(id)
		}
	}()
	for _, p := range pods {
		if err := a.Admit(p, now); err != nil {
			return err
		}
		id := "\x00admit-trial/" + p.Key // no pod key starts with NUL
		if err := a.Books.Add(quota.Pod{ID: id, Queue: p.Team, Class: int(p.Class), Start: now, Usage: usageBefore(p)}); err != nil {
			return fmt.Errorf("pod %s: %w", p.Key, err)
		}
		trial = append(trial, id)
	}
	return nil
}

// Charge implements Admission: the books take the model the pod landed on.
func (a *QuotaAdmission) Charge(p *Pod, r *Running) {
	n := &a.Cluster.Nodes[r.Decision.Node]
	u := quota.UsageOf(&p.Request, n.Model, gpuMemOf(n, r.Decision))
	if err := a.Books.Add(quota.Pod{ID: p.Key, Queue: p.Team, Class: int(p.Class), Start: r.Started, Usage: u}); err != nil {
		panic("engine: quota books refused a placed pod: " + err.Error())
	}
}

// Uncharge implements Admission.
func (a *QuotaAdmission) Uncharge(p *Pod, _ *Running) {
	if err := a.Books.Remove(p.Key); err != nil {
		panic("engine: quota books lost a running pod: " + err.Error())
	}
}

// Borrowing implements Admission.
func (a *QuotaAdmission) Borrowing(v *Pod) bool { return a.Books.Borrowing(v.Key) }

// WithinGuarantee implements Admission.
func (a *QuotaAdmission) WithinGuarantee(p *Pod) bool {
	return a.Books.WithinGuarantee(p.Team, usageBefore(p))
}

// Borrows implements FairSharing: a managed pod beyond its queue's
// guarantee (held ones too: they fail admission when tried, as before).
func (a *QuotaAdmission) Borrows(p *Pod) bool {
	return a.Books.QueueOf(p.Team) != quota.Unmanaged && !a.Books.WithinGuarantee(p.Team, usageBefore(p))
}

// Queue implements FairSharing.
func (a *QuotaAdmission) Queue(p *Pod) string { return a.Books.QueueOf(p.Team) }

// Share implements FairSharing.
func (a *QuotaAdmission) Share(queue string) float64 { return a.Books.Share(queue) }

// Rank implements FairSharing.
func (a *QuotaAdmission) Rank(queue string) int { return slices.Index(a.Books.Queues(), queue) }

// Cohort implements Admission.
func (a *QuotaAdmission) Cohort(p *Pod) string { return a.Books.CohortOf(p.Team) }

// gpuMemOf is the memory of the GPU a MIG pod's devices are on (one model
// per node: every GPU's); 0 for a pod without MIG devices.
func gpuMemOf(n *partition.Node, d placement.Decision) int32 {
	if len(d.Grant.MIG) == 0 {
		return 0
	}
	return n.GPUs[n.MIG[d.Grant.MIG[0]].GPU].MemMiB
}
