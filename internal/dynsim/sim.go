package dynsim

import (
	"container/heap"
	"errors"
	"fmt"
	"io"
	"time"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/engine"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
	"github.com/tessera-gpu/tessera/internal/quota"
)

// Config is one simulation run.
type Config struct {
	Mode Mode
	// Tick is how often a scheduling cycle runs (when anything changed).
	Tick time.Duration
	// Drain bounds the simulated time after the last arrival; pods still
	// pending then are reported as waiting (their wait so far counts).
	Drain time.Duration
	// Warmup: arrivals before it are not reported (see Options.Warmup).
	Warmup time.Duration
	// Deadline per class (0: none): a pod still pending that long after it
	// arrived is dropped.
	Deadline [priority.NumClasses]time.Duration
	Policy   string
	// Teams are the teams' names and guaranteed shares of the cluster's GPU
	// compute (used when the mode has quotas).
	Teams []TeamQuota
	// PodLog, when set, gets one CSV row per reported pod that started
	// (podLogHeader): which pods make a class's longest waits and what
	// happened to them.
	PodLog io.Writer
}

// TeamQuota is one team's guarantee, a share of the GPU compute.
type TeamQuota struct {
	Name  string
	Share float64
}

// quotaConfig is every team a queue in one cohort, nominal = its share of
// the cluster's GPU compute; no borrowing or lending limits.
func quotaConfig(teams []TeamQuota, capacityMilli int64) *schedv1.Config {
	c := schedv1.Default()
	for _, t := range teams {
		c.Queues = append(c.Queues, schedv1.QueueConfig{Name: t.Name, Cohort: "cluster",
			Nominal: schedv1.Resources{GPUMilli: int64(t.Share * float64(capacityMilli))}})
	}
	return c
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type runningJob struct {
	job   *Job
	epoch int // bumps when the job is evicted: its old end is stale
	gpus  float64
	since time.Duration
}

// completion is a pending end of a running job.
type completion struct {
	at    time.Duration
	key   string
	epoch int
}

type completions []completion

func (c completions) Len() int { return len(c) }
func (c completions) Less(i, j int) bool {
	if c[i].at != c[j].at {
		return c[i].at < c[j].at
	}
	return c[i].key < c[j].key
}
func (c completions) Swap(i, j int) { c[i], c[j] = c[j], c[i] }
func (c *completions) Push(x any)   { *c = append(*c, x.(completion)) }
func (c *completions) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// Simulate replays jobs (sorted by arrival) on a cluster of nodes.
func Simulate(nodes []partition.NodeSpec, jobs []Job, horizon time.Duration, cfg Config) (*Result, error) {
	if cfg.Tick <= 0 {
		return nil, errors.New("tick must be positive")
	}
	c, err := placement.NewCluster(nodes)
	if err != nil {
		return nil, err
	}
	reqs := make([]placement.Request, 0, len(jobs))
	for i := range jobs {
		reqs = append(reqs, jobs[i].Request)
	}
	pol, err := placement.NewPolicy(cfg.Policy, c, placement.Options{Workload: placement.NewWorkload(c, reqs, 0.95)})
	if err != nil {
		return nil, err
	}
	var admit engine.Admission
	if cfg.Mode.Quotas && len(cfg.Teams) > 0 {
		books, err := quota.New(quotaConfig(cfg.Teams, c.GPUCapacityMilli()))
		if err != nil {
			return nil, err
		}
		admit = &engine.QuotaAdmission{Books: books, Cluster: c}
	}
	eng, err := engine.New(cfg.Mode.Engine, placement.NewScheduler(c, pol, false), admit)
	if err != nil {
		return nil, err
	}
	s := &state{cfg: cfg, eng: eng, byKey: map[string]*Job{}, running: map[string]*runningJob{}, epochs: map[string]int{},
		waitAt: map[string]int{}, evictedAt: map[string]time.Duration{}, records: map[string]*podRecord{},
		res: newResult(cfg.Mode.Name, c.GPUCapacityMilli(), cfg.Warmup, horizon)}
	if err := s.run(jobs, horizon); err != nil {
		return nil, err
	}
	return s.res, nil
}

type state struct {
	cfg     Config
	eng     *engine.Engine
	byKey   map[string]*Job
	running map[string]*runningJob
	epochs  map[string]int
	// waitAt is, per job that started once, its entry in its class's waits
	// (-1: not reported); evictedAt is when a requeued job was evicted.
	// A job's wait is all the time it spent pending: arrival to first
	// start plus every eviction to restart.
	waitAt    map[string]int
	evictedAt map[string]time.Duration
	records   map[string]*podRecord // for Config.PodLog
	ends      completions
	res       *Result
	now       time.Duration
	allocd    float64 // GPUs allocated now
}

func (s *state) run(jobs []Job, horizon time.Duration) error {
	next := 0
	end := horizon + s.cfg.Drain
	for s.now = 0; s.now <= end; {
		changed := false
		for ; next < len(jobs) && jobs[next].Arrive <= s.now; next++ {
			s.submit(&jobs[next])
			changed = true
		}
		for len(s.ends) > 0 && s.ends[0].at <= s.now {
			e := heap.Pop(&s.ends).(completion)
			if rj, ok := s.running[e.key]; ok && rj.epoch == e.epoch {
				s.finish(e.key, rj)
				changed = true
			}
		}
		if changed || s.eng.Pending() > 0 {
			s.eng.Cycle(epoch.Add(s.now))
			s.consume()
		}
		if next == len(jobs) && s.eng.Pending() == 0 && len(s.running) == 0 {
			break
		}
		s.advance(jobs, next)
	}
	if s.cfg.PodLog != nil {
		if err := s.writePodLog(s.cfg.PodLog); err != nil {
			return err
		}
	}
	s.res.finish(s, horizon)
	return nil
}

// advance moves time to the next tick, or straight to the next arrival or
// completion when nothing is pending (an idle stretch costs nothing).
func (s *state) advance(jobs []Job, next int) {
	step := s.now + s.cfg.Tick
	if s.eng.Pending() == 0 {
		far := time.Duration(1<<62 - 1)
		if next < len(jobs) {
			far = jobs[next].Arrive
		}
		if len(s.ends) > 0 {
			far = min(far, s.ends[0].at)
		}
		step = max(step, far)
	}
	s.account(step)
	s.now = step
}

// account integrates allocated GPUs over [now, to) within the horizon.
func (s *state) account(to time.Duration) {
	from, until := max(s.now, s.res.warmup), min(to, s.res.horizon)
	if from < until {
		s.res.gpuSecondsAlloc += s.allocd * (until - from).Seconds()
	}
}

func (s *state) submit(j *Job) {
	s.byKey[j.Name] = j
	class := j.Class
	if !s.cfg.Mode.Priorities {
		class = priority.P2 // one class for everyone
	}
	p := &engine.Pod{Key: j.Name, Request: j.Request, Class: class, Team: j.Team, Submitted: epoch.Add(j.Arrive),
		Preemptible: s.cfg.Mode.Preemptible[j.Class], MinRun: s.cfg.Mode.MinRun}
	if d := s.cfg.Deadline[j.Class]; d > 0 {
		p.Deadline = epoch.Add(j.Arrive + d)
	}
	if err := s.eng.Submit(p); err != nil {
		s.res.rejected++
		return
	}
	if s.reported(j) {
		s.res.class(j.Class).arrived++
	}
}

// reported: the job arrived after the warm-up.
func (s *state) reported(j *Job) bool { return j.Arrive >= s.cfg.Warmup }

func (s *state) finish(key string, rj *runningJob) {
	if err := s.eng.Complete(key); err != nil {
		panic(fmt.Sprintf("dynsim: %v", err))
	}
	s.allocd -= rj.gpus
	delete(s.running, key)
	if s.reported(rj.job) {
		s.res.class(rj.job.Class).completed++
	}
}

// consume applies the engine's events to the simulation.
func (s *state) consume() {
	for _, ev := range s.eng.Events() {
		j := s.byKey[ev.Pod.Key]
		s.record(j, ev)
		cs := s.res.class(j.Class)
		if !s.reported(j) {
			cs = &ClassStats{} // simulated, not reported
		}
		switch ev.Kind {
		case engine.Placed:
			s.countWait(j, cs)
			s.epochs[j.Name]++
			rj := &runningJob{job: j, epoch: s.epochs[j.Name], gpus: j.GPUs(), since: s.now}
			s.running[j.Name] = rj
			s.allocd += rj.gpus
			heap.Push(&s.ends, completion{at: s.now + j.Run, key: j.Name, epoch: rj.epoch})
		case engine.Preempted:
			rj := s.running[j.Name]
			delete(s.running, j.Name)
			s.allocd -= rj.gpus
			cs.preempted++
			s.evictedAt[j.Name] = s.now
			cs.gpuHoursLost += rj.gpus * ev.Ran.Hours()
			if ev.Ran < ev.Pod.MinRun {
				s.res.minRunViolations++
			}
		case engine.Dropped:
			cs.dropped++
			if !s.reported(j) {
				break
			}
			if w, started := s.pendingWait(j, cs); started {
				cs.waits[s.waitAt[j.Name]] = w // evicted, then dropped: its entry holds all its waiting
			} else {
				cs.droppedWaits = append(cs.droppedWaits, w)
			}
		case engine.Escalated:
			cs.escalated++
		}
	}
}

// record keeps what the pod log reports beyond waits.
func (s *state) record(j *Job, ev engine.Event) {
	if s.cfg.PodLog == nil {
		return
	}
	r := s.records[j.Name]
	if r == nil {
		r = &podRecord{firstStart: -1}
		s.records[j.Name] = r
	}
	switch ev.Kind {
	case engine.Placed:
		if r.firstStart < 0 {
			r.firstStart = s.now
		}
	case engine.Preempted:
		r.evictions++
		if ev.By != nil && ev.By.Class.Valid() {
			r.evictedBy[ev.By.Class]++
		}
	case engine.Reserved:
		r.reserved = true
	}
}

// countWait adds the pending episode that ends now to j's wait: the first
// one (arrival to start) makes j's entry, a later one (eviction to restart)
// adds to it, so a preempted pod's second wait counts.
func (s *state) countWait(j *Job, cs *ClassStats) {
	at, started := s.waitAt[j.Name]
	if !started {
		s.waitAt[j.Name] = -1
		if s.reported(j) {
			s.waitAt[j.Name] = len(cs.waits)
		}
		cs.waits = append(cs.waits, s.now-j.Arrive)
		return
	}
	if at >= 0 {
		cs.waits[at] += s.now - s.evictedAt[j.Name]
	}
	delete(s.evictedAt, j.Name)
}

// pendingWait is how long j, pending now, has waited in all: its episodes
// so far plus the current one; and whether it started before.
func (s *state) pendingWait(j *Job, cs *ClassStats) (time.Duration, bool) {
	at, started := s.waitAt[j.Name]
	if !started {
		return s.now - j.Arrive, false
	}
	return cs.waits[at] + s.now - s.evictedAt[j.Name], true
}
