package quota

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/mig/profile"
	"github.com/tessera-gpu/tessera/internal/placement"
)

// scale turns configured amounts into internal units: a weight of 1.0 is
// scale, so weighted amounts stay integers (0.25 × 1 milli = 250 units).
const scale = 1000

// The three resources of every queue, and of every per-model quota.
const (
	resMem   = iota // GPU memory MiB, never weighted
	resMilli        // GPU compute, weighted
	resGPUs         // whole GPUs, weighted
	perSet
)

var resNames = [perSet]string{"gpuMemMiB", "gpuMilli", "gpus"}

// Usage is what one pod holds, as placement granted it: GPUs GPUs of Model,
// each with MilliPerGPU compute and MemMiBPerGPU memory; with MIG, GPUs
// MIG devices, each that part of its GPU.
type Usage struct {
	Model        string
	GPUs         int
	MilliPerGPU  int32
	MemMiBPerGPU int32
	// MIG: the pod holds MIG devices, which count in whole GPUs too, at
	// their fraction (a GPU share holds no device and counts in compute
	// and memory only).
	MIG bool
}

// UsageOf is what a pod of request r holds on a GPU of model (the model of
// the node placement chose; before placement, the model the pod would be
// charged for, e.g. the heaviest it accepts) with gpuMemMiB of memory (0:
// not known yet). A MIG device is its profile's part of the GPU: its
// compute slices of the GPU's and its memory slices' memory
// (internal/mig/profile; 1g.10gb of an H100 80 GB is 142 milli and
// 10 GiB). A profile no table or pattern reads counts as a whole GPU
// rather than as nothing.
func UsageOf(r *placement.Request, model string, gpuMemMiB int32) Usage {
	if r.NumMIG > 0 {
		s, err := profile.Of(r.MIGProfile, gpuMemMiB)
		if err != nil {
			s = profile.Share{ComputeMilli: 1000, MemMiB: max(gpuMemMiB, 0)}
		}
		return Usage{Model: model, GPUs: r.NumMIG, MilliPerGPU: s.ComputeMilli, MemMiBPerGPU: s.MemMiB, MIG: true}
	}
	return Usage{Model: model, GPUs: r.NumGPU, MilliPerGPU: r.GPUMilli, MemMiBPerGPU: r.GPUMemMiB}
}

// Pod is a running pod as the books see it.
type Pod struct {
	ID    string
	Queue string
	// Class is the priority class rank, 0 (P0) most urgent.
	Class int
	Start time.Time
	Usage Usage
}

// Verdict is the answer for one pod.
type Verdict int

const (
	// Fits: within the queue's nominal quota.
	Fits Verdict = iota
	// Borrows: above nominal; the cohort's lendable idle capacity covers it.
	Borrows
	// NeedsReclaim: within nominal, but others borrowed the capacity; the
	// pod is admitted once Reclaim's victims are gone.
	NeedsReclaim
	// Held: over the borrowing limit, or the cohort has nothing to lend.
	Held
)

func (v Verdict) String() string {
	return [...]string{"fits", "borrows", "needs-reclaim", "held"}[v]
}

// Decision is a verdict with the reason an operator reads.
type Decision struct {
	Verdict Verdict
	Reason  string
}

// Admit reports whether the pod may start now.
func (d Decision) Admit() bool { return d.Verdict == Fits || d.Verdict == Borrows }

// Unmanaged is the queue name of pods outside any queue (no queue given and
// no default queue): they are never limited.
const Unmanaged = ""

// Books is the quota state of every queue.
type Books struct {
	queues       map[string]*queue
	order        []*queue // config order, for deterministic output
	defaultQueue string
	models       map[string]int   // model → its per-model resource set (1-based; 0: none)
	weights      map[string]int64 // model → weight × scale
	defWeight    int64
	pods         map[string]*entry
}

type queue struct {
	name    string
	cohort  *cohort
	weight  float64 // fair-sharing weight
	nominal []int64
	guard   []int64 // nominal − lending limit: never lent
	ceiling []int64 // nominal + borrowing limit (MaxInt64: none)
	usage   []int64
	pods    map[string]*entry
}

type cohort struct {
	name    string
	active  []bool  // resources some member has a nominal amount of
	pool    []int64 // Σ lending limits
	poolUse []int64 // Σ max(0, usage − guard)
	queues  []*queue
}

type entry struct {
	pod   Pod
	q     *queue
	delta []amount
}

type amount struct {
	res int
	v   int64
}

// New builds empty books from a validated configuration.
func New(cfg *schedv1.Config) (*Books, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("quota: %w", err)
	}
	b := &Books{queues: map[string]*queue{}, models: map[string]int{}, weights: map[string]int64{},
		defaultQueue: cfg.DefaultQueue, defWeight: weightUnits(cfg.DefaultModelWeight), pods: map[string]*entry{}}
	for m, w := range cfg.ModelWeights {
		b.weights[m] = weightUnits(w)
	}
	var modelNames []string
	for _, q := range cfg.Queues {
		for m := range q.Models {
			if !slices.Contains(modelNames, m) {
				modelNames = append(modelNames, m)
			}
		}
	}
	sort.Strings(modelNames)
	for i, m := range modelNames {
		b.models[m] = i + 1
	}
	dims := perSet * (1 + len(modelNames))
	cohorts := map[string]*cohort{}
	for i := range cfg.Queues {
		qc := &cfg.Queues[i]
		q := &queue{name: qc.Name, weight: qc.FairShareWeight(), pods: map[string]*entry{},
			nominal: make([]int64, dims), guard: make([]int64, dims), ceiling: make([]int64, dims), usage: make([]int64, dims)}
		// A model the queue sets no quota for has nominal 0 and no
		// borrowing limit: the queue may borrow it from the cohort like
		// any other resource, never "over a borrowing limit of 0".
		for r := range q.ceiling {
			q.ceiling[r] = math.MaxInt64
		}
		b.fill(q, 0, qc.Nominal, qc.BorrowingLimit, qc.LendingLimit)
		for m, mq := range qc.Models {
			b.fill(q, b.models[m]*perSet, mq.Nominal, mq.BorrowingLimit, mq.LendingLimit)
		}
		key := qc.Cohort
		if key == "" {
			key = "\x00" + qc.Name // a queue without a cohort is a cohort of one
		}
		c := cohorts[key]
		if c == nil {
			c = &cohort{name: qc.Cohort, active: make([]bool, dims), pool: make([]int64, dims), poolUse: make([]int64, dims)}
			cohorts[key] = c
		}
		q.cohort = c
		c.queues = append(c.queues, q)
		for r := range dims {
			c.active[r] = c.active[r] || q.nominal[r] > 0
			c.pool[r] += q.nominal[r] - q.guard[r]
		}
		b.queues[q.name] = q
		b.order = append(b.order, q)
	}
	return b, nil
}

func weightUnits(w float64) int64 { return int64(math.Round(w * scale)) }

// fill sets one resource set (base at offset 0, or a model's) of q.
func (b *Books) fill(q *queue, off int, nominal schedv1.Resources, borrow, lend *schedv1.Resources) {
	vals := func(r schedv1.Resources) [perSet]int64 { return [perSet]int64{r.GPUMemMiB, r.GPUMilli, r.GPUs} }
	n := vals(nominal)
	for r := range perSet {
		q.nominal[off+r] = n[r] * scale
		q.ceiling[off+r] = math.MaxInt64
		q.guard[off+r] = 0 // all of nominal is lendable unless limited
	}
	if borrow != nil {
		bl := vals(*borrow)
		for r := range perSet {
			q.ceiling[off+r] = (n[r] + bl[r]) * scale
		}
	}
	if lend != nil {
		ll := vals(*lend)
		for r := range perSet {
			q.guard[off+r] = (n[r] - ll[r]) * scale
		}
	}
}

// weight is what one GPU of model counts for, × scale.
func (b *Books) weight(model string) int64 {
	if w, ok := b.weights[model]; ok {
		return w
	}
	return b.defWeight
}

// amounts turns a pod's usage into internal amounts on each resource it
// touches: weighted totals, and its model's own set where a queue has one.
func (b *Books) amounts(u Usage) []amount {
	n := int64(u.GPUs)
	mem, milli := n*int64(u.MemMiBPerGPU), n*int64(u.MilliPerGPU)
	var devices int64 // GPUs held as devices, in thousandths of a GPU
	switch {
	case u.MIG:
		devices = milli
	case u.MilliPerGPU >= 1000:
		devices = n * 1000
	}
	w := b.weight(u.Model)
	out := make([]amount, 0, 2*perSet)
	add := func(res int, v int64) {
		if v > 0 {
			out = append(out, amount{res, v})
		}
	}
	add(resMem, mem*scale)
	add(resMilli, milli*w)
	add(resGPUs, devices*w/1000)
	if m := b.models[u.Model]; m > 0 {
		add(m*perSet+resMem, mem*scale)
		add(m*perSet+resMilli, milli*scale)
		add(m*perSet+resGPUs, devices*scale/1000)
	}
	return out
}

// resolve maps a pod's queue name to its queue: unknown or empty names go
// to the default queue; nil means unmanaged.
func (b *Books) resolve(name string) *queue {
	if q, ok := b.queues[name]; ok {
		return q
	}
	return b.queues[b.defaultQueue]
}

// QueueOf is the queue that pods naming queue are booked to, or Unmanaged.
func (b *Books) QueueOf(name string) string {
	if q := b.resolve(name); q != nil {
		return q.name
	}
	return Unmanaged
}

func (b *Books) resName(r int) string {
	if r < perSet {
		return resNames[r]
	}
	for m, i := range b.models {
		if i == r/perSet {
			return m + "." + resNames[r%perSet]
		}
	}
	return fmt.Sprintf("resource %d", r)
}

// contribution is what a queue using u draws from its cohort's pool.
func contribution(u, guard int64) int64 { return max(0, u-guard) }

// Decide says whether a pod of queue using u may start.
func (b *Books) Decide(queueName string, u Usage) Decision {
	q := b.resolve(queueName)
	if q == nil {
		return Decision{Fits, "not in a quota-managed queue"}
	}
	borrowing, short := "", ""
	for _, a := range b.amounts(u) {
		r := a.res
		if !q.cohort.active[r] {
			continue
		}
		after := q.usage[r] + a.v
		if after > q.ceiling[r] {
			return Decision{Held, fmt.Sprintf("queue %s: %s would be %s, over nominal %s + borrowing limit %s",
				q.name, b.resName(r), units(after), units(q.nominal[r]), units(q.ceiling[r]-q.nominal[r]))}
		}
		if after > q.nominal[r] && borrowing == "" {
			borrowing = b.resName(r)
		}
		pool := q.cohort.poolUse[r] - contribution(q.usage[r], q.guard[r]) + contribution(after, q.guard[r])
		if pool > q.cohort.pool[r] && short == "" {
			short = fmt.Sprintf("%s: cohort %q lends %s, %s is lent", b.resName(r), q.cohort.name, units(q.cohort.pool[r]), units(q.cohort.poolUse[r]))
		}
	}
	switch {
	case short == "" && borrowing == "":
		return Decision{Fits, fmt.Sprintf("queue %s: within nominal", q.name)}
	case short == "":
		return Decision{Borrows, fmt.Sprintf("queue %s: borrows %s from cohort %q", q.name, borrowing, q.cohort.name)}
	case borrowing == "":
		return Decision{NeedsReclaim, fmt.Sprintf("queue %s: within nominal but lent out (%s)", q.name, short)}
	}
	return Decision{Held, fmt.Sprintf("queue %s: over nominal on %s and nothing left to borrow (%s)", q.name, borrowing, short)}
}

// WithinGuarantee reports whether a pod of queue using u stays within the
// queue's nominal quota on every limited resource: such a pod may reclaim
// borrowed capacity (Decide says Fits or NeedsReclaim). Unmanaged pods
// have no guarantee.
func (b *Books) WithinGuarantee(queueName string, u Usage) bool {
	q := b.resolve(queueName)
	if q == nil {
		return false
	}
	for _, a := range b.amounts(u) {
		if q.cohort.active[a.res] && q.usage[a.res]+a.v > q.nominal[a.res] {
			return false
		}
	}
	return true
}

// units prints an internal amount in configured units.
func units(v int64) string {
	if v >= math.MaxInt64/2 { // a ceiling without a borrowing limit
		return "unlimited"
	}
	if v%scale == 0 {
		return fmt.Sprint(v / scale)
	}
	return fmt.Sprintf("%.3f", float64(v)/scale)
}

// Add books a started pod. Its ID must be new.
func (b *Books) Add(p Pod) error {
	if _, dup := b.pods[p.ID]; dup {
		return fmt.Errorf("quota: pod %s booked twice", p.ID)
	}
	e := &entry{pod: p, q: b.resolve(p.Queue)}
	if e.q != nil {
		e.pod.Queue = e.q.name
		e.delta = b.amounts(p.Usage)
		b.apply(e.q, e.delta, +1)
		e.q.pods[p.ID] = e
	} else {
		e.pod.Queue = Unmanaged
	}
	b.pods[p.ID] = e
	return nil
}

// Remove unbooks a pod that ended or was evicted.
func (b *Books) Remove(id string) error {
	e, ok := b.pods[id]
	if !ok {
		return fmt.Errorf("quota: pod %s is not booked", id)
	}
	if e.q != nil {
		b.apply(e.q, e.delta, -1)
		delete(e.q.pods, id)
	}
	delete(b.pods, id)
	return nil
}

func (b *Books) apply(q *queue, delta []amount, sign int64) {
	c := q.cohort
	for _, a := range delta {
		r := a.res
		before := contribution(q.usage[r], q.guard[r])
		q.usage[r] += sign * a.v
		c.poolUse[r] += contribution(q.usage[r], q.guard[r]) - before
	}
}

// CohortOf is the cohort of the queue that pods naming queue are booked to
// ("" for a queue without a cohort, or Unmanaged pods).
func (b *Books) CohortOf(queueName string) string {
	if q := b.resolve(queueName); q != nil {
		return q.cohort.name
	}
	return ""
}

// Pod returns a booked pod (its Queue resolved to the queue it is booked to).
func (b *Books) Pod(id string) (Pod, bool) {
	e, ok := b.pods[id]
	if !ok {
		return Pod{}, false
	}
	return e.pod, true
}

// Borrowing reports whether pod id belongs to a queue that uses more than
// its nominal quota of a resource the pod uses: such a pod runs on borrowed
// capacity and may be reclaimed, whatever its class.
func (b *Books) Borrowing(id string) bool {
	e, ok := b.pods[id]
	if !ok || e.q == nil {
		return false
	}
	for _, a := range e.delta {
		if e.q.cohort.active[a.res] && e.q.usage[a.res] > e.q.nominal[a.res] {
			return true
		}
	}
	return false
}

// Share is queue's dominant-resource share of what it borrows: the largest,
// over resources, of (usage above nominal) ÷ (what the cohort lends of it),
// divided by the queue's fair weight. 0 for a queue within its nominal.
func (b *Books) Share(queueName string) float64 {
	q := b.resolve(queueName)
	if q == nil {
		return 0
	}
	return share(q, q.usage)
}

func share(q *queue, usage []int64) float64 {
	best := 0.0
	for r, u := range usage {
		if !q.cohort.active[r] || q.cohort.pool[r] == 0 || u <= q.nominal[r] {
			continue
		}
		best = max(best, float64(u-q.nominal[r])/float64(q.cohort.pool[r]))
	}
	return best / q.weight
}

// Status is a queue's books in configured units (weighted where the
// resource is); per-model resources are named "<model>.<resource>".
type Status struct {
	Name, Cohort   string
	Usage, Nominal map[string]float64
	Borrowed       map[string]float64
	Share          float64
	Pods           int
}

// Status reports one queue.
func (b *Books) Status(queueName string) (Status, bool) {
	q, ok := b.queues[queueName]
	if !ok {
		return Status{}, false
	}
	s := Status{Name: q.name, Cohort: q.cohort.name, Usage: map[string]float64{}, Nominal: map[string]float64{},
		Borrowed: map[string]float64{}, Share: share(q, q.usage), Pods: len(q.pods)}
	for r := range q.usage {
		if !q.cohort.active[r] {
			continue
		}
		n := b.resName(r)
		s.Usage[n] = float64(q.usage[r]) / scale
		s.Nominal[n] = float64(q.nominal[r]) / scale
		s.Borrowed[n] = float64(max(0, q.usage[r]-q.nominal[r])) / scale
	}
	return s, true
}

// Queues lists the queue names in configuration order.
func (b *Books) Queues() []string {
	out := make([]string, len(b.order))
	for i, q := range b.order {
		out[i] = q.name
	}
	return out
}
