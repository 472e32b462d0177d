package engine

import (
	"cmp"
	"slices"
	"time"

	"github.com/tessera-gpu/tessera/internal/preempt"
	"github.com/tessera-gpu/tessera/internal/priority"
	"github.com/tessera-gpu/tessera/internal/queue"
)

// Fair sharing (docs/scheduler.md): what is left over after guarantees goes
// to borrowing queues in ascending dominant share, and a queue that takes
// its guarantee back reclaims from the borrower with the highest share
// first. Both read the books through FairSharing.

// fairSharing is the admission's fair-sharing view, nil without one.
func (e *Engine) fairSharing() FairSharing {
	f, _ := e.admit.(FairSharing)
	return f
}

// borrowers holds the pods of one effective class, in one cycle, that
// would start on borrowed capacity: they are tried after the pods of that
// class that would not (their queues' guarantees are served first), before
// any less urgent pod, one at a time from the queue whose share is lowest
// at that moment.
type borrowers struct {
	byQueue map[string][]*queue.Entry[*Pod] // each in pop order
	queues  []string                        // with entries, first deferral first
	popped  map[*queue.Entry[*Pod]]int      // pop order, across queues
	class   priority.Class                  // of the entries
}

func (b *borrowers) waiting() bool { return len(b.queues) > 0 }

func (b *borrowers) add(q string, en *queue.Entry[*Pod], c priority.Class) {
	if b.byQueue == nil {
		b.byQueue, b.popped = map[string][]*queue.Entry[*Pod]{}, map[*queue.Entry[*Pod]]int{}
	}
	if !b.waiting() {
		b.class = c
	}
	if len(b.byQueue[q]) == 0 {
		b.queues = append(b.queues, q)
	}
	b.byQueue[q] = append(b.byQueue[q], en)
	b.popped[en] = len(b.popped)
}

// next takes the entry to try now: of the queues' first entries, the most
// urgent effective class (they are of one class unless ageing moved one
// during the pass), then the lowest share of its queue, then pop order.
// The share is read again at every call: each borrower placed raises its
// queue's.
func (b *borrowers) next(e *Engine, f FairSharing, now time.Time) *queue.Entry[*Pod] {
	best, bestQ := -1, ""
	var bestClass priority.Class
	var bestShare float64
	for i, q := range b.queues {
		head := b.byQueue[q][0]
		c, s := e.effective(head.Pod, now), f.Share(q)
		better := best < 0 || c.Above(bestClass) ||
			(c == bestClass && (s < bestShare || (s == bestShare && b.popped[head] < b.popped[b.byQueue[bestQ][0]])))
		if better {
			best, bestQ, bestClass, bestShare = i, q, c, s
		}
	}
	if best < 0 {
		return nil
	}
	en := b.byQueue[bestQ][0]
	if b.byQueue[bestQ] = b.byQueue[bestQ][1:]; len(b.byQueue[bestQ]) == 0 {
		b.queues = slices.Delete(b.queues, best, best+1)
	}
	return en
}

// byShare lists the queues of the borrowing candidates (other queues of
// p's cohort) from the highest share down (ties: configuration order).
func byShare(f FairSharing, p *Pod, cohort string, cands []preempt.Running) []string {
	var qs []string
	for _, c := range cands {
		if c.Borrowing && c.Cohort == cohort && c.Queue != p.Team && !slices.Contains(qs, c.Queue) {
			qs = append(qs, c.Queue)
		}
	}
	slices.SortFunc(qs, func(a, b string) int {
		if c := cmp.Compare(f.Share(b), f.Share(a)); c != 0 {
			return c
		}
		return cmp.Compare(f.Rank(a), f.Rank(b))
	})
	return qs
}

// reclaimByShare is the reclaim order: victims from the borrowing queue
// with the highest share only, then from the two highest, and so on; the
// first of these searches that finds a plan wins (within it the cheapest
// victims, internal/preempt's order). Nothing when no borrower makes room:
// the search over every candidate follows.
func (e *Engine) reclaimByShare(p *Pod, pending preempt.Pending, cands []preempt.Running, now time.Time) (*preempt.Plan, bool) {
	f := e.fairSharing()
	if f == nil {
		return nil, false
	}
	order := byShare(f, p, pending.Cohort, cands)
	var subset []preempt.Running
	for k := range order {
		subset = subset[:0]
		for _, c := range cands {
			if slices.Contains(order[:k+1], c.Queue) {
				subset = append(subset, c)
			}
		}
		if pl, err := e.preemptor.Find(pending, subset, now); err == nil && e.loansHold(pl) {
			return pl, true
		}
	}
	return nil, false
}
