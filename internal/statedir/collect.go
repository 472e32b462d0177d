package statedir

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tessera-gpu/tessera/internal/region"
)

// Collector removes the directories of containers that no longer exist. It is
// the only code that removes them; the device plugin runs it in its
// PodResources read-back (it also restores the directories there, so removal
// and restoration never race), and the monitor only reads what is left.
//
// A directory is removed when all of these hold:
//   - no container has referenced it (live) for the whole grace period,
//     across calls: a fresh Allocate may not be in PodResources yet, and a
//     restarting kubelet may briefly report no pods;
//   - it is older than the grace period (its mtime, refreshed at Allocate);
//   - no process still holds its region: a slot whose process is alive
//     (judged with the caller's liveness) keeps it, whatever PodResources says.
type Collector struct {
	StateDir string
	Grace    time.Duration
	Log      *slog.Logger
	// Writers, if set, is held for reading by whoever creates or refreshes
	// a directory (the plugin's Allocate and restore). Collect holds it for
	// writing from its check of an unreferenced directory to the removal,
	// so a directory an Allocate is handed meanwhile (same IDs, same key)
	// is seen fresh and kept, never removed under the new container.
	Writers *sync.RWMutex

	mu      sync.Mutex
	missing map[string]time.Time // key → first call without it
	now     func() time.Time     // time.Now; tests step it
}

// Collect applies the rule once. alive judges region slots; nil treats every
// slot as alive (a directory with a used slot is then never removed).
func (c *Collector) Collect(live map[string]bool, alive region.Liveness) (removed []string) {
	entries, err := List(c.StateDir)
	if err != nil {
		c.Log.Warn("state directory collection", "err", err)
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.missing == nil {
		c.missing = map[string]time.Time{}
	}
	now := c.clock()
	present := map[string]bool{}
	for _, e := range entries {
		present[e.Key] = true
		if live[e.Key] {
			delete(c.missing, e.Key)
			continue
		}
		since, seen := c.missing[e.Key]
		if !seen {
			c.missing[e.Key] = now
			since = now
		}
		if now.Sub(since) < c.Grace || !c.removeExpired(e, now, alive) {
			continue
		}
		delete(c.missing, e.Key)
		removed = append(removed, e.Key)
	}
	for key := range c.missing {
		if !present[key] {
			delete(c.missing, key)
		}
	}
	return removed
}

// removeExpired removes an unreferenced entry that is older than the grace
// period and whose region no live process holds, with no writer at work.
func (c *Collector) removeExpired(e Entry, now time.Time, alive region.Liveness) bool {
	if c.Writers != nil {
		c.Writers.Lock()
		defer c.Writers.Unlock()
	}
	info, err := os.Stat(e.Dir)
	if err != nil || now.Sub(info.ModTime()) < c.Grace {
		return false
	}
	if held, why := regionHeld(e, alive); held {
		c.Log.Info("state of an unlisted container kept: its region is in use", "key", e.Key, "why", why)
		return false
	}
	if err := os.RemoveAll(e.Dir); err != nil {
		c.Log.Warn("remove state of a finished container", "key", e.Key, "err", err)
		return false
	}
	c.Log.Info("removed state of a finished container", "key", e.Key)
	return true
}

// regionHeld says whether some slot of the entry's region belongs to a live
// process. A directory without a region (core) or with an unreadable one holds
// nothing: no hook can have mapped an invalid region.
func regionHeld(e Entry, alive region.Liveness) (bool, string) {
	path := e.Region()
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return false, ""
	}
	r, err := region.OpenRegion(path)
	if err != nil {
		return false, ""
	}
	defer r.Close()
	var u region.Usage
	if err := region.Guard(path, func() { u = r.Usage() }); err != nil {
		return false, ""
	}
	for _, p := range u.Procs {
		if alive == nil || alive(p.PID, p.StartTime) {
			return true, fmt.Sprintf("pid %d (in its namespace) is alive", p.PID)
		}
	}
	return false, ""
}

func (c *Collector) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// Path of a key's directory.
func (c *Collector) Path(key string) string { return filepath.Join(Containers(c.StateDir), key) }
