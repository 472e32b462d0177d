// Package ledger remembers which container holds which device IDs.
//
// Kubelet never tells a device plugin which pod an RPC serves. It does call
// GetPreferredAllocation and then Allocate for one resource of one container
// back to back, so the ledger records the container the plugin chose in
// GetPreferredAllocation (a proposal) and attributes the next Allocate of
// that resource to it. PodResources read-backs (Reset) replace the ledger
// with kubelet's truth, which corrects any wrong attribution.
package ledger

import (
	"sort"
	"sync"
	"time"
)

// ContainerRef names one container of one pod.
type ContainerRef struct {
	PodUID    string
	Namespace string
	Pod       string
	Container string
}

// proposalTTL bounds how long a GetPreferredAllocation answer waits for its
// Allocate; kubelet sends the two within milliseconds unless it failed.
const proposalTTL = time.Minute

type recordKey struct {
	ref      ContainerRef
	resource string
}

type proposal struct {
	ref  ContainerRef
	size int
	at   time.Time
}

// Ledger is safe for concurrent use.
type Ledger struct {
	mu        sync.Mutex
	realized  map[ContainerRef]map[string][]string // resource → device IDs
	recorded  map[recordKey]time.Time              // when Record last stored a container's resource
	proposals map[string]proposal                  // resource → last answer
	now       func() time.Time
}

// New returns an empty ledger.
func New() *Ledger {
	return &Ledger{realized: map[ContainerRef]map[string][]string{}, recorded: map[recordKey]time.Time{},
		proposals: map[string]proposal{}, now: time.Now}
}

// Propose records that the plugin chose size devices of resource for ref.
func (l *Ledger) Propose(resource string, ref ContainerRef, size int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.proposals[resource] = proposal{ref: ref, size: size, at: l.now()}
}

// TakeProposal returns and clears the pending proposal for resource if it
// is fresh and of the same size as the allocation.
func (l *Ledger) TakeProposal(resource string, size int) (ContainerRef, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.proposals[resource]
	delete(l.proposals, resource)
	if !ok || p.size != size || l.now().Sub(p.at) > proposalTTL {
		return ContainerRef{}, false
	}
	return p.ref, true
}

// Record stores ids as ref's allocation of resource.
func (l *Ledger) Record(ref ContainerRef, resource string, ids []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.realized[ref] == nil {
		l.realized[ref] = map[string][]string{}
	}
	l.realized[ref][resource] = sortedCopy(ids)
	l.recorded[recordKey{ref, resource}] = l.now()
}

// Has reports whether ref already holds devices of resource.
func (l *Ledger) Has(ref ContainerRef, resource string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.realized[ref][resource]
	return ok
}

// Get returns ref's device IDs per resource (a copy).
func (l *Ledger) Get(ref ContainerRef) map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]string{}
	for r, ids := range l.realized[ref] {
		out[r] = append([]string(nil), ids...)
	}
	return out
}

// Reset replaces everything known with kubelet's truth as read at asOf.
// Records made after asOf are kept unless kubelet lists that container's
// resource: kubelet's answer predates them (it may list a container's
// gpu-mem while its gpu-core is being allocated).
func (l *Ledger) Reset(truth map[ContainerRef]map[string][]string, asOf time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old, oldAt := l.realized, l.recorded
	l.realized = map[ContainerRef]map[string][]string{}
	l.recorded = map[recordKey]time.Time{}
	for ref, byRes := range truth {
		l.realized[ref] = map[string][]string{}
		for r, ids := range byRes {
			l.realized[ref][r] = sortedCopy(ids)
		}
	}
	for k, at := range oldAt {
		if _, listed := truth[k.ref][k.resource]; listed || !at.After(asOf) {
			continue
		}
		if l.realized[k.ref] == nil {
			l.realized[k.ref] = map[string][]string{}
		}
		l.realized[k.ref][k.resource], l.recorded[k] = old[k.ref][k.resource], at
	}
}

// Snapshot returns a copy of all recorded allocations.
func (l *Ledger) Snapshot() map[ContainerRef]map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[ContainerRef]map[string][]string{}
	for ref, byRes := range l.realized {
		out[ref] = map[string][]string{}
		for r, ids := range byRes {
			out[ref][r] = append([]string(nil), ids...)
		}
	}
	return out
}

func sortedCopy(ids []string) []string {
	out := append([]string(nil), ids...)
	sort.Strings(out)
	return out
}
