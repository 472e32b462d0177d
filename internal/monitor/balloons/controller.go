package balloons

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	apiv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/balloon"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
	"github.com/tessera-gpu/tessera/internal/monitor/metrics"
	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/statedir"
)

// PodInfo is what the controller needs to know about a container's pod.
type PodInfo struct {
	OptedIn  bool  // tessera.io/balloon: "true"
	Borrower bool  // tessera.io/borrowed is set: it rides on reclaimed memory
	Priority int32 // the pod's priority (spec.priority)
	// Started is when the pod started (status.startTime; zero: unknown): among
	// borrowers of one priority the youngest is reclaimed first.
	Started time.Time
	// Loans is the parsed tessera.io/borrowed (which GPUs it borrowed on); nil when
	// absent or unreadable.
	Loans *apiv1.Borrowed
}

// BorrowerOn says whether the pod rides on reclaimed memory on GPU uuid. A pod
// that borrowed on another GPU holds a plain allocation here. A record that cannot
// be read makes it a borrower everywhere (preemptible by definition).
func (p PodInfo) BorrowerOn(uuid string) bool {
	if !p.Borrower {
		return false
	}
	if p.Loans == nil {
		return true
	}
	for _, g := range p.Loans.GPUs {
		if g.UUID == uuid {
			return true
		}
	}
	return false
}

// Pods answers PodInfo for a container.
type Pods interface {
	// Info may answer from a cache (every container, every pass).
	Info(ctx context.Context, owner identity.Owner) (PodInfo, error)
	// Confirm reads the pod now: a cap is lowered only on the API server's current
	// answer, since an opt-in annotation can be removed while the pod runs.
	Confirm(ctx context.Context, owner identity.Owner) (PodInfo, error)
}

// Evictor evicts a pod, honouring its grace period (production: the Eviction API).
type Evictor interface {
	Evict(ctx context.Context, owner identity.Owner) error
}

// Publisher writes the node's balloon state (production: the node annotation).
type Publisher interface {
	Publish(ctx context.Context, state apiv1.NodeBalloons) error
}

// Controller is one node's balloon controller.
type Controller struct {
	StateDir string
	Policy   balloon.Policy
	// Owner names the container that holds a state directory (identity.Resolver.Owner).
	Owner func(key string) (identity.Owner, bool)
	Pods  Pods
	// Evictor and Publisher may be nil (no API server): owners then only get memory
	// that is free or that borrowers do not use, and nothing is published.
	Evictor   Evictor
	Publisher Publisher
	// Physical is a GPU's memory; a GPU it does not know is left alone.
	Physical func(uuid string) (uint64, bool)
	Metrics  *metrics.Balloon
	Log      *slog.Logger
	Now      func() time.Time // wall clock for histories; nil: time.Now
	// Monotonic is CLOCK_MONOTONIC in ns (the hook's wait stamps); nil: monoNow.
	Monotonic func() uint64
	// EvictRetry: a borrower asked to leave is not asked again before this (the
	// Eviction API answered; the pod is terminating within its grace period).
	EvictRetry time.Duration

	hist      map[string]*balloon.History // key/uuid
	waits     map[string]region.BalloonWait
	evicted   map[string]time.Time // pod → when asked
	published string
	gauged    map[string]bool      // GPUs with reclaimable/lent series
	unnamed   map[string]time.Time // key → first pass that found no owner for it
	lock      *os.File             // the node's controller lock, once taken
	waiting   bool                 // for the lock (logged once)
}

// unnamedGrace: a container PodResources has not named for this long (several
// identity refreshes) is taken for a finished one whose directory awaits collection.
const unnamedGrace = time.Minute

// member is one container on one GPU in this pass.
type member struct {
	key   string
	entry statedir.Entry
	owner identity.Owner
	info  PodInfo
	known bool // owner named and its pod read this pass (info is not a default)
	// unsure: not known, and maybe a live container of unknown rank (its pod is
	// unreadable, or PodResources has not named it for long); a state directory
	// nobody names for longer is a finished container's leftover.
	unsure bool
	uuid   string
	dev    int
	cap    uint64
	bal    region.Balloon
	usage  uint64
	wait   region.BalloonWait
	hist   *balloon.History
	limits *region.Limits
	region *region.Region
}

func (m *member) ceiling() uint64 {
	if m.bal.Inflated() {
		return m.bal.CeilingBytes
	}
	return m.cap
}

func (m *member) histKey() string { return m.key + "/" + m.uuid }

// Run calls Step every interval until ctx ends.
func (c *Controller) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	defer c.Close()
	for {
		if err := c.Step(ctx); err != nil {
			c.Log.Warn("balloon pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Step is one pass over the node.
func (c *Controller) Step(ctx context.Context) error {
	if ok, err := c.lead(); !ok {
		if !c.waiting {
			c.Log.Info("balloons: another agent's controller runs on this node; waiting for it to go", "err", err)
			c.waiting = true
		}
		return err
	}
	c.waiting = false
	now := c.now()
	members, closeAll, err := c.read(ctx, now)
	defer closeAll()
	if err != nil {
		return err
	}
	byGPU := map[string][]*member{}
	for _, m := range members {
		byGPU[m.uuid] = append(byGPU[m.uuid], m)
	}
	state := apiv1.NodeBalloons{Version: apiv1.Version}
	uuids := make([]string, 0, len(byGPU))
	for u := range byGPU {
		uuids = append(uuids, u)
	}
	slices.Sort(uuids)
	for _, u := range uuids {
		phys, ok := c.Physical(u)
		if !ok || phys == 0 {
			continue
		}
		g := &gpuPass{c: c, ctx: ctx, now: now, physical: phys, members: byGPU[u]}
		g.run()
		state.GPUs = append(state.GPUs, g.report(u))
	}
	c.dropGauges(state)
	c.publish(ctx, state)
	return nil
}

// dropGauges deletes the series of GPUs this pass did not report (their last
// container went): a lent or reclaimable value must not outlive what it measured.
func (c *Controller) dropGauges(state apiv1.NodeBalloons) {
	if c.Metrics == nil {
		return
	}
	now := map[string]bool{}
	for _, g := range state.GPUs {
		now[g.UUID] = true
	}
	for u := range c.gauged {
		if !now[u] {
			c.Metrics.Reclaimable.DeleteLabelValues(u)
			c.Metrics.Lent.DeleteLabelValues(u)
		}
	}
	c.gauged = now
}

func (c *Controller) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Controller) mono() uint64 {
	if c.Monotonic != nil {
		return c.Monotonic()
	}
	return monoNow()
}

// read maps every memory allocation and builds its members. The returned func
// unmaps them.
func (c *Controller) read(ctx context.Context, now time.Time) ([]*member, func(), error) {
	var opened []interface{ Close() error }
	closeAll := func() {
		for _, o := range opened {
			o.Close()
		}
	}
	entries, err := statedir.List(c.StateDir)
	if err != nil {
		return nil, closeAll, fmt.Errorf("balloons: %w", err)
	}
	if c.hist == nil {
		c.hist, c.waits, c.evicted = map[string]*balloon.History{}, map[string]region.BalloonWait{}, map[string]time.Time{}
		c.unnamed = map[string]time.Time{}
	}
	unnamed := map[string]time.Time{}
	seen := map[string]bool{}
	var out []*member
	for _, e := range entries {
		if e.Kind != "mem" {
			continue
		}
		// A container the agent cannot name (PodResources not refreshed yet) or whose
		// pod it cannot read still holds its cap on the GPU: it counts in what the GPU
		// is promised, as neither owner nor borrower, and is left alone.
		var info PodInfo
		owner, known := c.Owner(e.Key)
		unsure := false
		if known {
			var err error
			if info, err = c.Pods.Info(ctx, owner); err != nil {
				c.Log.Debug("balloons: pod unknown; its containers are left alone this pass", "owner", owner.String(), "err", err)
				info, known, unsure = PodInfo{}, false, true
			}
		} else {
			first, ok := c.unnamed[e.Key]
			if !ok {
				first = now
			}
			unnamed[e.Key] = first
			unsure = now.Sub(first) < unnamedGrace
		}
		l, err := region.OpenLimits(e.Limits())
		if err != nil {
			continue // the accounting reader reports bad files
		}
		opened = append(opened, l)
		r, err := region.OpenRegion(e.Region())
		if err != nil {
			continue
		}
		opened = append(opened, r)
		var devs []region.DeviceLimit
		var u region.Usage
		if err := region.Guard(e.Region(), func() { devs, u = l.Devices(), r.Usage() }); err != nil {
			continue
		}
		for i, d := range devs {
			m := &member{key: e.Key, entry: e, owner: owner, info: info, known: known, unsure: unsure, uuid: d.UUID, dev: i, cap: d.MemLimitBytes,
				usage: u.UsedBytes[i], limits: l, region: r}
			m.bal, _ = l.Balloon(d.UUID)
			_ = region.Guard(e.Region(), func() { m.wait = r.BalloonWait(i) })
			if m.cap == 0 {
				continue // uncapped: nothing to lower, nothing it was promised
			}
			if m.bal.Inflated() && m.bal.CeilingBytes < m.cap {
				c.dropStaleWords(m)
			}
			h := c.hist[m.histKey()]
			if h == nil {
				h = &balloon.History{}
				c.hist[m.histKey()] = h
			}
			h.Observe(now, m.usage, c.Policy.Window)
			m.hist = h
			seen[m.histKey()] = true
			c.countWaits(m)
			out = append(out, m)
		}
	}
	c.unnamed = unnamed
	for pod, at := range c.evicted {
		if now.Sub(at) >= c.evictRetry() {
			delete(c.evicted, pod) // past its use: asked again if it is still there
		}
	}
	for k := range c.hist {
		if !seen[k] {
			delete(c.hist, k)
			delete(c.waits, k)
		}
	}
	return out, closeAll, nil
}

// dropStaleWords clears balloon words whose ceiling is below the cap: no lowered
// cap (the plugin rewrote the cap for a new container where an earlier one's words
// stayed, or the file is corrupt). Kept, ceiling - cap would wrap: reclaiming 16 EiB
// evicts every borrower, and that much would be published as lent. The cap stays;
// the hook refuses at it as before (usage + n above the cap is above the ceiling).
func (c *Controller) dropStaleWords(m *member) {
	c.Log.Warn("balloons: balloon words with a ceiling below the cap; cleared", "owner", m.owner.String(), "gpu", m.uuid,
		"cap", m.cap, "ceiling", m.bal.CeilingBytes)
	if err := m.limits.SetBalloonCap(m.uuid, m.cap, region.Balloon{WaitMS: m.bal.WaitMS}); err != nil {
		c.Log.Warn("balloons: stale balloon words not cleared", "owner", m.owner.String(), "err", err)
	}
	m.bal = region.Balloon{}
}

// countWaits turns the region's wait counters into metrics: each wait that ended
// since the last pass, in the histogram lane the hook counted it in. The first
// reading of a region (or after an agent restart) is the baseline.
func (c *Controller) countWaits(m *member) {
	prev, ok := c.waits[m.histKey()]
	c.waits[m.histKey()] = m.wait
	if !ok || c.Metrics == nil {
		return
	}
	lanes, _, expired, ns := m.wait.Since(prev)
	c.Metrics.OwnerOOMs.Add(float64(expired))
	c.Metrics.OwnerWait.Add(lanes, float64(ns)/1e9)
}

func (c *Controller) publish(ctx context.Context, state apiv1.NodeBalloons) {
	if c.Publisher == nil {
		return
	}
	s, err := apiv1.Marshal(&state)
	if err != nil || s == c.published {
		return
	}
	if err := c.Publisher.Publish(ctx, state); err != nil {
		c.Log.Warn("balloons: node state not published; retrying next pass", "err", err)
		return
	}
	c.published = s
}

// byReclaimOrder sorts borrowers, first to be reclaimed first: lowest priority, then youngest.
func byReclaimOrder(a, b *member) int {
	if x := cmp.Compare(a.info.Priority, b.info.Priority); x != 0 {
		return x
	}
	// The youngest first: by the pod's start when both are known (an agent's own
	// watch began at its restart for all of them), else by that watch.
	as, bs := a.info.Started, b.info.Started
	if as.IsZero() || bs.IsZero() {
		as, bs = a.hist.Since(), b.hist.Since()
	}
	if x := bs.Compare(as); x != 0 {
		return x
	}
	return cmp.Compare(a.key, b.key)
}

// lockFile is the node's balloon controller lock in the state directory.
const lockFile = "balloons.lock"

// lead takes the node's controller lock unless held: one controller acts on a
// node's caps and evictions at a time (a DaemonSet update runs the old and the new
// agent side by side). flock is released by the kernel when the holder dies, so a
// killed agent never blocks the next.
func (c *Controller) lead() (bool, error) {
	if c.lock != nil {
		return true, nil
	}
	f, err := os.OpenFile(filepath.Join(c.StateDir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return false, fmt.Errorf("balloons: controller lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil
		}
		return false, fmt.Errorf("balloons: controller lock: %w", err)
	}
	c.lock = f
	return true, nil
}

// Close gives up the node's controller lock (another agent's controller takes over
// at its next pass).
func (c *Controller) Close() error {
	if c.lock == nil {
		return nil
	}
	err := c.lock.Close()
	c.lock = nil
	return err
}
