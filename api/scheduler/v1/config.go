package v1

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Default returns the configuration used for every absent field.
//
// Defaults: PriorityClass values ≥ 1,000,000 are P0, ≥ 100,000 P1,
// ≥ 1,000 P2; lower values, and pods with neither a value nor the
// annotation, get DefaultClass P2 (work nobody classified can wait but is
// not thrown away first); experiments say so with `tessera.io/priority: P3`.
// Waiting pods gain 10 points (a tenth of a class) a minute, at most 200,
// never above P2: a P3 pod competes as a fresh P2 pod after 10 minutes and
// never with inference. P3 escalates after 6 h, P2 after 2 h. A pod that waited 5 minutes holds capacity against
// backfill (at most 8 such pods). Training (P2) and experiments (P3) are
// preemptible, inference (P0, P1) is not; preemption spares pods younger
// than 10 minutes and pods preempted in the last 30 minutes. Gangs assemble
// within 5 minutes. Every GPU model weighs 1.
func Default() *Config {
	return &Config{
		APIVersion: APIVersion,
		Kind:       Kind,
		Priority: PriorityConfig{
			Annotation: map[string]Class{
				"P0": P0, "realtime": P0,
				"P1": P1, "online": P1, "inference": P1,
				"P2": P2, "training": P2,
				"P3": P3, "batch": P3, "evaluation": P3, "experiment": P3, "best-effort": P3,
			},
			ClassValues: []ClassValue{
				{AtLeast: 1_000_000, Class: P0},
				{AtLeast: 100_000, Class: P1},
				{AtLeast: 1_000, Class: P2},
			},
			DefaultClass: P2,
			Ageing:       AgeingConfig{Interval: Duration{Duration: time.Minute}, Step: 10, MaxBoost: 2 * PointsPerClass, Ceiling: P2},
			MaxWait:      map[Class]Duration{P2: {Duration: 2 * time.Hour}, P3: {Duration: 6 * time.Hour}},
			Backfill:     BackfillConfig{ReserveAfter: Duration{Duration: 5 * time.Minute}, MaxReservations: 8},
		},
		DefaultModelWeight: 1,
		Preemption: PreemptionConfig{
			MinRunTime:  Duration{Duration: 10 * time.Minute},
			Cooldown:    Duration{Duration: 30 * time.Minute},
			Preemptible: map[Class]bool{P0: false, P1: false, P2: true, P3: true},
		},
		Gang: GangConfig{Timeout: Duration{Duration: 5 * time.Minute}},
	}
}

// Load reads the file at path over the defaults and validates the result.
// An empty path returns the defaults.
func Load(path string) (*Config, error) {
	if path == "" {
		return Default(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scheduler config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("scheduler config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes YAML over the defaults and validates it. Maps in the file
// (annotation, maxWait, deadline, preemptible, modelWeights) are merged into the
// default maps key by key; lists (classValues, queues) replace the default.
func Parse(data []byte) (*Config, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(data, &head); err != nil {
		return nil, err
	}
	if head.APIVersion != APIVersion {
		return nil, fmt.Errorf("apiVersion: unsupported %q (want %q)", head.APIVersion, APIVersion)
	}
	if head.Kind != Kind {
		return nil, fmt.Errorf("kind: %q (want %q)", head.Kind, Kind)
	}
	c := Default()
	if err := yaml.UnmarshalStrict(data, c); err != nil {
		return nil, err
	}
	if err := defaultLimits(data, c); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// limitKeys records which resources a borrowingLimit or lendingLimit names.
type limitKeys struct {
	GPUMemMiB *int64 `json:"gpuMemMiB"`
	GPUMilli  *int64 `json:"gpuMilli"`
	GPUs      *int64 `json:"gpus"`
}

type limitsPresent struct {
	BorrowingLimit *limitKeys `json:"borrowingLimit"`
	LendingLimit   *limitKeys `json:"lendingLimit"`
}

type queueLimitsPresent struct {
	limitsPresent
	Models map[string]limitsPresent `json:"models"`
}

// defaultLimits fills the resources a limit in the file does not name: a
// borrowingLimit of {gpuMilli: 8000} limits GPU compute only (GPUs and
// memory: unlimited, maxAmount), a lendingLimit of {gpuMilli: 12000} keeps
// back GPU compute only (the rest of nominal is all lendable). Without
// this an unnamed resource would read as 0 and forbid borrowing or lending
// it, which the YAML does not say.
func defaultLimits(data []byte, c *Config) error {
	var raw struct {
		Queues []queueLimitsPresent `json:"queues"`
	}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return err
	}
	for i := range min(len(raw.Queues), len(c.Queues)) {
		q, rq := &c.Queues[i], &raw.Queues[i]
		fillLimits(q.Nominal, q.BorrowingLimit, q.LendingLimit, rq.limitsPresent)
		for m, rm := range rq.Models {
			if mq, ok := q.Models[m]; ok {
				fillLimits(mq.Nominal, mq.BorrowingLimit, mq.LendingLimit, rm)
			}
		}
	}
	return nil
}

func fillLimits(nominal Resources, borrow, lend *Resources, present limitsPresent) {
	fill := func(r *Resources, keys *limitKeys, absent func(name string) int64) {
		if r == nil || keys == nil {
			return
		}
		if keys.GPUMemMiB == nil {
			r.GPUMemMiB = absent("gpuMemMiB")
		}
		if keys.GPUMilli == nil {
			r.GPUMilli = absent("gpuMilli")
		}
		if keys.GPUs == nil {
			r.GPUs = absent("gpus")
		}
	}
	fill(borrow, present.BorrowingLimit, func(string) int64 { return maxAmount })
	fill(lend, present.LendingLimit, nominal.get)
}

// Validate checks every field and reports all problems, each with its field path.
func (c *Config) Validate() error {
	v := &validator{}
	if c.APIVersion != APIVersion {
		v.bad("apiVersion", "unsupported %q (want %q)", c.APIVersion, APIVersion)
	}
	if c.Kind != Kind {
		v.bad("kind", "%q (want %q)", c.Kind, Kind)
	}
	c.Priority.validate(v, "priority")
	c.validateQueues(v)
	if !validWeight(c.DefaultModelWeight) {
		v.bad("defaultModelWeight", "%v out of range [%v, %v]", c.DefaultModelWeight, MinModelWeight, MaxModelWeight)
	}
	for _, m := range sortedKeys(c.ModelWeights) {
		if m == "" {
			v.bad("modelWeights", "empty model name")
		}
		if w := c.ModelWeights[m]; !validWeight(w) {
			v.bad("modelWeights."+m, "%v out of range [%v, %v]", w, MinModelWeight, MaxModelWeight)
		}
	}
	c.Preemption.validate(v, "preemption")
	if c.Gang.Timeout.Duration <= 0 {
		v.bad("gang.timeout", "%s is not positive", c.Gang.Timeout.Duration)
	}
	return errors.Join(v.errs...)
}

// MaxModelWeight bounds a GPU model's weight (and a queue's fair weight):
// quota arithmetic multiplies amounts by it and must not overflow.
const MaxModelWeight = 1000

// MinModelWeight is the finest weight quota accounting resolves (it counts
// weights in thousandths): a smaller one would round to 0 and make a
// model's GPUs free of quota.
const MinModelWeight = 0.001

func validWeight(w float64) bool { return w >= MinModelWeight && w <= MaxModelWeight && !math.IsNaN(w) }

type validator struct{ errs []error }

func (v *validator) bad(field, format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

func (v *validator) class(field string, c Class) {
	if c.Rank() < 0 {
		v.bad(field, "unknown class %q (want P0, P1, P2 or P3)", c)
	}
}

func (p *PriorityConfig) validate(v *validator, at string) {
	if len(p.Annotation) == 0 {
		v.bad(at+".annotation", "empty: no value of %s would be accepted", PriorityAnnotation)
	}
	for _, k := range sortedKeys(p.Annotation) {
		if strings.TrimSpace(k) == "" {
			v.bad(at+".annotation", "empty value")
		}
		v.class(fmt.Sprintf("%s.annotation.%s", at, k), p.Annotation[k])
	}
	seen := map[int32]bool{}
	for i, cv := range p.ClassValues {
		f := fmt.Sprintf("%s.classValues[%d]", at, i)
		v.class(f+".class", cv.Class)
		if seen[cv.AtLeast] {
			v.bad(f+".atLeast", "%d listed twice", cv.AtLeast)
		}
		seen[cv.AtLeast] = true
	}
	v.class(at+".defaultClass", p.DefaultClass)
	a := p.Ageing
	if a.Interval.Duration <= 0 {
		v.bad(at+".ageing.interval", "%s is not positive", a.Interval.Duration)
	}
	if a.Step < 0 {
		v.bad(at+".ageing.step", "negative %d", a.Step)
	}
	if a.MaxBoost < 0 || a.MaxBoost > len(Classes)*PointsPerClass {
		v.bad(at+".ageing.maxBoost", "%d out of range [0, %d]", a.MaxBoost, len(Classes)*PointsPerClass)
	}
	for i, c := range a.Classes {
		v.class(fmt.Sprintf("%s.ageing.classes[%d]", at, i), c)
	}
	if a.Ceiling != "" {
		v.class(at+".ageing.ceiling", a.Ceiling)
	}
	switch a.Join {
	case "", JoinSubmission, JoinReach, JoinAhead:
	default:
		v.bad(at+".ageing.join", "%q: want %s, %s or %s", a.Join, JoinSubmission, JoinReach, JoinAhead)
	}
	for _, c := range sortedKeys(p.MaxWait) {
		v.class(at+".maxWait", c)
		if d := p.MaxWait[c].Duration; d < 0 {
			v.bad(at+".maxWait."+string(c), "negative %s", d)
		}
	}
	for _, c := range sortedKeys(p.Deadline) {
		v.class(at+".deadline", c)
		if d := p.Deadline[c].Duration; d <= 0 {
			v.bad(at+".deadline."+string(c), "%s is not positive (leave the class out for no deadline)", d)
		}
	}
	if d := p.Backfill.ReserveAfter.Duration; d < 0 {
		v.bad(at+".backfill.reserveAfter", "negative %s", d)
	}
	if p.Backfill.MaxReservations < 0 {
		v.bad(at+".backfill.maxReservations", "negative %d", p.Backfill.MaxReservations)
	}
}

func (c *Config) validateQueues(v *validator) {
	names := map[string]int{}
	for i := range c.Queues {
		q := &c.Queues[i]
		at := fmt.Sprintf("queues[%d]", i)
		if q.Name == "" {
			v.bad(at+".name", "empty")
		} else if msgs := validation.IsDNS1123Label(q.Name); len(msgs) > 0 {
			v.bad(at+".name", "%q: %s", q.Name, strings.Join(msgs, "; "))
		}
		if j, dup := names[q.Name]; dup && q.Name != "" {
			v.bad(at+".name", "%q already used by queues[%d]", q.Name, j)
		}
		names[q.Name] = i
		if q.Cohort != "" {
			if msgs := validation.IsDNS1123Label(q.Cohort); len(msgs) > 0 {
				v.bad(at+".cohort", "%q: %s", q.Cohort, strings.Join(msgs, "; "))
			}
		}
		if q.FairWeight != 0 && !validWeight(q.FairWeight) {
			v.bad(at+".fairWeight", "%v out of range [%v, %v]", q.FairWeight, MinModelWeight, MaxModelWeight)
		}
		validateLimits(v, at, q.Nominal, q.BorrowingLimit, q.LendingLimit)
		for _, m := range sortedKeys(q.Models) {
			if m == "" {
				v.bad(at+".models", "empty model name")
			}
			mq := q.Models[m]
			validateLimits(v, at+".models."+m, mq.Nominal, mq.BorrowingLimit, mq.LendingLimit)
		}
	}
	c.validateLimitsLimitSomething(v)
	if c.DefaultQueue != "" {
		if _, ok := names[c.DefaultQueue]; !ok {
			v.bad("defaultQueue", "%q is not one of the queues", c.DefaultQueue)
		}
	}
}

// validateLimitsLimitSomething rejects a borrowing limit on a resource that
// no queue of the cohort has a nominal amount of: such a resource is not
// limited in the cohort at all (see Resources), so the limit would be
// silently ignored ({gpuMilli: 8000} nominal with borrowingLimit {gpus: 2}
// would borrow any number of GPUs).
func (c *Config) validateLimitsLimitSomething(v *validator) {
	active := map[string]bool{} // cohort key + "/" + model + "/" + resource
	key := func(q *QueueConfig) string {
		if q.Cohort == "" {
			return "\x00" + q.Name // a queue without a cohort is a cohort of one
		}
		return q.Cohort
	}
	for i := range c.Queues {
		q := &c.Queues[i]
		for _, f := range q.Nominal.fields() {
			active[key(q)+"//"+f.name] = active[key(q)+"//"+f.name] || f.value > 0
		}
		for m, mq := range q.Models {
			for _, f := range mq.Nominal.fields() {
				k := key(q) + "/" + m + "/" + f.name
				active[k] = active[k] || f.value > 0
			}
		}
	}
	check := func(q *QueueConfig, model, at string, borrow *Resources) {
		if borrow == nil {
			return
		}
		for _, f := range borrow.fields() {
			if f.value > 0 && f.value < maxAmount && !active[key(q)+"/"+model+"/"+f.name] {
				v.bad(at+".borrowingLimit."+f.name, "%d limits nothing: no queue of the cohort has a nominal %s, so it is not limited there", f.value, f.name)
			}
		}
	}
	for i := range c.Queues {
		q := &c.Queues[i]
		at := fmt.Sprintf("queues[%d]", i)
		check(q, "", at, q.BorrowingLimit)
		for _, m := range sortedKeys(q.Models) {
			mq := q.Models[m]
			check(q, m, at+".models."+m, mq.BorrowingLimit)
		}
	}
}

// maxAmount bounds every quota amount: 2^40 MiB is an exbibyte of GPU
// memory; weighted by MaxModelWeight it still fits an int64 with room.
const maxAmount = 1 << 40

func validateLimits(v *validator, at string, nominal Resources, borrow, lend *Resources) {
	nominal.validate(v, at+".nominal")
	if borrow != nil {
		borrow.validate(v, at+".borrowingLimit")
	}
	if lend != nil {
		lend.validate(v, at+".lendingLimit")
		for _, f := range lend.fields() {
			if n := nominal.get(f.name); f.value > n {
				v.bad(at+".lendingLimit."+f.name, "%d exceeds nominal %d (a queue lends at most its own quota)", f.value, n)
			}
		}
	}
}

type field struct {
	name  string
	value int64
}

func (r Resources) fields() []field {
	return []field{{"gpuMemMiB", r.GPUMemMiB}, {"gpuMilli", r.GPUMilli}, {"gpus", r.GPUs}}
}

func (r Resources) get(name string) int64 {
	for _, f := range r.fields() {
		if f.name == name {
			return f.value
		}
	}
	return 0
}

func (r Resources) validate(v *validator, at string) {
	for _, f := range r.fields() {
		if f.value < 0 || f.value > maxAmount {
			v.bad(at+"."+f.name, "%d out of range [0, %d]", f.value, int64(maxAmount))
		}
	}
}

func (p *PreemptionConfig) validate(v *validator, at string) {
	if d := p.MinRunTime.Duration; d < 0 {
		v.bad(at+".minRunTime", "negative %s", d)
	}
	if d := p.Cooldown.Duration; d < 0 {
		v.bad(at+".cooldown", "negative %s", d)
	}
	for _, c := range sortedKeys(p.Preemptible) {
		v.class(at+".preemptible", c)
	}
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ClassForAnnotation resolves a tessera.io/priority annotation value; an
// unknown value is an error that lists the accepted ones.
func (p *PriorityConfig) ClassForAnnotation(value string) (Class, error) {
	if c, ok := p.Annotation[value]; ok {
		return c, nil
	}
	return "", fmt.Errorf("%s: unknown value %q (accepted: %s)", PriorityAnnotation, value, strings.Join(sortedKeys(p.Annotation), ", "))
}

// ClassForValue resolves a PriorityClass value through the ClassValues
// table; a value below every entry gets DefaultClass.
func (p *PriorityConfig) ClassForValue(value int32) Class {
	best, found := int64(math.MinInt64), Class("")
	for _, cv := range p.ClassValues {
		if value >= cv.AtLeast && int64(cv.AtLeast) > best {
			best, found = int64(cv.AtLeast), cv.Class
		}
	}
	if found == "" {
		return p.DefaultClass
	}
	return found
}

// ClassOf resolves a pod's class: its annotation if it has one (hasAnnotation),
// else its PriorityClass value if it has one (hasValue), else DefaultClass.
func (p *PriorityConfig) ClassOf(annotation string, hasAnnotation bool, value int32, hasValue bool) (Class, error) {
	switch {
	case hasAnnotation:
		return p.ClassForAnnotation(annotation)
	case hasValue:
		return p.ClassForValue(value), nil
	}
	return p.DefaultClass, nil
}

// ClassStep is the wait that gains one whole class (Interval ×
// PointsPerClass ÷ Step), for consumers that age in whole classes; 0 when
// ageing is off (Step 0).
func (a *AgeingConfig) ClassStep() time.Duration {
	if a.Step <= 0 || a.Interval.Duration <= 0 {
		return 0
	}
	step := time.Duration(a.Step)
	if a.Interval.Duration > math.MaxInt64/PointsPerClass { // Interval × 100 would overflow
		return min(a.Interval.Duration/step, math.MaxInt64/PointsPerClass) * PointsPerClass
	}
	// At least 1ns: 0 would read as "ageing off" for the fastest ageing.
	return max(a.Interval.Duration*PointsPerClass/step, 1)
}

// Effective is the class a pod of class base competes in after waiting
// wait, in whole classes: base raised by the points gained (at most
// MaxBoost), never above Ceiling, and unchanged for classes that do not age
// or are already at or above the ceiling.
func (a *AgeingConfig) Effective(base Class, wait time.Duration) Class {
	r := base.Rank()
	ceil := a.Ceiling.Rank()
	if a.Ceiling == "" {
		ceil = 0
	}
	if r < 0 || !a.Ages(base) || a.Step <= 0 || wait <= 0 || r <= ceil || a.Interval.Duration <= 0 {
		return base
	}
	// Saturate before multiplying: a large step over many intervals would
	// overflow int64 and turn the boost negative (an index out of range).
	points := int64(a.MaxBoost)
	if n := int64(wait / a.Interval.Duration); n < points/int64(a.Step)+1 {
		points = min(n*int64(a.Step), points)
	}
	return Classes[max(ceil, r-int(points/PointsPerClass))]
}

// Ages reports whether pods of class c age while waiting.
func (a *AgeingConfig) Ages(c Class) bool {
	return len(a.Classes) == 0 || slices.Contains(a.Classes, c)
}

// ModelWeight is what one GPU of model counts for in quota accounting.
func (c *Config) ModelWeight(model string) float64 {
	if w, ok := c.ModelWeights[model]; ok {
		return w
	}
	return c.DefaultModelWeight
}

// Queue finds a queue by name.
func (c *Config) Queue(name string) (*QueueConfig, bool) {
	for i := range c.Queues {
		if c.Queues[i].Name == name {
			return &c.Queues[i], true
		}
	}
	return nil, false
}

// Cohorts lists the cohort names in use, sorted.
func (c *Config) Cohorts() []string {
	var out []string
	for _, q := range c.Queues {
		if q.Cohort != "" && !slices.Contains(out, q.Cohort) {
			out = append(out, q.Cohort)
		}
	}
	sort.Strings(out)
	return out
}

// FairShareWeight is the queue's weight in fair sharing (1 when unset).
func (q *QueueConfig) FairShareWeight() float64 {
	if q.FairWeight == 0 {
		return 1
	}
	return q.FairWeight
}
