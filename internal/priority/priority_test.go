package priority

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
)

func TestResolve(t *testing.T) {
	tab := DefaultTable()
	cases := []struct {
		name       string
		annotation string
		annotated  bool
		value      int32
		want       Class
		wantErr    string
	}{
		{"class name", "P0", true, 0, P0, ""},
		{"lower case, spaces", " p2 ", true, 0, P2, ""},
		{"alias", "Training", true, 0, P2, ""},
		{"annotation wins over value", "P3", true, 2_000_000_000, P3, ""},
		{"unknown annotation", "urgent", true, 0, 0, `unknown priority`},
		{"P4 is no class", "P4", true, 0, 0, `"P4"`},
		{"empty annotation", "", true, 0, 0, `unknown priority`},
		{"system critical value", "", false, 2_000_000_000, P0, ""},
		{"value at P1 threshold", "", false, 100_000, P1, ""},
		{"just below P1", "", false, 99_999, P2, ""},
		{"kubernetes default 0", "", false, 0, P2, ""},
		{"negative value", "", false, math.MinInt32, P2, ""},
		{"batch alias", "batch", true, 0, P3, ""},
	}
	for _, c := range cases {
		got, err := tab.Resolve(c.annotation, c.annotated, c.value)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), AnnotationKey) {
				t.Errorf("%s: err = %v, want one naming %s and containing %q", c.name, err, AnnotationKey, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: got %v, %v; want %v", c.name, got, err, c.want)
		}
	}
}

func TestNewTableRejects(t *testing.T) {
	cases := []struct {
		name  string
		names map[string]Class
		ths   []Threshold
		def   Class
		want  string
	}{
		{"bad default", nil, nil, 7, "default class"},
		{"empty name", map[string]Class{" ": P1}, nil, P3, "empty name"},
		{"name to bad class", map[string]Class{"x": -1}, nil, P3, `name "x"`},
		{"alias twice", map[string]Class{"Fast": P0, "fast": P1}, nil, P3, "both"},
		{"threshold twice", nil, []Threshold{{10, P1}, {10, P1}}, P3, "listed twice"},
		{"inverted", nil, []Threshold{{10, P2}, {100, P3}}, P3, "less urgent"},
		{"threshold bad class", nil, []Threshold{{10, 9}}, P3, "threshold 10"},
	}
	for _, c := range cases {
		_, err := NewTable(c.names, c.ths, c.def)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
	// With no thresholds every unannotated pod gets the default.
	tab, err := NewTable(nil, nil, P2)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := tab.Resolve("", false, 1<<30); c != P2 {
		t.Errorf("default = %v, want P2", c)
	}
}

func TestAgeing(t *testing.T) {
	a := Ageing{Step: 10 * time.Minute, Ceiling: P1}
	cases := []struct {
		base Class
		wait time.Duration
		want Class
	}{
		{P3, 0, P3},
		{P3, 9 * time.Minute, P3},
		{P3, 10 * time.Minute, P2},
		{P3, 19 * time.Minute, P2},
		{P3, 20 * time.Minute, P1},
		{P3, 1000 * time.Hour, P1}, // bounded by the ceiling
		{P2, 15 * time.Minute, P1},
		{P1, 1000 * time.Hour, P1}, // at the ceiling already
		{P0, 1000 * time.Hour, P0}, // above it: unchanged
		{P3, -time.Hour, P3},
	}
	for _, c := range cases {
		if got := a.Effective(c.base, c.wait); got != c.want {
			t.Errorf("Effective(%v, %v) = %v, want %v", c.base, c.wait, got, c.want)
		}
	}
	if got := (Ageing{Ceiling: P0}).Effective(P3, time.Hour*1000); got != P3 {
		t.Errorf("step 0 must disable ageing, got %v", got)
	}
	if (Ageing{Step: -1}).Validate() == nil || (Ageing{Ceiling: 4}).Validate() == nil || a.Validate() != nil {
		t.Error("Validate accepts a bad ageing or rejects a good one")
	}
}

// Monotone ageing is what lets the queue keep one FIFO per base class.
func TestAgeingIsMonotone(t *testing.T) {
	a := Ageing{Step: 7 * time.Second, Ceiling: P0}
	for base := P0; base <= Lowest; base++ {
		prev := base
		for w := time.Duration(0); w < time.Minute; w += time.Second {
			e := a.Effective(base, w)
			if prev.Above(e) {
				t.Fatalf("base %v: wait %v gives %v, less urgent than %v at a shorter wait", base, w, e, prev)
			}
			prev = e
		}
	}
}

func TestPreemptionOrder(t *testing.T) {
	if !MayPreempt(P0, P1, true) || MayPreempt(P1, P1, true) || MayPreempt(P2, P1, true) || MayPreempt(P0, P3, false) {
		t.Error("MayPreempt: only a more urgent class evicts, and only preemptible pods")
	}
	cs := []Candidate{{P2, time.Hour}, {P3, time.Hour}, {P2, time.Minute}, {P3, time.Second}}
	slices.SortFunc(cs, VictimOrder)
	want := []Candidate{{P3, time.Second}, {P3, time.Hour}, {P2, time.Minute}, {P2, time.Hour}}
	if !slices.Equal(cs, want) {
		t.Errorf("victim order %v, want %v", cs, want)
	}
}

func TestParseClass(t *testing.T) {
	for s, want := range map[string]Class{"P0": P0, "p3": P3} {
		if c, err := ParseClass(s); err != nil || c != want {
			t.Errorf("ParseClass(%q) = %v, %v", s, c, err)
		}
	}
	for _, s := range []string{"", "P", "P-1", "P10", "Q1"} {
		if _, err := ParseClass(s); err == nil {
			t.Errorf("ParseClass(%q) accepted", s)
		}
	}
	if P2.String() != "P2" || Class(9).String() != "Class(9)" {
		t.Error("String")
	}
}

// The table built from the typed configuration resolves as the
// configuration's own ClassOf does.
func TestTableFromConfigAgrees(t *testing.T) {
	c := schedv1.Default()
	tab, err := TableFrom(&c.Priority)
	if err != nil {
		t.Fatal(err)
	}
	for _, ann := range []string{"P0", "realtime", "training", "best-effort", "nope"} {
		want, werr := c.Priority.ClassOf(ann, true, 0, false)
		got, gerr := tab.Resolve(ann, true, 0)
		if (werr == nil) != (gerr == nil) || (gerr == nil && got.String() != string(want)) {
			t.Errorf("annotation %q: table %v %v, config %v %v", ann, got, gerr, want, werr)
		}
	}
	for _, v := range []int32{-5, 0, 999, 1000, 100_000, 2_000_000_000} {
		want, _ := c.Priority.ClassOf("", false, v, true)
		if got, _ := tab.Resolve("", false, v); got.String() != string(want) {
			t.Errorf("value %d: table %v, config %v", v, got, want)
		}
	}
	c.Priority.DefaultClass = "P7"
	if _, err := TableFrom(&c.Priority); err == nil || !strings.Contains(err.Error(), "defaultClass") {
		t.Errorf("bad default: %v", err)
	}
}

// An alias spelled like a class name ("p0") can never take effect, since
// Resolve reads class names first: a table that maps it to another class
// is refused instead of being silently ignored.
func TestAliasShadowedByClassNameIsRefused(t *testing.T) {
	if _, err := NewTable(map[string]Class{"P0": P3}, nil, P3); err == nil || !strings.Contains(err.Error(), `"P0"`) {
		t.Errorf("alias P0 → P3: %v, want an error naming the alias", err)
	}
	tab, err := NewTable(map[string]Class{" p1 ": P1}, nil, P3) // harmless: says what P1 says
	if err != nil {
		t.Fatalf("alias p1 → P1: %v", err)
	}
	if c, err := tab.Resolve("P1", true, 0); err != nil || c != P1 {
		t.Errorf("Resolve(P1) = %v, %v", c, err)
	}
}

// Classes kept from ageing stay where they are; the others still reach the
// ceiling. Reached is the time the class was entered by ageing.
func TestAgeingSkipAndReached(t *testing.T) {
	a := Ageing{Step: 10 * time.Minute, Ceiling: P1, Join: JoinAtReach}
	a.Skip[P2] = true
	if got := a.Effective(P2, time.Hour); got != P2 {
		t.Errorf("P2 kept from ageing aged to %v", got)
	}
	if got := a.Effective(P3, time.Hour); got != P1 {
		t.Errorf("P3 after 1h: %v, want P1", got)
	}
	sub := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := a.Reached(P3, P1, sub); !got.Equal(sub.Add(20 * time.Minute)) {
		t.Errorf("P3 reached P1 at %v, want 20m after submission", got.Sub(sub))
	}
	if got := a.Reached(P3, P3, sub); !got.Equal(sub) {
		t.Errorf("P3 at its own class: %v, want its submission", got.Sub(sub))
	}
	a.Join = JoinAtSubmission
	if got := a.Reached(P3, P1, sub); !got.Equal(sub) {
		t.Errorf("joining at submission: %v, want the submission", got.Sub(sub))
	}
}

// The API spells joins submission, reach and ahead; anything else is an
// error naming the value, and an Ageing with a join out of range does not
// validate.
func TestParseJoin(t *testing.T) {
	for _, j := range []Join{JoinAtSubmission, JoinAtReach, JoinAhead} {
		if got, err := ParseJoin(j.String()); err != nil || got != j {
			t.Errorf("ParseJoin(%q) = %v, %v", j.String(), got, err)
		}
	}
	if _, err := ParseJoin("first"); err == nil || !strings.Contains(err.Error(), `"first"`) {
		t.Errorf("ParseJoin(first): %v", err)
	}
	if err := (Ageing{Step: time.Minute, Ceiling: P2, Join: JoinAhead + 1}).Validate(); err == nil {
		t.Error("a join out of range validated")
	}
}
