// Package identity names the owner of each state directory: the namespace, pod
// and container kubelet's PodResources API says holds the device IDs the
// directory was made for. The key of a directory is a hash of those IDs
// (allocation.Key), so the mapping is recomputed from kubelet's truth, never
// guessed from paths. A directory no listed container holds has no owner: its
// series are not exported (they vanish with the container).
package identity

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
)

// Owner is the container that holds a state directory.
type Owner struct {
	Namespace string
	Pod       string
	Container string
}

func (o Owner) String() string { return o.Namespace + "/" + o.Pod + "/" + o.Container }

// Listing is one container kubelet lists, with every device ID it holds,
// grouped per resource (kubelet lists one entry per ID: the grouping must
// already have folded them).
type Listing struct {
	Owner
	Devices map[string][]string // resource name → device IDs
}

// Source lists the node's containers.
type Source func(ctx context.Context) ([]Listing, error)

// Resolver keeps the latest mapping from state directory key to owner.
type Resolver struct {
	Source Source

	mu     sync.RWMutex
	owners map[string]Owner
	at     time.Time
	err    error
}

// Refresh reads the source once. On error the previous mapping is kept: a
// kubelet restart must not make every container's series vanish.
func (r *Resolver) Refresh(ctx context.Context) error {
	list, err := r.Source(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
	if err != nil {
		return fmt.Errorf("PodResources: %w", err)
	}
	r.owners = Keys(list)
	r.at = time.Now()
	return nil
}

// Keys maps the state directory keys of the listed containers' tessera
// allocations (memory and compute) to their owners.
func Keys(list []Listing) map[string]Owner {
	owners := map[string]Owner{}
	for _, l := range list {
		for res, ids := range l.Devices {
			kind, ok := resource.KindOf(res)
			if !ok || (kind != resource.KindMem && kind != resource.KindCore) || len(ids) == 0 {
				continue
			}
			owners[allocation.Key(kind, ids)] = l.Owner
		}
	}
	return owners
}

// Owner returns the owner of a key.
func (r *Resolver) Owner(key string) (Owner, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	o, ok := r.owners[key]
	return o, ok
}

// Live returns the keys with an owner (for the collection rule).
func (r *Resolver) Live() map[string]bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make(map[string]bool, len(r.owners))
	for k := range r.owners {
		out[k] = true
	}
	return out
}

// Ready says whether PodResources has answered at least once.
func (r *Resolver) Ready() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return !r.at.IsZero()
}

// Run refreshes every interval until ctx ends; onErr sees each failure.
func (r *Resolver) Run(ctx context.Context, interval time.Duration, onErr func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := r.Refresh(ctx); err != nil && onErr != nil {
			onErr(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
