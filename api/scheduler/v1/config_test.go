package v1

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const head = "apiVersion: scheduler.tessera.io/v1\nkind: SchedulerConfig\n"

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestParseFullConfig(t *testing.T) {
	c, err := Parse([]byte(head + `
priority:
  annotation: {urgent: P0}
  classValues:
  - {atLeast: 500, class: P1}
  defaultClass: P3
  ageing: {interval: 30s, step: 5, maxBoost: 150, classes: [P2, P3], join: ahead}
  maxWait: {P3: 1h}
  deadline: {P3: 12h}
  backfill: {reserveAfter: 2m, maxReservations: 3}
queues:
- name: team-a
  cohort: research
  nominal: {gpuMilli: 8000, gpus: 8, gpuMemMiB: 327680}
  borrowingLimit: {gpuMilli: 4000}
  lendingLimit: {gpuMilli: 2000, gpus: 2}
  models:
    H100: {nominal: {gpus: 4}}
  fairWeight: 2
- name: team-b
  cohort: research
  nominal: {gpuMilli: 4000}
defaultQueue: team-b
modelWeights: {H100: 2.0, T4: 0.25}
preemption:
  minRunTime: 15m
  cooldown: 1h
  preemptible: {P1: true}
gang: {timeout: 90s}
`))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Priority
	if p.Annotation["urgent"] != P0 || p.Annotation["P3"] != P3 {
		t.Errorf("annotation map not merged over the defaults: %v", p.Annotation)
	}
	if len(p.ClassValues) != 1 || p.ClassForValue(600) != P1 || p.ClassForValue(10) != P3 {
		t.Errorf("classValues = %v (list replaces the default)", p.ClassValues)
	}
	if p.Ageing.Interval.Duration != 30*time.Second || p.Ageing.MaxBoost != 150 || p.Ageing.Ages(P1) || !p.Ageing.Ages(P3) || p.Ageing.Join != JoinAhead {
		t.Errorf("ageing = %+v", p.Ageing)
	}
	if p.MaxWait[P3].Duration != time.Hour || p.MaxWait[P2].Duration != 2*time.Hour {
		t.Errorf("maxWait = %v", p.MaxWait)
	}
	if p.Deadline[P3].Duration != 12*time.Hour || len(p.Deadline) != 1 {
		t.Errorf("deadline = %v, want P3 only, 12h", p.Deadline)
	}
	q, ok := c.Queue("team-a")
	if !ok || q.Nominal.GPUMilli != 8000 || q.BorrowingLimit.GPUMilli != 4000 || q.LendingLimit.GPUs != 2 || q.Models["H100"].Nominal.GPUs != 4 || q.FairShareWeight() != 2 {
		t.Errorf("queue = %+v", q)
	}
	if b, _ := c.Queue("team-b"); b.FairShareWeight() != 1 || b.BorrowingLimit != nil {
		t.Errorf("team-b = %+v", b)
	}
	if c.ModelWeight("H100") != 2 || c.ModelWeight("A100") != 1 {
		t.Errorf("weights = %v", c.ModelWeights)
	}
	if !c.Preemption.Preemptible[P1] || !c.Preemption.Preemptible[P3] || c.Preemption.Cooldown.Duration != time.Hour {
		t.Errorf("preemption = %+v", c.Preemption)
	}
	if got := c.Cohorts(); len(got) != 1 || got[0] != "research" {
		t.Errorf("cohorts = %v", got)
	}
}

// TestInvalidValuesNameTheirField: every bad value is reported, each with
// its field path, and all of them at once.
func TestInvalidValuesNameTheirField(t *testing.T) {
	cases := map[string][]string{
		"priority: {defaultClass: P9}":                                                               {"priority.defaultClass", "P9"},
		"priority: {annotation: {fast: P7}}":                                                         {"priority.annotation.fast", "P7"},
		"priority: {classValues: [{atLeast: 1, class: X}]}":                                          {"priority.classValues[0].class"},
		"priority: {classValues: [{atLeast: 1, class: P1}, {atLeast: 1, class: P2}]}":                {"priority.classValues[1].atLeast", "twice"},
		"priority: {ageing: {interval: 0s}}":                                                         {"priority.ageing.interval"},
		"priority: {ageing: {step: -1}}":                                                             {"priority.ageing.step"},
		"priority: {ageing: {maxBoost: 100000}}":                                                     {"priority.ageing.maxBoost"},
		"priority: {ageing: {join: first}}":                                                          {"priority.ageing.join", "first"},
		"priority: {ageing: {interval: soon}}":                                                       {"interval", "invalid duration"},
		"priority: {maxWait: {P2: -1s}}":                                                             {"priority.maxWait.P2"},
		"priority: {maxWait: {Q: 1s}}":                                                               {"priority.maxWait", "Q"},
		"priority: {deadline: {P3: 0s}}":                                                             {"priority.deadline.P3", "not positive"},
		"priority: {deadline: {P2: -1h}}":                                                            {"priority.deadline.P2"},
		"priority: {deadline: {P5: 1h}}":                                                             {"priority.deadline", "P5"},
		"priority: {deadline: {P3: later}}":                                                          {"deadline", "invalid duration"},
		"priority: {backfill: {maxReservations: -2}}":                                                {"priority.backfill.maxReservations"},
		"queues: [{name: a}, {name: a}]":                                                             {"queues[1].name", "already used"},
		"queues: [{name: Team_A}]":                                                                   {"queues[0].name"},
		"queues: [{name: a, nominal: {gpuMilli: -5}}]":                                               {"queues[0].nominal.gpuMilli", "-5"},
		"queues: [{name: a, nominal: {gpus: 2}, lendingLimit: {gpus: 3}}]":                           {"queues[0].lendingLimit.gpus", "exceeds nominal"},
		"queues: [{name: a, borrowingLimit: {gpuMemMiB: -1}}]":                                       {"queues[0].borrowingLimit.gpuMemMiB"},
		"queues: [{name: a, models: {H100: {nominal: {gpus: -1}}}}]":                                 {"queues[0].models.H100.nominal.gpus"},
		"queues: [{name: a, cohort: c, nominal: {gpuMilli: 8000}, borrowingLimit: {gpus: 2}}]":       {"queues[0].borrowingLimit.gpus", "limits nothing"},
		"queues: [{name: a, models: {H100: {nominal: {gpus: 2}, borrowingLimit: {gpuMilli: 500}}}}]": {"queues[0].models.H100.borrowingLimit.gpuMilli", "limits nothing"},
		"queues: [{name: a, fairWeight: -1}]":                                                        {"queues[0].fairWeight"},
		"queues: [{name: a, nominal: {gpus: two}}]":                                                  {"gpus"},
		"defaultQueue: nobody":                                                                       {"defaultQueue", "nobody"},
		"modelWeights: {T4: 0}":                                                                      {"modelWeights.T4"},
		"defaultModelWeight: -1":                                                                     {"defaultModelWeight"},
		"modelWeights: {T4: 0.0004}":                                                                 {"modelWeights.T4", "0.0004"},
		"defaultModelWeight: 0.0001":                                                                 {"defaultModelWeight"},
		"preemption: {minRunTime: -1m}":                                                              {"preemption.minRunTime"},
		"preemption: {cooldown: -1m}":                                                                {"preemption.cooldown"},
		"preemption: {preemptible: {PX: true}}":                                                      {"preemption.preemptible", "PX"},
		"gang: {timeout: 0s}":                                                                        {"gang.timeout"},
		"queuez: []":                                                                                 {"unknown field", "queuez"},
		"priority: {ageing: {stepp: 1}}":                                                             {"unknown field", "stepp"},
	}
	for body, want := range cases {
		_, err := Parse([]byte(head + body + "\n"))
		if err == nil {
			t.Errorf("%q: accepted", body)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not mention %q", body, err, w)
			}
		}
	}
}

func TestAllProblemsReportedTogether(t *testing.T) {
	_, err := Parse([]byte(head + "gang: {timeout: 0s}\npreemption: {cooldown: -1s}\nqueues: [{name: ''}]\n"))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, f := range []string{"gang.timeout", "preemption.cooldown", "queues[0].name"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q misses %s", err, f)
		}
	}
}

func TestHeaderChecked(t *testing.T) {
	for body, want := range map[string]string{
		"kind: SchedulerConfig\n":                                      "apiVersion",
		"apiVersion: scheduler.tessera.io/v2\nkind: SchedulerConfig\n": "apiVersion",
		"apiVersion: scheduler.tessera.io/v1\nkind: Other\n":           "kind",
		"apiVersion: [\n": "yaml",
	} {
		if _, err := Parse([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want mention of %s", body, err, want)
		}
	}
}

func TestClassResolution(t *testing.T) {
	p := Default().Priority
	for _, tc := range []struct {
		ann      string
		hasAnn   bool
		value    int32
		hasValue bool
		want     Class
	}{
		{"realtime", true, 0, true, P0},
		{"P3", true, 2_000_000, true, P3}, // the annotation wins
		{"", false, 2_000_000, true, P0},
		{"", false, 100_000, true, P1},
		{"", false, 5_000, true, P2},
		{"", false, 0, true, P2},
		{"", false, 0, false, P2},
	} {
		got, err := p.ClassOf(tc.ann, tc.hasAnn, tc.value, tc.hasValue)
		if err != nil || got != tc.want {
			t.Errorf("ClassOf(%q, %v, %d, %v) = %s, %v; want %s", tc.ann, tc.hasAnn, tc.value, tc.hasValue, got, err, tc.want)
		}
	}
	_, err := p.ClassOf("urgent", true, 0, false)
	if err == nil || !strings.Contains(err.Error(), `"urgent"`) || !strings.Contains(err.Error(), "realtime") {
		t.Errorf("unknown annotation: err = %v (want the value and the accepted list)", err)
	}
	if P0.Rank() != 0 || P3.Rank() != 3 || Class("x").Rank() != -1 {
		t.Error("Rank")
	}
}

func TestLoad(t *testing.T) {
	if c, err := Load(""); err != nil || c.Gang.Timeout.Duration != 5*time.Minute {
		t.Fatalf("Load(\"\") = %v, %v", c, err)
	}
	p := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(p, []byte(head+"gang: {timeout: 0s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "gang.timeout") {
		t.Errorf("err = %v, want the path and the field", err)
	}
	if _, err := Load(p + ".missing"); err == nil {
		t.Error("missing file accepted")
	}
}

// FuzzLoad: nothing the parser is fed makes it panic, and whatever it
// accepts validates and survives its own defaults being applied again.
func FuzzLoad(f *testing.F) {
	f.Add(head)
	f.Add(head + "queues: [{name: a, cohort: c, nominal: {gpus: 2}, lendingLimit: {gpus: 1}}]\n")
	f.Add(head + "priority: {ageing: {interval: 1m, step: 5}, maxWait: {P3: 1h}}\nmodelWeights: {H100: 2}\n")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse([]byte(s))
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that does not validate: %v", err)
		}
		for _, q := range c.Queues {
			if q.FairShareWeight() <= 0 {
				t.Fatalf("queue %s: weight %v", q.Name, q.FairShareWeight())
			}
		}
	})
}

// TestDocumentedExample: the example in docs/scheduler.md (copied here) loads.
func TestDocumentedExample(t *testing.T) {
	c, err := Load("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if q, ok := c.Queue("team-a"); !ok || q.Models["H100"].Nominal.GPUs != 8 || c.ModelWeight("T4") != 0.25 {
		t.Errorf("example = %+v", c)
	}
}

func TestAgeing(t *testing.T) {
	a := Default().Priority.Ageing
	if a.ClassStep() != 10*time.Minute {
		t.Errorf("ClassStep = %s", a.ClassStep())
	}
	for _, tc := range []struct {
		base Class
		wait time.Duration
		want Class
	}{
		{P3, 9 * time.Minute, P3},
		{P3, 10 * time.Minute, P2},
		{P3, 10 * time.Hour, P2}, // the ceiling
		{P2, 10 * time.Hour, P2}, // at the ceiling already
		{P1, 10 * time.Hour, P1},
		{P3, -time.Minute, P3},
	} {
		if got := a.Effective(tc.base, tc.wait); got != tc.want {
			t.Errorf("Effective(%s, %s) = %s, want %s", tc.base, tc.wait, got, tc.want)
		}
	}
	a.Ceiling, a.MaxBoost = P0, 150
	if got := a.Effective(P3, 10*time.Hour); got != P2 {
		t.Errorf("maxBoost 150 from P3 = %s, want P2 (one whole class)", got)
	}
	a.MaxBoost = 300
	if got := a.Effective(P3, 10*time.Hour); got != P0 {
		t.Errorf("maxBoost 300, ceiling P0 = %s", got)
	}
	a.Classes = []Class{P2}
	if got := a.Effective(P3, 10*time.Hour); got != P3 {
		t.Errorf("P3 does not age here, got %s", got)
	}
	a.Step = 0
	if a.ClassStep() != 0 || a.Effective(P2, time.Hour) != P2 {
		t.Error("step 0 disables ageing")
	}
	if _, err := Parse([]byte(head + "priority: {ageing: {ceiling: P5}}\n")); err == nil || !strings.Contains(err.Error(), "priority.ageing.ceiling") {
		t.Errorf("bad ceiling: %v", err)
	}
}

// A valid config with a large ageing step over a fine interval made
// Effective overflow (intervals × step) and index Classes with a huge
// number: a panic for any pod that waited a second.
func TestAgeingSaturatesInsteadOfOverflowing(t *testing.T) {
	a := AgeingConfig{Interval: Duration{Duration: time.Nanosecond}, Step: 1 << 40, MaxBoost: 200, Ceiling: P0}
	c := Default()
	c.Priority.Ageing = a
	if err := c.Validate(); err != nil {
		t.Fatalf("the config is valid: %v", err)
	}
	for _, w := range []time.Duration{time.Nanosecond, time.Second, time.Hour, 1000 * time.Hour} {
		if got := a.Effective(P3, w); got != P1 {
			t.Errorf("wait %s: %s, want P1 (maxBoost 200 = two classes)", w, got)
		}
	}
	small := AgeingConfig{Interval: Duration{Duration: time.Minute}, Step: 10, MaxBoost: 200, Ceiling: P0}
	for w, want := range map[time.Duration]Class{9 * time.Minute: P3, 10 * time.Minute: P2, 19 * time.Minute: P2, 20 * time.Minute: P1, 100 * time.Hour: P1} {
		if got := small.Effective(P3, w); got != want {
			t.Errorf("step 10/min, wait %s: %s, want %s", w, got, want)
		}
	}
}

// ClassStep of a valid config overflowed (an interval over ~3 years × 100
// went negative, which the engine's queue rejects as a negative step) or
// rounded to 0 (step above interval × 100 in ns: "ageing off" for the
// fastest ageing).
func TestClassStepNeverNegativeOrOff(t *testing.T) {
	for _, a := range []AgeingConfig{
		{Interval: Duration{Duration: 100_000 * time.Hour}, Step: 10, MaxBoost: 200},
		{Interval: Duration{Duration: time.Nanosecond}, Step: 1000, MaxBoost: 200},
		{Interval: Duration{Duration: 1<<63 - 1}, Step: 1, MaxBoost: 200},
	} {
		c := Default()
		c.Priority.Ageing = a
		if err := c.Validate(); err != nil {
			t.Fatalf("%+v is valid: %v", a, err)
		}
		if got := a.ClassStep(); got <= 0 {
			t.Errorf("interval %s step %d: ClassStep %s, want positive", a.Interval.Duration, a.Step, got)
		}
	}
	a := AgeingConfig{Interval: Duration{Duration: 100_000 * time.Hour}, Step: 10}
	if got, want := a.ClassStep(), 1_000_000*time.Hour; got != want {
		t.Errorf("ClassStep = %s, want %s", got, want)
	}
}

// TestUnnamedLimitResources: a limit limits only what it names, also in a
// per-model quota; Go-built configs keep every field as given.
func TestUnnamedLimitResources(t *testing.T) {
	c, err := Parse([]byte(head + `queues:
- name: a
  cohort: c
  nominal: {gpuMilli: 4000, gpus: 4}
  borrowingLimit: {gpus: 1}
  models: {H100: {nominal: {gpus: 2, gpuMilli: 2000}, lendingLimit: {gpus: 1}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	q := c.Queues[0]
	if b := q.BorrowingLimit; b.GPUs != 1 || b.GPUMilli != maxAmount || b.GPUMemMiB != maxAmount {
		t.Errorf("borrowingLimit = %+v, want gpus 1, the rest unlimited", *b)
	}
	if l := q.Models["H100"].LendingLimit; l.GPUs != 1 || l.GPUMilli != 2000 || l.GPUMemMiB != 0 {
		t.Errorf("H100 lendingLimit = %+v, want gpus 1, gpuMilli all of nominal (2000)", *l)
	}
}
