package quota

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
)

// TestRandomOperationsKeepLimitsAndGuarantees runs random admissions and
// releases against random quota configurations. After every step, usage
// recomputed from the running pods (independently of the books) must
//   - match the books,
//   - stay within each queue's nominal + borrowing limit,
//   - borrow no more, per cohort, than the lenders' idle capacity within
//     their lending limits;
//
// and a pod within its queue's nominal quota is always admitted, at once or
// after Reclaim's victims leave (the guarantee holds while others borrow).
func TestRandomOperationsKeepLimitsAndGuarantees(t *testing.T) {
	var total [4]int
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			n := runRandom(t, seed, 400)
			for v := range n {
				total[v] += n[v]
			}
		})
	}
	// The run must have exercised every path, or it proves little.
	t.Logf("verdicts: fits %d, borrows %d, reclaimed %d, held %d", total[Fits], total[Borrows], total[NeedsReclaim], total[Held])
	for v, n := range total {
		if n == 0 {
			t.Errorf("no %s verdict in any run", Verdict(v))
		}
	}
}

var models = []string{"", "A100", "H100", "T4"}

func randomConfig(rng *rand.Rand) *schedv1.Config {
	c := schedv1.Default()
	c.ModelWeights = map[string]float64{"H100": 2, "T4": 0.25}
	amount := func(max int64) int64 { return rng.Int64N(max + 1) }
	for i := range 5 {
		q := schedv1.QueueConfig{Name: fmt.Sprintf("q%d", i), Cohort: "c"}
		if i == 4 {
			q.Cohort = "" // a queue alone
		}
		q.Nominal = schedv1.Resources{GPUMilli: amount(8) * 1000, GPUs: amount(8), GPUMemMiB: amount(4) * 40960}
		if rng.IntN(2) == 0 {
			bl := schedv1.Resources{GPUMilli: amount(6) * 1000, GPUs: amount(6), GPUMemMiB: amount(2) * 40960}
			// A limit on a resource the queue has no nominal amount of may
			// limit nothing in its cohort (Validate rejects that): keep
			// limits where the queue's own nominal makes them count.
			n := q.Nominal
			bl.GPUMilli *= min(n.GPUMilli, 1)
			bl.GPUs *= min(n.GPUs, 1)
			bl.GPUMemMiB *= min(n.GPUMemMiB, 1)
			q.BorrowingLimit = &bl
		}
		if rng.IntN(2) == 0 {
			n := q.Nominal
			q.LendingLimit = &schedv1.Resources{GPUMilli: amount(n.GPUMilli/1000) * 1000, GPUs: amount(n.GPUs), GPUMemMiB: amount(n.GPUMemMiB/40960) * 40960}
		}
		if rng.IntN(3) == 0 {
			q.Models = map[string]schedv1.ModelQuota{"H100": {Nominal: schedv1.Resources{GPUs: amount(4)}}}
		}
		if rng.IntN(3) == 0 {
			q.FairWeight = 0.5 + rng.Float64()
		}
		c.Queues = append(c.Queues, q)
	}
	return c
}

func randomUsage(rng *rand.Rand) Usage {
	u := Usage{Model: models[rng.IntN(len(models))]}
	if rng.IntN(2) == 0 {
		u.GPUs, u.MilliPerGPU = 1+rng.IntN(4), 1000
	} else {
		u.GPUs, u.MilliPerGPU = 1, int32(100*(1+rng.IntN(9)))
	}
	if rng.IntN(2) == 0 {
		u.MemMiBPerGPU = int32(rng.IntN(4) * 10240)
	}
	return u
}

func runRandom(t *testing.T, seed uint64, steps int) (verdicts [4]int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	cfg := randomConfig(rng)
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	running := map[string]Pod{}
	var ids []string
	remove := func(id string) {
		if err := b.Remove(id); err != nil {
			t.Fatal(err)
		}
		delete(running, id)
	}
	admit := func(p Pod) {
		if err := b.Add(p); err != nil {
			t.Fatal(err)
		}
		running[p.ID] = p
		ids = append(ids, p.ID)
	}
	for step := range steps {
		if rng.IntN(10) < 6 || len(running) == 0 {
			p := Pod{ID: fmt.Sprintf("p%d", step), Queue: fmt.Sprintf("q%d", rng.IntN(5)), Class: rng.IntN(4),
				Start: t0.Add(time.Duration(step) * time.Second), Usage: randomUsage(rng)}
			d := b.Decide(p.Queue, p.Usage)
			verdicts[d.Verdict]++
			switch d.Verdict {
			case Fits, Borrows:
				admit(p)
			case NeedsReclaim:
				victims, err := b.Reclaim(p.Queue, p.Class, p.Usage)
				if err != nil {
					t.Fatalf("step %d: guarantee not restored: %v", step, err)
				}
				for _, v := range victims {
					if v.Queue == p.Queue {
						t.Fatalf("step %d: reclaimed %s from the requester's own queue", step, v.ID)
					}
					remove(v.ID)
				}
				if d := b.Decide(p.Queue, p.Usage); d.Verdict != Fits {
					t.Fatalf("step %d: after reclaiming %d pods: %s (%s)", step, len(victims), d.Verdict, d.Reason)
				}
				admit(p)
			case Held:
				if victims, err := b.Reclaim(p.Queue, p.Class, p.Usage); err == nil {
					for _, v := range victims {
						if v.Class < p.Class {
							t.Fatalf("step %d: fair-share reclaim took %s of class %d for class %d", step, v.ID, v.Class, p.Class)
						}
						remove(v.ID)
					}
					if d := b.Decide(p.Queue, p.Usage); !d.Admit() {
						t.Fatalf("step %d: after fair reclaim: %s (%s)", step, d.Verdict, d.Reason)
					}
					admit(p)
				}
			}
		} else {
			for {
				id := ids[rng.IntN(len(ids))]
				if _, ok := running[id]; ok {
					remove(id)
					break
				}
			}
		}
		checkInvariants(t, step, cfg, b, running)
	}
	return verdicts
}

// checkInvariants recomputes usage from the pods with the configuration's
// own numbers, in configured units.
func checkInvariants(t *testing.T, step int, cfg *schedv1.Config, b *Books, running map[string]Pod) {
	t.Helper()
	usage := map[string]map[string]float64{}
	for _, q := range cfg.Queues {
		usage[q.Name] = map[string]float64{}
	}
	for _, p := range running {
		u, w := p.Usage, cfg.ModelWeight(p.Usage.Model)
		m := usage[p.Queue]
		n := float64(u.GPUs)
		m["gpuMemMiB"] += n * float64(u.MemMiBPerGPU)
		m["gpuMilli"] += n * float64(u.MilliPerGPU) * w
		if u.MilliPerGPU == 1000 {
			m["gpus"] += n * w
			if u.Model == "H100" {
				m["H100.gpus"] += n
			}
		}
		if u.Model == "H100" {
			m["H100.gpuMilli"] += n * float64(u.MilliPerGPU)
			m["H100.gpuMemMiB"] += n * float64(u.MemMiBPerGPU)
		}
	}
	type lim struct{ nominal, ceiling, lend float64 }
	limits := func(q schedv1.QueueConfig, r string) lim {
		get := func(x *schedv1.Resources) float64 {
			switch r {
			case "gpuMemMiB":
				return float64(x.GPUMemMiB)
			case "gpuMilli":
				return float64(x.GPUMilli)
			case "gpus":
				return float64(x.GPUs)
			}
			return 0
		}
		nom, bl, ll := q.Nominal, q.BorrowingLimit, q.LendingLimit
		if r == "H100.gpus" || r == "H100.gpuMilli" || r == "H100.gpuMemMiB" {
			r = r[len("H100."):]
			mq := q.Models["H100"]
			nom, bl, ll = mq.Nominal, mq.BorrowingLimit, mq.LendingLimit
		}
		l := lim{nominal: get(&nom), ceiling: math.Inf(1), lend: get(&nom)}
		if bl != nil {
			l.ceiling = l.nominal + get(bl)
		}
		if ll != nil {
			l.lend = get(ll)
		}
		return l
	}
	const eps = 1e-6
	cohorts := map[string][]schedv1.QueueConfig{}
	for _, q := range cfg.Queues {
		key := q.Cohort
		if key == "" {
			key = "alone:" + q.Name
		}
		cohorts[key] = append(cohorts[key], q)
	}
	for _, members := range cohorts {
		for _, r := range []string{"gpuMemMiB", "gpuMilli", "gpus", "H100.gpuMemMiB", "H100.gpuMilli", "H100.gpus"} {
			active := false
			for _, q := range members {
				active = active || limits(q, r).nominal > 0
			}
			if !active {
				continue
			}
			borrowed, lendable := 0.0, 0.0
			for _, q := range members {
				l, u := limits(q, r), usage[q.Name][r]
				if s, _ := b.Status(q.Name); math.Abs(s.Usage[r]-u) > eps {
					t.Fatalf("step %d: queue %s %s: books say %v, pods sum to %v", step, q.Name, r, s.Usage[r], u)
				}
				if u > l.ceiling+eps {
					t.Fatalf("step %d: queue %s uses %v %s, over nominal+borrowing limit %v", step, q.Name, u, r, l.ceiling)
				}
				if u > l.nominal {
					borrowed += u - l.nominal
				} else {
					lendable += math.Min(l.lend, l.nominal-u)
				}
			}
			if borrowed > lendable+eps {
				t.Fatalf("step %d: %s: cohort borrows %v but its lenders have only %v idle within their lending limits", step, r, borrowed, lendable)
			}
		}
	}
}
