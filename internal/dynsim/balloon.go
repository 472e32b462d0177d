package dynsim

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tessera-gpu/tessera/internal/balloon"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// BalloonConfig is the memory-balloon comparison (docs/balloon.md, "Measured").
// GPU memory is the resource simulated: a pod asks, per GPU, its compute share of
// the GPU's memory (a 0.5 share asks half), and a GPU takes pods while the sum of
// their caps fits its memory. Compute is a constraint only with ComputeBound.
type BalloonConfig struct {
	Policy balloon.Policy
	// ComputeBound: a GPU also takes a pod only while the sum of its pods' compute
	// shares fits the GPU, as tessera.io/gpu-core does. Memory is asked in
	// proportion to compute, so this binds only on borrowers: without it a borrower
	// may ride on reclaimed memory of a GPU whose compute is all taken.
	ComputeBound bool
	// OptIn is the share of pods (seeded draw) that opt in as owners.
	OptIn float64
	// UseAlpha, UseBeta: a pod's peak usage is Beta(α, β) of its request, clamped
	// to [0.05, 1]; the default Beta(6, 4) has mean 0.6 and sd 0.15, fitted to the
	// observation that jobs use about 50–70 % of the GPU memory they reserve.
	UseAlpha, UseBeta float64
	// StartShare of its peak a pod uses when it starts; it grows to the peak in
	// Steps equal allocations spread evenly over the first GrowthShare of its run.
	StartShare  float64
	Steps       int
	GrowthShare float64
	// Grace is a borrower's termination grace period; Pass the node agent's pass
	// interval (an owner waiting for free memory waits half a pass on average).
	Grace, Pass time.Duration
	// Tick is the scheduling cycle's interval.
	Tick time.Duration
	// UnknownGPUMemMiB is the memory of a GPU model the node list does not size
	// (openb's G2 and G3).
	UnknownGPUMemMiB int32
	Seed             uint64
}

// DefaultBalloonConfig: 80 % of pods opt in, usage Beta(6, 4) of the request,
// starting at 60 % of the peak and growing in 8 steps over the first 60 % of the
// run, borrowers with a 2 s grace period, a 200 ms agent pass, a 10 s scheduling
// cycle, the default policy
// (3 s wait bound); a GPU of unknown size has 32 GiB. Compute-bound, as the
// engine places borrowers (their gpu-core share must be free): the
// memory-only model (ComputeBound false) lends memory on GPUs whose compute is
// all booked, which the engine refuses, and is an upper bound only.
func DefaultBalloonConfig() BalloonConfig {
	return BalloonConfig{Policy: balloon.DefaultPolicy(), OptIn: 0.8, UseAlpha: 6, UseBeta: 4, StartShare: 0.6, Steps: 8,
		GrowthShare: 0.6, Grace: 2 * time.Second, Pass: 200 * time.Millisecond, Tick: 10 * time.Second, UnknownGPUMemMiB: 32768, Seed: 42,
		ComputeBound: true}
}

// BalloonResult is one side (balloons off or on) of the comparison.
type BalloonResult struct {
	Balloons bool
	Arrived  int
	// Completed counts pods that finished while pods still arrived (by the horizon):
	// throughput at equal load; CompletedAll adds those that finished in the drain.
	Completed, CompletedAll int
	MemUsedShare            float64 // Σ usage / Σ GPU memory, averaged from warmup to the horizon
	// Where the reserved memory goes, as shares of Σ GPU memory averaged like
	// MemUsedShare: reserved but unused by running pods (caps − usage, lent
	// memory counted with its borrower), what settled owners could lend and
	// did not (cap − floor), and what is lent (ceiling − lowered cap).
	MemIdleShare, MemLendableShare, MemLentShare float64
	WaitP50                                      time.Duration
	WaitP99                                      time.Duration
	Borrowers                                    int // pods placed on reclaimed memory
	Evictions                                    int
	OwnerAllocs                                  int // growth steps of owners (each an allocation)
	OwnerWaits                                   int
	OwnerWaitP99                                 time.Duration
	OwnerOOMs                                    int
	PromiseBreaches                              int // times Σ caps exceeded a GPU's memory (must stay 0)
	// ComputeOvercommits counts placements that left one of the pod's GPUs with
	// compute shares past the whole GPU, BorrowersOverCompute those of them that
	// were borrowers (both 0 when ComputeBound): pods the real scheduler, which
	// also books tessera.io/gpu-core, would not have placed there.
	ComputeOvercommits, BorrowersOverCompute int
}

// simPod is one pod in the balloon simulation.
type simPod struct {
	job      *Job
	memPer   uint64  // request per GPU
	frac     float64 // peak usage / request
	optIn    bool
	usage    uint64
	step     int
	owner    bool
	borrower bool
	gpus     []*simGPU
	cap      uint64 // per GPU (the same on each)
	ceiling  uint64 // 0 = not inflated
	started  time.Duration
	stable   time.Duration // usage has not risen by more than half a margin since
	base     uint64
	epoch    int
	leaving  bool // evicted, within its grace period
	done     bool
	waitFrom time.Duration
}

type simGPU struct {
	physical uint64
	pods     []*simPod
	promise  uint64 // Σ caps of pods, kept by setCap, start and release
	milli    int32  // Σ compute shares of pods, kept by start and release
}

// computeFits says whether g has p's compute share free (always, unless the
// simulation is compute-bound).
func (s *balloonSim) computeFits(p *simPod, g *simGPU) bool {
	return !s.cfg.ComputeBound || g.milli+p.job.Request.GPUMilli <= partition.MilliPerGPU
}

func (g *simGPU) promised() uint64 { return g.promise }

// setCap changes a placed pod's cap on each of its GPUs.
func setCap(p *simPod, c uint64) {
	for _, g := range p.gpus {
		g.promise = g.promise - p.cap + c
	}
	p.cap = c
}

func (g *simGPU) room() uint64 { return g.physical - min(g.physical, g.promised()) }

type simEvent struct {
	at    time.Duration
	kind  int // evArrive, evGrow, evEnd, evGone
	pod   *simPod
	epoch int
	seq   int
}

const (
	evArrive = iota
	evGone   // an evicted borrower's grace period ended
	evEnd
	evGrow
)

type simEvents []simEvent

func (e simEvents) Len() int { return len(e) }
func (e simEvents) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].seq < e[j].seq
}
func (e simEvents) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *simEvents) Push(x any)   { *e = append(*e, x.(simEvent)) }
func (e *simEvents) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

type gpuFit struct {
	g    *simGPU
	left uint64
}

type balloonSim struct {
	fits                          []gpuFit
	cfg                           BalloonConfig
	on                            bool
	nodes                         [][]*simGPU
	pending                       []*simPod
	events                        simEvents
	seq                           int
	now                           time.Duration
	res                           BalloonResult
	waits                         []time.Duration
	ownerW                        []time.Duration
	usedInt                       float64 // ∫ Σ usage dt
	idleInt, lendableInt, lentInt float64
	lastT                         time.Duration
	capTotal                      float64
	end                           time.Duration
	horizon                       time.Duration
	warmup                        time.Duration
}

// CompareBalloons simulates the same jobs with balloons off and on.
func CompareBalloons(nodes []partition.NodeSpec, jobs []Job, warmup, horizon, drain time.Duration, cfg BalloonConfig) ([2]BalloonResult, error) {
	var out [2]BalloonResult
	if err := cfg.Policy.Validate(); err != nil {
		return out, err
	}
	if cfg.Steps < 1 || cfg.UnknownGPUMemMiB <= 0 || cfg.Tick <= 0 || cfg.StartShare <= 0 || cfg.StartShare > 1 || cfg.UseAlpha <= 0 || cfg.UseBeta <= 0 || cfg.GrowthShare <= 0 || cfg.GrowthShare > 1 {
		return out, errors.New("balloon simulation: steps ≥ 1, start share and growth share in (0, 1], α and β positive")
	}
	for i, on := range []bool{false, true} {
		s := &balloonSim{cfg: cfg, on: on, end: horizon + drain, horizon: horizon, warmup: warmup}
		s.res.Balloons = on
		for _, n := range nodes {
			var gs []*simGPU
			mem := n.GPUMemMiB
			if mem <= 0 {
				mem = cfg.UnknownGPUMemMiB
			}
			for range n.GPUs {
				gs = append(gs, &simGPU{physical: uint64(mem) << 20})
				s.capTotal += float64(uint64(mem) << 20)
			}
			if len(gs) > 0 {
				s.nodes = append(s.nodes, gs)
			}
		}
		s.load(jobs)
		s.run()
		out[i] = s.res
	}
	return out, nil
}

// load draws every pod's usage from the seeded distribution (the same draws for
// both sides) and queues its arrival.
func (s *balloonSim) load(jobs []Job) {
	r := rand.New(rand.NewPCG(s.cfg.Seed, 0xba11))
	for i := range jobs {
		j := &jobs[i]
		frac := min(max(betaDraw(r, s.cfg.UseAlpha, s.cfg.UseBeta), 0.05), 1)
		optIn := r.Float64() < s.cfg.OptIn
		if j.Request.NumGPU == 0 {
			continue
		}
		p := &simPod{job: j, frac: frac, optIn: optIn}
		s.push(simEvent{at: j.Arrive, kind: evArrive, pod: p})
	}
}

// betaDraw draws Beta(a, b) from two gamma draws.
func betaDraw(r *rand.Rand, a, b float64) float64 {
	x, y := gammaDraw(r, a), gammaDraw(r, b)
	return x / (x + y)
}

// gammaDraw is Marsaglia and Tsang's method (shape ≥ 1).
func gammaDraw(r *rand.Rand, shape float64) float64 {
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if math.Log(u) < 0.5*x*x+d-d*v+d*math.Log(v) {
			return d * v
		}
	}
}

func (s *balloonSim) push(e simEvent) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.events, e)
}

// run processes events in time order and schedules at every tick at which
// something arrived or left (and, with balloons, every minute while pods wait:
// owners settle with time alone), as the engine's scheduling cycle does.
func (s *balloonSim) run() {
	var next time.Duration
	dirty, ticks := false, 0
	for s.events.Len() > 0 {
		e := heap.Pop(&s.events).(simEvent)
		if e.at > s.end {
			break
		}
		for ; next <= e.at; next += s.cfg.Tick {
			ticks++
			if dirty || (s.on && len(s.pending) > 0 && ticks%6 == 0) {
				s.advance(next)
				s.now = next
				s.schedule()
				dirty = false
			}
		}
		s.advance(e.at)
		s.now = e.at
		if e.kind != evGrow {
			dirty = true
		}
		switch e.kind {
		case evArrive:
			s.res.Arrived++
			e.pod.waitFrom = e.at
			s.pending = append(s.pending, e.pod)
		case evEnd:
			if e.epoch != e.pod.epoch || e.pod.done {
				continue
			}
			e.pod.done = true
			s.res.CompletedAll++
			if e.at <= s.horizon {
				s.res.Completed++
			}
			s.release(e.pod)
		case evGone:
			if e.epoch != e.pod.epoch || e.pod.done {
				continue
			}
			s.release(e.pod)
			e.pod.epoch++
			e.pod.leaving = false
			e.pod.waitFrom = e.at
			s.pending = append(s.pending, e.pod) // it starts over
		case evGrow:
			if e.epoch != e.pod.epoch || e.pod.done || e.pod.leaving {
				continue
			}
			s.grow(e.pod)
		}
	}
	s.advance(s.end)
	for _, p := range s.pending {
		s.waits = append(s.waits, s.end-p.waitFrom)
	}
	span := s.capTotal * (s.horizon - s.warmup).Seconds()
	s.res.MemUsedShare = s.usedInt / span
	s.res.MemIdleShare, s.res.MemLendableShare, s.res.MemLentShare = s.idleInt/span, s.lendableInt/span, s.lentInt/span
	s.res.WaitP50, s.res.WaitP99 = pct(s.waits, 0.5), pct(s.waits, 0.99)
	s.res.OwnerWaitP99 = pct(s.ownerW, 0.99)
}

func pct(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return quantile(d, q)
}

// advance integrates memory in use up to t, over [warmup, horizon] only.
func (s *balloonSim) advance(t time.Duration) {
	t = min(max(t, s.warmup), s.horizon)
	if t <= s.lastT {
		return
	}
	if s.lastT < s.warmup {
		s.lastT = s.warmup
	}
	var used, idle, lendable, lent float64
	for _, gs := range s.nodes {
		for _, g := range gs {
			for _, p := range g.pods {
				used += float64(p.usage)
				idle += float64(p.cap - min(p.cap, p.usage))
				if p.ceiling != 0 {
					lent += float64(p.ceiling - p.cap)
				} else if f, ok := s.inflatable(p, math.MinInt); ok {
					lendable += float64(p.cap - f)
				}
			}
		}
	}
	dt := (t - s.lastT).Seconds()
	s.usedInt += used * dt
	s.idleInt, s.lendableInt, s.lentInt = s.idleInt+idle*dt, s.lendableInt+lendable*dt, s.lentInt+lent*dt
	s.lastT = t
}

func priorityOf(j *Job) int { return int(priority.NumClasses) - int(j.Class) }

// schedule places pending pods, most urgent class first, then oldest.
func (s *balloonSim) schedule() {
	slices.SortStableFunc(s.pending, func(a, b *simPod) int {
		if c := cmp.Compare(a.job.Class, b.job.Class); c != 0 {
			return c
		}
		return cmp.Compare(a.waitFrom, b.waitFrom)
	})
	// A pod that did not fit bounds the round: a pod of the same shape and class
	// asking at least as much cannot fit either (memory only shrinks in a round).
	type shape struct {
		gpus  int
		class priority.Class
	}
	failed := map[shape]int32{}
	kept := s.pending[:0]
	for _, p := range s.pending {
		k := shape{p.job.Request.NumGPU, p.job.Class}
		if f, ok := failed[k]; ok && p.job.Request.GPUMilli >= f {
			kept = append(kept, p)
			continue
		}
		if !s.place(p) {
			failed[k] = p.job.Request.GPUMilli
			kept = append(kept, p)
		}
	}
	s.pending = kept
}

// memFor is a pod's request on one GPU: its compute share of the GPU's memory,
// rounded up to 256 MiB.
func memFor(p *simPod, g *simGPU) uint64 {
	m := g.physical * uint64(p.job.Request.GPUMilli) / partition.MilliPerGPU
	const q = 256 << 20
	return min((m+q-1)/q*q, g.physical)
}

// place puts p on the node whose chosen GPUs leave the least memory free (best
// fit), on free memory first; with balloons, on free plus reclaimable memory.
func (s *balloonSim) place(p *simPod) bool {
	if s.placeOn(p, false) {
		return true
	}
	return s.on && s.placeOn(p, true)
}

func (s *balloonSim) placeOn(p *simPod, borrow bool) bool {
	var best []*simGPU
	var bestLeft uint64 = math.MaxUint64
	fits := s.fits[:0]
	for _, gs := range s.nodes {
		fits = fits[:0]
		for _, g := range gs {
			need := memFor(p, g)
			have := g.room()
			if borrow {
				have += s.reclaimable(g, priorityOf(p.job))
			}
			if have >= need && s.computeFits(p, g) {
				fits = append(fits, gpuFit{g, have - need})
			}
		}
		if len(fits) < p.job.Request.NumGPU {
			continue
		}
		slices.SortFunc(fits, func(a, b gpuFit) int { return cmp.Compare(a.left, b.left) })
		var left uint64
		chosen := make([]*simGPU, 0, p.job.Request.NumGPU)
		for _, f := range fits[:p.job.Request.NumGPU] {
			left += f.left
			chosen = append(chosen, f.g)
		}
		if left < bestLeft {
			best, bestLeft = chosen, left
		}
	}
	s.fits = fits
	if best == nil {
		return false
	}
	p.memPer = memFor(p, best[0])
	if borrow {
		for _, g := range best {
			s.inflate(g, p.memPer, priorityOf(p.job))
		}
		s.res.Borrowers++
	}
	p.borrower, p.owner = borrow, s.on && p.optIn && !borrow
	s.start(p, best)
	return true
}

// reclaimable: settled owners' memory above their floors, from owners the pod does
// not outrank.
func (s *balloonSim) reclaimable(g *simGPU, prio int) uint64 {
	var n uint64
	for _, o := range g.pods {
		if f, ok := s.inflatable(o, prio); ok {
			n += o.cap - f
		}
	}
	return n
}

func (s *balloonSim) inflatable(o *simPod, prio int) (uint64, bool) {
	pol := s.cfg.Policy
	if !o.owner || o.ceiling != 0 || priorityOf(o.job) < prio || s.now-o.stable < pol.Settle {
		return 0, false
	}
	f := pol.Floor(o.cap, o.usage)
	return f, f < o.cap
}

// inflate lowers settled owners' caps to their floors, largest first, until need
// bytes are free on g.
func (s *balloonSim) inflate(g *simGPU, need uint64, prio int) {
	owners := slices.Clone(g.pods)
	slices.SortFunc(owners, func(a, b *simPod) int {
		fa, _ := s.inflatable(a, prio)
		fb, _ := s.inflatable(b, prio)
		return cmp.Compare(b.cap-fb, a.cap-fa)
	})
	for _, o := range owners {
		if g.room() >= need {
			return
		}
		if f, ok := s.inflatable(o, prio); ok {
			// Lower only by what is missing: memory taken from an owner is the
			// borrower's, none is left free for pods that would not give it back.
			// What is missing may exceed this owner's whole cap (a later owner
			// lends the rest): the cap goes to its floor, not below zero.
			o.ceiling = o.cap
			setCap(o, max(f, o.cap-min(o.cap, need-g.room())))
		}
	}
}

func (s *balloonSim) start(p *simPod, gs []*simGPU) {
	p.gpus = gs
	p.cap = p.memPer
	p.ceiling = 0
	p.step = 0
	p.usage = uint64(float64(p.memPer) * p.frac * s.cfg.StartShare)
	p.started, p.stable, p.base = s.now, s.now, p.usage
	over := false
	for _, g := range gs {
		g.pods = append(g.pods, p)
		g.promise += p.cap
		g.milli += p.job.Request.GPUMilli
		over = over || g.milli > partition.MilliPerGPU
		if g.promised() > g.physical {
			s.res.PromiseBreaches++
		}
	}
	if over {
		s.res.ComputeOvercommits++
		if p.borrower {
			s.res.BorrowersOverCompute++
		}
	}
	s.waits = append(s.waits, s.now-p.waitFrom)
	s.push(simEvent{at: s.now + p.job.Run, kind: evEnd, pod: p, epoch: p.epoch})
	s.pushGrow(p)
}

func (s *balloonSim) pushGrow(p *simPod) {
	if p.step >= s.cfg.Steps {
		return
	}
	dt := time.Duration(float64(p.job.Run) * s.cfg.GrowthShare / float64(s.cfg.Steps))
	s.push(simEvent{at: p.started + time.Duration(p.step+1)*dt, kind: evGrow, pod: p, epoch: p.epoch})
}

func (s *balloonSim) release(p *simPod) {
	for _, g := range p.gpus {
		g.pods = slices.DeleteFunc(g.pods, func(x *simPod) bool { return x == p })
		g.promise -= p.cap
		g.milli -= p.job.Request.GPUMilli
		s.deflateInto(g)
	}
	p.gpus = nil
}

// deflateInto raises lowered caps back, as far as the GPU has room.
func (s *balloonSim) deflateInto(g *simGPU) {
	for _, o := range g.pods {
		if o.ceiling == 0 {
			continue
		}
		up := o.ceiling - o.cap
		for _, og := range o.gpus { // a cap is the same on each of the owner's GPUs
			up = min(up, og.room())
		}
		if up == 0 {
			continue
		}
		if up < o.ceiling-o.cap {
			setCap(o, o.cap+up)
		} else {
			setCap(o, o.ceiling)
			o.ceiling = 0
		}
	}
}

// grow is one growth allocation of p.
func (s *balloonSim) grow(p *simPod) {
	p.step++
	peak := uint64(float64(p.memPer) * p.frac)
	start := uint64(float64(peak) * s.cfg.StartShare)
	next := start + (peak-start)*uint64(p.step)/uint64(s.cfg.Steps)
	pol := s.cfg.Policy
	if p.owner {
		s.res.OwnerAllocs++
	}
	if next > p.cap {
		if p.ceiling == 0 || next > p.ceiling {
			panic(fmt.Sprintf("pod %s grew past its request", p.job.Name))
		}
		wait, ok := s.reclaimFor(p)
		s.res.OwnerWaits++
		s.ownerW = append(s.ownerW, wait)
		if !ok {
			s.res.OwnerOOMs++ // the allocation fails; the job carries on without it
			s.pushGrow(p)
			return
		}
	}
	p.usage = next
	if p.usage > p.base+pol.Margin(p.memPer)/2 {
		p.stable, p.base = s.now, p.usage
	}
	if p.ceiling != 0 && pol.ShouldReclaim(p.ceiling, p.cap, p.usage) {
		s.reclaimFor(p) // early: the agent starts as usage nears the lowered cap
	}
	s.pushGrow(p)
}

// reclaimFor gives owner p its ceiling back: at once from room (half a pass), else
// by evicting borrowers on its GPUs (their grace period). It returns how long an
// allocation waiting now would wait and whether that is within the wait bound.
func (s *balloonSim) reclaimFor(p *simPod) (time.Duration, bool) {
	need := p.ceiling - p.cap
	wait := s.cfg.Pass / 2
	for _, g := range p.gpus {
		if g.room() >= need {
			continue
		}
		var freed uint64
		for _, b := range s.reclaimOrder(g) {
			if g.room()+freed >= need {
				break
			}
			freed += b.cap
			if !b.leaving {
				b.leaving = true
				s.res.Evictions++
				s.push(simEvent{at: s.now + s.cfg.Grace, kind: evGone, pod: b, epoch: b.epoch})
			}
			wait = max(wait, s.cfg.Grace+s.cfg.Pass/2)
		}
		if g.room()+freed < need {
			return wait, false
		}
	}
	bound := time.Duration(s.cfg.Policy.WaitMS) * time.Millisecond
	if wait > bound {
		return wait, false
	}
	// The memory is on its way within the bound: the owner is raised now and the
	// borrowers' caps are taken off at once (the simulator does not keep both).
	for _, g := range p.gpus {
		for _, b := range g.pods {
			if b.leaving {
				setCap(b, 0)
			}
		}
	}
	setCap(p, p.ceiling)
	p.ceiling = 0
	for _, g := range p.gpus {
		s.deflateInto(g) // what the evicted borrowers held beyond p's need goes back to other owners first
	}
	return wait, true
}

// reclaimOrder: borrowers on g, lowest priority first, then youngest.
func (s *balloonSim) reclaimOrder(g *simGPU) []*simPod {
	var out []*simPod
	for _, b := range g.pods {
		if b.borrower {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b *simPod) int {
		if c := cmp.Compare(priorityOf(a.job), priorityOf(b.job)); c != 0 {
			return c
		}
		return cmp.Compare(b.started, a.started)
	})
	return out
}

// WriteBalloonTable prints the comparison.
func WriteBalloonTable(w io.Writer, r [2]BalloonResult) {
	fmt.Fprintf(w, "\nmemory balloons (same arrivals; usage Beta-distributed, growing over each pod's life):\n")
	fmt.Fprintf(w, "%-9s %9s %9s %9s %10s %10s %9s %9s %11s %12s %10s\n", "balloons", "arrived", "done@hzn", "mem used", "wait p50", "wait p99", "borrowers", "evictions", "owner waits", "owner wait99", "owner OOMs")
	for _, x := range r {
		on := "off"
		if x.Balloons {
			on = "on"
		}
		fmt.Fprintf(w, "%-9s %9d %9d %8.1f%% %10s %10s %9d %9d %11d %12s %5d/%d\n", on, x.Arrived, x.Completed, 100*x.MemUsedShare,
			dur(x.WaitP50), dur(x.WaitP99), x.Borrowers, x.Evictions, x.OwnerWaits, x.OwnerWaitP99, x.OwnerOOMs, x.OwnerAllocs)
	}
	for _, x := range r {
		if x.Balloons {
			fmt.Fprintf(w, "balloons on: of the GPU memory, %.1f%% reserved but unused, %.1f%% lendable by settled owners and not lent, %.1f%% lent (time averages)\n",
				100*x.MemIdleShare, 100*x.MemLendableShare, 100*x.MemLentShare)
			fmt.Fprintf(w, "balloons on: %d of %d borrowers, and %d placements in all, beyond their GPU's compute (0 when compute-bound)\n",
				x.BorrowersOverCompute, x.Borrowers, x.ComputeOvercommits)
		}
	}
}

// WriteBalloonBench prints the BENCH lines of the comparison.
func WriteBalloonBench(w io.Writer, r [2]BalloonResult) {
	off, on := r[0], r[1]
	gain := 0.0
	if off.Completed > 0 {
		gain = 100 * (float64(on.Completed) - float64(off.Completed)) / float64(off.Completed)
	}
	ratio := 0.0
	if on.WaitP99 > 0 {
		ratio = off.WaitP99.Seconds() / on.WaitP99.Seconds()
	}
	oom := 0.0
	if on.OwnerAllocs > 0 {
		oom = 100 * float64(on.OwnerOOMs) / float64(on.OwnerAllocs)
	}
	fmt.Fprintf(w, "BENCH balloon.completed_gain_pct %.1f %%\n", gain)
	fmt.Fprintf(w, "BENCH balloon.wait_p99_ratio %.2f x\n", ratio)
	fmt.Fprintf(w, "BENCH balloon.owner_oom_pct %.3f %%\n", oom)
	fmt.Fprintf(w, "BENCH balloon.mem_used_pct_off %.1f %%\n", 100*off.MemUsedShare)
	fmt.Fprintf(w, "BENCH balloon.mem_used_pct_on %.1f %%\n", 100*on.MemUsedShare)
	fmt.Fprintf(w, "BENCH balloon.owner_wait_p99_ms %.0f ms\n", float64(on.OwnerWaitP99)/1e6)
	fmt.Fprintf(w, "BENCH balloon.mem_idle_pct_off %.1f %%\n", 100*off.MemIdleShare)
	fmt.Fprintf(w, "BENCH balloon.mem_lendable_pct_on %.1f %%\n", 100*on.MemLendableShare)
	fmt.Fprintf(w, "BENCH balloon.mem_lent_pct_on %.1f %%\n", 100*on.MemLentShare)
	over := 0.0
	if on.Borrowers > 0 {
		over = 100 * float64(on.BorrowersOverCompute) / float64(on.Borrowers)
	}
	fmt.Fprintf(w, "BENCH balloon.borrowers_over_compute_pct %.1f %%\n", over)
}
