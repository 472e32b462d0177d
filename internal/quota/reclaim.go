package quota

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrNothingToReclaim is returned (wrapped) when no set of borrowed pods
// would make room.
var ErrNothingToReclaim = errors.New("nothing to reclaim")

// Reclaim names the running pods of other queues that must give way before
// a pod of queueName, of class rank class (0 = P0), using u can start. It
// changes nothing: the caller evicts the victims, Removes them, and Decide
// then admits the pod.
//
// Two cases:
//   - guarantee: the pod is within its queue's nominal quota (NeedsReclaim).
//     Any pod of a queue using more than its nominal quota of a resource the
//     cohort is short of may be taken, whatever its class: a guarantee beats
//     priority across queues. This always succeeds, because what others
//     borrow is at least what the queue is missing.
//   - fair share: the pod would borrow (Held for lack of lendable capacity).
//     A victim must be of the pod's class or a lower one, and its queue's
//     dominant share after losing it must stay at least the requester's
//     share after admission (Kueue's LessThanOrEqualToFinalShare), so
//     reclaiming never makes the sharing less fair.
//
// Order: repeatedly, the eligible queue with the highest dominant share
// (ties: configuration order) gives its lowest-class pod, youngest first
// (ties: ID), until the cohort has room on every resource.
func (b *Books) Reclaim(queueName string, class int, u Usage) ([]Pod, error) {
	q := b.resolve(queueName)
	if q == nil {
		return nil, fmt.Errorf("quota: queue %q is not quota-managed; nothing to reclaim for it", queueName)
	}
	c := q.cohort
	sim := map[*queue][]int64{}
	for _, o := range c.queues {
		sim[o] = slices.Clone(o.usage)
	}
	poolUse := slices.Clone(c.poolUse)
	guarantee := true
	for _, a := range b.amounts(u) {
		r := a.res
		if !c.active[r] {
			continue
		}
		after := q.usage[r] + a.v
		if after > q.ceiling[r] {
			return nil, fmt.Errorf("quota: queue %s: %s would exceed nominal + borrowing limit (%s): %w",
				q.name, b.resName(r), units(q.ceiling[r]), ErrNothingToReclaim)
		}
		if after > q.nominal[r] {
			guarantee = false
		}
		poolUse[r] += contribution(after, q.guard[r]) - contribution(q.usage[r], q.guard[r])
		sim[q][r] = after
	}
	shortOf := func(r int) bool { return c.active[r] && poolUse[r] > c.pool[r] }
	short := func() bool { return anyShort(len(poolUse), shortOf) }
	reqShare := share(q, sim[q])

	cursor := map[*queue]int{}
	sorted := map[*queue][]*entry{}
	eligible := func(o *queue, e *entry) bool {
		frees := false
		for _, a := range e.delta {
			if shortOf(a.res) && sim[o][a.res] > o.nominal[a.res] {
				frees = true
				break
			}
		}
		if !frees || guarantee {
			return frees
		}
		if e.pod.Class < class {
			return false
		}
		after := slices.Clone(sim[o])
		for _, a := range e.delta {
			after[a.res] -= a.v
		}
		return share(o, after) >= reqShare
	}
	// next is queue o's next eligible pod; skipped pods never become
	// eligible again (shortages and shares only shrink), so a cursor suffices.
	next := func(o *queue) *entry {
		if sorted[o] == nil {
			sorted[o] = reclaimOrder(o)
		}
		for ; cursor[o] < len(sorted[o]); cursor[o]++ {
			if e := sorted[o][cursor[o]]; eligible(o, e) {
				return e
			}
		}
		return nil
	}
	var victims []Pod
	for short() {
		var from *queue
		var pick *entry
		best := -1.0
		for _, o := range c.queues {
			if o == q {
				continue
			}
			s := share(o, sim[o])
			if s <= best {
				continue
			}
			if e := next(o); e != nil {
				from, pick, best = o, e, s
			}
		}
		if pick == nil {
			return nil, fmt.Errorf("quota: queue %s: %s after taking %d pods: %w", q.name, b.shortages(c, poolUse), len(victims), ErrNothingToReclaim)
		}
		cursor[from]++
		victims = append(victims, pick.pod)
		for _, a := range pick.delta {
			r := a.res
			poolUse[r] += contribution(sim[from][r]-a.v, from.guard[r]) - contribution(sim[from][r], from.guard[r])
			sim[from][r] -= a.v
		}
	}
	return victims, nil
}

func anyShort(n int, shortOf func(int) bool) bool {
	for r := range n {
		if shortOf(r) {
			return true
		}
	}
	return false
}

// reclaimOrder is a queue's pods, lowest class first, youngest first.
func reclaimOrder(o *queue) []*entry {
	es := make([]*entry, 0, len(o.pods))
	for _, e := range o.pods {
		es = append(es, e)
	}
	slices.SortFunc(es, func(x, y *entry) int {
		switch {
		case x.pod.Class != y.pod.Class:
			return y.pod.Class - x.pod.Class
		case !x.pod.Start.Equal(y.pod.Start):
			return y.pod.Start.Compare(x.pod.Start)
		}
		return strings.Compare(x.pod.ID, y.pod.ID)
	})
	return es
}

func (b *Books) shortages(c *cohort, poolUse []int64) string {
	var parts []string
	for r := range poolUse {
		if c.active[r] && poolUse[r] > c.pool[r] {
			parts = append(parts, fmt.Sprintf("%s short by %s", b.resName(r), units(poolUse[r]-c.pool[r])))
		}
	}
	return strings.Join(parts, ", ")
}
