package computetest

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// shareCase is one accuracy scenario: tenants with these shares, all
// saturating the device with kernels of one size (microseconds, or "mixed").
type shareCase struct {
	shares []uint32
	kernel string
	hard   bool
	paths  []string   // launch path per tenant (default "kernel")
	noHook bool       // tenants without the hook, as the noise floor (the device's own 1/n split)
	args   []string   // extra tenant arguments
	argsOf [][]string // extra arguments of tenant i only
	// baseline: the arbiter as before its loop was raised and its turns
	// carried deadlines (TESSERA_BENCH_BASELINE: measured beside each case)
	baseline bool
}

func (c shareCase) name() string {
	var s []string
	for _, p := range c.shares {
		s = append(s, strconv.Itoa(int(p)))
	}
	pol := "guaranteed"
	if c.hard {
		pol = "hard"
	}
	name := strings.Join(s, "_") + "/" + c.kernel + "us/" + pol
	if c.paths != nil {
		name += "/" + strings.Join(c.paths, "+")
	}
	if c.noHook {
		name = strings.Join(s, "_") + "/" + c.kernel + "us/nohook"
	}
	if c.baseline {
		name += "/baseline"
	}
	return name
}

// result is a case's worst error, in percentage points of device busy time.
type result struct {
	err1s, err100ms float64
	// The same over the windows in which this process (the arbiter's) was
	// never kept from running for more than stallLimit: what the design
	// does when the machine lets it decide on time.
	err1sSteady, err100msSteady float64
	steady1s, steady100ms       int // such windows
	// The same over the steady windows in which no tenant waited for a CPU
	// more than starvedFrac of the window either: what the design does when
	// the host runs both it and the tenants.
	err1sClean, err100msClean float64
	clean1s, clean100ms       int
	got                       []float64 // whole-run shares
	util                      float64   // device busy / wall over the measured span
	billedPct                 []float64 // each tenant's part of what the hooks billed
	billRatio                 []float64 // billed ÷ what the device ran for the tenant
}

// starvedIn: the largest part of the window a..b that a tenant waited for a
// CPU (0 when not sampled).
func starvedIn(a, b sample) float64 {
	if b.at <= a.at {
		return 0
	}
	worst := 0.0
	for pid, w := range b.cpuWait {
		if w0, ok := a.cpuWait[pid]; ok && w > w0 {
			worst = math.Max(worst, float64(w-w0)/float64(b.at-a.at))
		}
	}
	return worst
}

// stallLimit: a window in which the arbiter's process was kept from running
// longer than this is not steady (a turn then lasts as long as the stall).
const stallLimit = 10 * time.Millisecond

func maxStall(ss []sample) time.Duration {
	var m time.Duration
	for _, s := range ss {
		m = max(m, s.stall)
	}
	return m
}

// billing is each group's part of the time its hooks billed between a and
// b (percent), and billed ÷ run on the device per group.
func billing(a, b sample, groups [][]int) (pct, ratio []float64) {
	if len(a.billed) != len(groups) || len(b.billed) != len(groups) {
		return nil, nil
	}
	var total float64
	for i := range groups {
		d := float64(b.billed[i] - min(a.billed[i], b.billed[i]))
		pct = append(pct, d)
		total += d
		var run float64
		for _, pid := range groups[i] {
			run += float64(b.byPID[pid] - min(a.byPID[pid], b.byPID[pid]))
		}
		ratio = append(ratio, d/math.Max(run, 1))
	}
	for i := range pct {
		pct[i] = 100 * pct[i] / math.Max(total, 1)
	}
	return pct, ratio
}

// benchMode: full durations (make bench) instead of the short ones of make test.
func benchMode() bool { return os.Getenv("TESSERA_BENCH") != "" }

func runShareCase(t *testing.T, c shareCase, seconds float64) result {
	n := newNode(t)
	kind := arbiterDefault
	if c.baseline {
		kind = arbiterBaseline
	}
	n.startArbiterAs(defaultPolicy(), kind)
	var groups [][]int
	var procs []*proc
	var cts []*container
	for i, pct := range c.shares {
		ct := n.container(fmt.Sprintf("t%d", i), pct, c.hard, 2)
		cts = append(cts, ct)
		path := "kernel"
		if c.paths != nil {
			path = c.paths[i]
		}
		in := ct
		if c.noHook {
			in = nil
		}
		args := append([]string{path, c.kernel, strconv.FormatFloat(seconds+0.5, 'f', 1, 64)}, c.args...)
		if i < len(c.argsOf) {
			args = append(args, c.argsOf[i]...)
		}
		p := n.start(in, args...)
		procs = append(procs, p)
		groups = append(groups, []int{p.pid})
	}
	warm := 400 * time.Millisecond
	time.Sleep(warm)
	rec := n.record(100*time.Millisecond, cts...)
	time.Sleep(time.Duration(seconds * float64(time.Second)))
	samples := rec.finish()
	for _, p := range procs {
		p.wait(t)
	}
	var r result
	worst := func(a, b sample) float64 {
		w := 0.0
		for i, g := range shares(a, b, groups) {
			w = math.Max(w, math.Abs(g-float64(c.shares[i])))
		}
		return w
	}
	var windows []string
	for i := 0; i+1 < len(samples); i++ {
		r.err100ms = math.Max(r.err100ms, worst(samples[i], samples[i+1]))
		if samples[i+1].stall <= stallLimit {
			r.err100msSteady = math.Max(r.err100msSteady, worst(samples[i], samples[i+1]))
			r.steady100ms++
			if starvedIn(samples[i], samples[i+1]) <= starvedFrac {
				r.err100msClean = math.Max(r.err100msClean, worst(samples[i], samples[i+1]))
				r.clean100ms++
			}
		}
		bp, _ := billing(samples[i], samples[i+1], groups)
		windows = append(windows, fmt.Sprintf("%.0f(b%.0f)", shares(samples[i], samples[i+1], groups), bp))
	}
	t.Logf("100 ms windows, device share (billed share) of each tenant: %s", strings.Join(windows, " "))
	for i := 0; i+10 < len(samples); i += 10 {
		r.err1s = math.Max(r.err1s, worst(samples[i], samples[i+10]))
		if maxStall(samples[i+1:i+11]) <= stallLimit {
			r.err1sSteady = math.Max(r.err1sSteady, worst(samples[i], samples[i+10]))
			r.steady1s++
			if starvedIn(samples[i], samples[i+10]) <= starvedFrac {
				r.err1sClean = math.Max(r.err1sClean, worst(samples[i], samples[i+10]))
				r.clean1s++
			}
		}
	}
	first, last := samples[0], samples[len(samples)-1]
	r.got = shares(first, last, groups)
	r.billedPct, r.billRatio = billing(first, last, groups)
	if last.at > first.at {
		r.util = float64(last.device-first.device) / float64(last.at-first.at)
	}
	return r
}

func TestShareAccuracy(t *testing.T) {
	seconds := 1.2
	cases := []shareCase{{shares: []uint32{30, 70}, kernel: "1000"}, {shares: []uint32{25, 75}, kernel: "1000", hard: true}}
	if benchMode() {
		seconds = 3
		cases = nil
		for _, sh := range [][]uint32{{10, 90}, {25, 75}, {30, 30, 40}, {10, 20, 30, 40}} {
			for _, k := range []string{"50", "1000", "10000", "mixed"} {
				for _, hard := range []bool{false, true} {
					cases = append(cases, shareCase{shares: sh, kernel: k, hard: hard})
				}
			}
		}
	}
	cases = append(cases, shareCase{shares: []uint32{30, 70}, kernel: "1000", paths: []string{"graph", "ex"}})
	if benchMode() && os.Getenv("TESSERA_BENCH_BASELINE") != "" {
		// Each case right after its baseline, so that both see the same
		// load on a shared machine.
		var both []shareCase
		for _, c := range cases {
			b := c
			b.baseline = true
			both = append(both, b, c)
		}
		cases = both
	}
	var maxErr, maxErr100, maxSteady, maxSteady100, maxBill, maxClean, maxClean100 float64
	var steady, steady100, clean, clean100 int
	var summary [2]struct{ err1s, err100ms []float64 } // [0] default, [1] baseline
	defer func() {
		for i, suffix := range []string{"", ".baseline"} {
			s := summary[i]
			if len(s.err1s) == 0 {
				continue
			}
			fmt.Printf("BENCH hook.share_error_pp_median%s %.2f pp (median over %d cases of each case's worst 1 s window; worst %.2f)\n",
				suffix, median(s.err1s), len(s.err1s), slices.Max(s.err1s))
			fmt.Printf("BENCH hook.share_error_100ms_pp_median%s %.2f pp (median over cases of each case's worst 100 ms window; worst %.2f)\n",
				suffix, median(s.err100ms), slices.Max(s.err100ms))
		}
	}()
	for _, c := range cases {
		t.Run(c.name(), func(t *testing.T) {
			measure := func() error {
				r := runShareCase(t, c, seconds)
				t.Logf("shares %v → %.1f (1 s error %.1f pp, 100 ms %.1f pp, device busy %.0f%%); billed %.1f, billed÷ran %.2f; "+
					"steady windows (arbiter never stalled > %v): 1 s %.1f pp (%d), 100 ms %.1f pp (%d)",
					c.shares, r.got, r.err1s, r.err100ms, 100*r.util, r.billedPct, r.billRatio,
					stallLimit, r.err1sSteady, r.steady1s, r.err100msSteady, r.steady100ms)
				t.Logf("steady windows in which no tenant waited for a CPU > %.0f%% of the window: 1 s %.1f pp (%d), 100 ms %.1f pp (%d)",
					100*starvedFrac, r.err1sClean, r.clean1s, r.err100msClean, r.clean100ms)
				fmt.Printf("BENCH hook.share_error_pp.%s %.2f pp\n", strings.ReplaceAll(c.name(), "/", "."), r.err1s)
				fmt.Printf("BENCH hook.share_error_100ms_pp.%s %.2f pp\n", strings.ReplaceAll(c.name(), "/", "."), r.err100ms)
				s := &summary[0]
				if c.baseline {
					s = &summary[1]
				}
				s.err1s, s.err100ms = append(s.err1s, r.err1s), append(s.err100ms, r.err100ms)
				if c.baseline {
					return nil // reported, never judged: the maxima below are the default's
				}
				maxErr, maxErr100 = math.Max(maxErr, r.err1s), math.Max(maxErr100, r.err100ms)
				maxSteady, maxSteady100 = math.Max(maxSteady, r.err1sSteady), math.Max(maxSteady100, r.err100msSteady)
				steady, steady100 = steady+r.steady1s, steady100+r.steady100ms
				maxClean, maxClean100 = math.Max(maxClean, r.err1sClean), math.Max(maxClean100, r.err100msClean)
				clean, clean100 = clean+r.clean1s, clean100+r.clean100ms
				bill := 0.0
				for _, b := range r.billRatio {
					bill = math.Max(bill, math.Abs(b-1))
				}
				maxBill = math.Max(maxBill, bill)
				// Billing is exact whatever the load (each hook measures its
				// own time once turns never overlap): before hand-overs waited
				// for the previous holder's work, 25/75 hard billed its small
				// tenant 1.54x what it ran.
				if bill > 0.1 {
					return fmt.Errorf("a tenant was billed %.2f of what it ran (%.2f), want 1 ± 0.1", 1+bill, r.billRatio)
				}
				// Shares asserted loosely: short runs on a loaded 2-core machine,
				// where the arbiter's process is now and then not run for tens of
				// ms (a turn lasts as long). Without enforcement 25/75 is off by
				// ~25 pp.
				if r.err1s > 6 {
					return fmt.Errorf("worst 1 s share error %.1f pp, want ≤ 6 (target 2)", r.err1s)
				}
				return nil
			}
			if benchMode() {
				// Every case once; how long its tenants waited for a CPU
				// is logged beside it (the host's part of the error).
				starvation.Lock()
				starvation.watch, starvation.worst = fakegpu.WatchStarvation(), 0
				starvation.Unlock()
				err := measure()
				observeStarvation()
				starvation.Lock()
				t.Logf("tenants waited for a CPU up to %.0f%% of their run", 100*starvation.worst)
				starvation.watch = nil
				starvation.Unlock()
				if err != nil {
					t.Error(err)
				}
				return
			}
			measureUnstarved(t, measure)
		})
	}
	fmt.Printf("BENCH hook.share_error_pp_max %.2f pp\n", maxErr)
	fmt.Printf("BENCH hook.share_error_100ms_pp_max %.2f pp\n", maxErr100)
	fmt.Printf("BENCH hook.share_error_steady_pp_max %.2f pp (%d windows of 1 s without a stall > %v)\n", maxSteady, steady, stallLimit)
	fmt.Printf("BENCH hook.share_error_steady_100ms_pp_max %.2f pp (%d windows of 100 ms)\n", maxSteady100, steady100)
	fmt.Printf("BENCH hook.share_error_clean_pp_max %.2f pp (%d steady windows of 1 s in which no tenant waited for a CPU > %.0f%%)\n",
		maxClean, clean, 100*starvedFrac)
	fmt.Printf("BENCH hook.share_error_clean_100ms_pp_max %.2f pp (%d such windows of 100 ms)\n", maxClean100, clean100)
	fmt.Printf("BENCH hook.billing_error_max %.3f\n", maxBill)
}

// TestShareNoiseFloor measures, exactly as TestShareAccuracy does, two
// tenants without the hook that the device splits 50/50 by itself: once with
// deep queues (what the measurement alone adds: window edges cutting slices)
// and once with the shallow queue a throttled tenant has (about 1 ms in
// flight, refilled when it completes: every descheduling of the process on
// this loaded machine shows as lost share). The accuracy targets are judged
// against the second.
func TestShareNoiseFloor(t *testing.T) {
	seconds := 1.2
	if benchMode() {
		seconds = 3
	}
	for _, c := range []struct {
		name  string
		depth string
	}{{"deep", "sync=64"}, {"shallow", "sync=1"}} {
		t.Run(c.name, func(t *testing.T) {
			sc := shareCase{shares: []uint32{50, 50}, kernel: "1000", noHook: true, args: []string{c.depth}}
			r := runShareCase(t, sc, seconds)
			t.Logf("no hook, %s queues: %.1f (1 s error %.1f pp, 100 ms %.1f pp, device busy %.0f%%)", c.name, r.got, r.err1s, r.err100ms, 100*r.util)
			fmt.Printf("BENCH hook.share_noise_floor_pp.%s %.2f pp\n", c.name, r.err1s)
			fmt.Printf("BENCH hook.share_noise_floor_100ms_pp.%s %.2f pp\n", c.name, r.err100ms)
			// The device itself splits two saturating processes evenly
			// (test/fakegpu TestTimeTwoTenantsSplitEvenly); deep queues must
			// show it, or the measurement is broken.
			if c.name == "deep" && r.err1s > 5 {
				t.Errorf("two tenants without the hook, deep queues: 1 s error %.1f pp, want ≤ 5", r.err1s)
			}
		})
	}
}

// TestHostWorkBetweenLaunches: tenants whose thread is away from the GPU
// for 6 ms after each 10 ms kernel (host work between launches, as a
// training step's data preparation) still saturate the device, and are not
// idle meanwhile: the hook stamps their demand ahead by the work they have in
// flight. Before, a tenant looked idle 5 ms into its host work while its
// kernel ran, its turn passed on without waiting for that kernel, the next
// holder's kernels ran beside it on the time-sliced device, and both were
// billed for the overlap: 10/90 came out at 24/76, the small tenant billed
// 1.4× what it ran.
func TestHostWorkBetweenLaunches(t *testing.T) {
	seconds := 2.0
	if benchMode() {
		seconds = 3
	}
	c := shareCase{shares: []uint32{10, 90}, kernel: "10000", args: []string{"host=6000"}}
	measureUnstarved(t, func() error {
		r := runShareCase(t, c, seconds)
		t.Logf("shares %v with 6 ms of host work after each launch → %.1f (1 s error %.1f pp); billed÷ran %.2f",
			c.shares, r.got, r.err1s, r.billRatio)
		fmt.Printf("BENCH hook.share_error_pp.10_90.10000us.host6ms %.2f pp\n", math.Abs(r.got[0]-10))
		if math.Abs(r.got[0]-10) > 4 {
			return fmt.Errorf("10/90 with host work got %.1f, want 10 ± 4 (target 2)", r.got)
		}
		// (A holder the OS does not run between opening a burst and
		// launching into it is billed that time too: loose for a loaded
		// machine.)
		for _, b := range r.billRatio {
			if b > 1.25 {
				return fmt.Errorf("a tenant was billed %.2f of what it ran, want ≤ 1.25", r.billRatio)
			}
		}
		return nil
	})
}

// TestParkedThreadKeepsShares: each tenant has a thread that launched once
// and then waits on the host for good (PyTorch's autograd thread between
// backward passes) beside the thread that saturates the GPU. Its open burst
// was counted in flight until the thread next called the hook — never — so
// every bill of its container was divided by that count and every hand-over
// away from it waited two quanta: guaranteed 30/70 came out 46/54 with the
// device 46 % busy. The sequence's word in the core region now expires once
// its work should be done (tessera_abi.h, "Launch sequences").
func TestParkedThreadKeepsShares(t *testing.T) {
	seconds := 2.0
	if benchMode() {
		seconds = 3
	}
	for _, c := range []shareCase{
		{shares: []uint32{30, 70}, kernel: "1000", args: []string{"parked=1"}},
		{shares: []uint32{30, 70}, kernel: "1000", argsOf: [][]string{{"parked=1"}}},
	} {
		name := "both"
		if len(c.argsOf) > 0 {
			name = "small"
		}
		t.Run(name, func(t *testing.T) { parkedCase(t, c, name, seconds) })
	}
}

func parkedCase(t *testing.T, c shareCase, which string, seconds float64) {
	measureUnstarved(t, func() error {
		r := runShareCase(t, c, seconds)
		t.Logf("shares %v, parked threads in %s → %.1f (1 s error %.1f pp), device busy %.0f %%, billed÷ran %.2f",
			c.shares, which, r.got, r.err1s, 100*r.util, r.billRatio)
		fmt.Printf("BENCH hook.share_error_pp.30_70.1000us.parked_%s %.2f pp\n", which, math.Abs(r.got[0]-30))
		fmt.Printf("BENCH hook.parked_%s_busy_pct %.1f %%\n", which, 100*r.util)
		if math.Abs(r.got[0]-30) > 5 {
			return fmt.Errorf("30/70 with parked threads got %.1f, want 30 ± 5 (target 2)", r.got)
		}
		if r.util < 0.75 {
			return fmt.Errorf("device busy %.0f %% with parked threads, want ≥ 75 %% (two saturating tenants)", 100*r.util)
		}
		for _, b := range r.billRatio {
			if b < 0.85 || b > 1.15 {
				return fmt.Errorf("a tenant was billed %.2f of what it ran, want 1 ± 0.15", r.billRatio)
			}
		}
		return nil
	})
}
