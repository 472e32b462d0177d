package priority

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// AnnotationKey is the pod annotation that names a pod's priority.
const AnnotationKey = "tessera.io/priority"

// Threshold maps PriorityClass values of at least Min to Class.
type Threshold struct {
	Min   int32
	Class Class
}

// Table resolves a pod's class. An annotation value is looked up by name
// ("P0".."P3" always work; Names adds aliases such as "realtime"); a pod
// without the annotation is classed by its PriorityClass value: the first
// threshold (highest Min first) the value reaches. A value below every
// threshold gets Default.
type Table struct {
	names      map[string]Class
	thresholds []Threshold // sorted by Min, descending
	def        Class
}

// NewTable checks and builds a table. Names are case-insensitive; a name
// spelled like a class ("p0") mapping to another class, two
// thresholds with one Min, or a higher Min mapping to a less urgent class
// than a lower Min (an inverted table), are rejected.
func NewTable(names map[string]Class, thresholds []Threshold, def Class) (*Table, error) {
	if !def.Valid() {
		return nil, fmt.Errorf("priority table: default class %v is not P0..P3", def)
	}
	t := &Table{names: map[string]Class{}, def: def}
	for n, c := range names {
		key := strings.ToLower(strings.TrimSpace(n))
		if key == "" {
			return nil, errors.New("priority table: empty name")
		}
		if !c.Valid() {
			return nil, fmt.Errorf("priority table: name %q maps to %v, not P0..P3", n, c)
		}
		if named, err := ParseClass(key); err == nil && named != c {
			// Resolve reads class names first: this alias could never apply.
			return nil, fmt.Errorf("priority table: name %q is the class %v and cannot map to %v", n, named, c)
		}
		if prev, dup := t.names[key]; dup && prev != c {
			return nil, fmt.Errorf("priority table: name %q maps to both %v and %v", n, prev, c)
		}
		t.names[key] = c
	}
	t.thresholds = slices.Clone(thresholds)
	sort.Slice(t.thresholds, func(i, j int) bool { return t.thresholds[i].Min > t.thresholds[j].Min })
	for i, th := range t.thresholds {
		if !th.Class.Valid() {
			return nil, fmt.Errorf("priority table: threshold %d maps to %v, not P0..P3", th.Min, th.Class)
		}
		if i > 0 {
			prev := t.thresholds[i-1]
			if prev.Min == th.Min {
				return nil, fmt.Errorf("priority table: threshold %d listed twice", th.Min)
			}
			if th.Class.Above(prev.Class) {
				return nil, fmt.Errorf("priority table: value %d maps to %v but the higher value %d to the less urgent %v", th.Min, th.Class, prev.Min, prev.Class)
			}
		}
	}
	return t, nil
}

// DefaultTable is the table used without configuration. It reads pods the
// way the scheduler's default configuration (api/scheduler/v1 Default) does,
// so a pod has one class on the way to the node and on the GPU: the aliases
// realtime (P0), online and inference (P1), training (P2), batch, evaluation,
// experiment and best-effort (P3); PriorityClass values ≥ 1,000,000 are P0,
// ≥ 100,000 P1, the rest (Kubernetes' default 0 included) P2. System classes
// (system-cluster-critical is 2,000,000,000) land in P0.
func DefaultTable() *Table {
	t, err := NewTable(
		map[string]Class{"realtime": P0, "online": P1, "inference": P1, "training": P2,
			"batch": P3, "evaluation": P3, "experiment": P3, "best-effort": P3},
		[]Threshold{{1_000_000, P0}, {100_000, P1}, {math.MinInt32, P2}},
		P2)
	if err != nil {
		panic(err) // a constant table; a failure is a bug here
	}
	return t
}

// Resolve gives the class of a pod from its annotation value (annotated
// false when the pod has no tessera.io/priority annotation) and its
// PriorityClass value. An annotation that names no class is an error that
// names the value: a typo must not silently make inference best-effort.
func (t *Table) Resolve(annotation string, annotated bool, priorityValue int32) (Class, error) {
	if annotated {
		key := strings.ToLower(strings.TrimSpace(annotation))
		if c, err := ParseClass(key); err == nil {
			return c, nil
		}
		if c, ok := t.names[key]; ok {
			return c, nil
		}
		return 0, fmt.Errorf("annotation %s=%q: unknown priority (want P0..P3 or one of %s)", AnnotationKey, annotation, strings.Join(t.Names(), ", "))
	}
	for _, th := range t.thresholds {
		if priorityValue >= th.Min {
			return th.Class, nil
		}
	}
	return t.def, nil
}

// Names lists the aliases the table knows, sorted.
func (t *Table) Names() []string {
	out := make([]string, 0, len(t.names))
	for n := range t.names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
