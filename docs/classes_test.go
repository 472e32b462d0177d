package docs

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// TestClassDefaultsInSchedulerDoc: docs/scheduler.md §Classes states the
// default PriorityClass value table and the class of a pod below every row
// as the code has them (api/scheduler/v1 Default, and priority.DefaultTable,
// which the device plugin reads pods with: the two must agree).
func TestClassDefaultsInSchedulerDoc(t *testing.T) {
	doc := read(t, "docs/scheduler.md")
	m := regexp.MustCompile("defaults ((?:≥ [0-9,]+ → P[0-3], )+)below that `defaultClass`, (P[0-3])").FindStringSubmatch(doc)
	if m == nil {
		t.Fatal("docs/scheduler.md §Classes: no \"defaults ≥ … → P…, below that `defaultClass`, P…\" sentence")
	}
	def := schedv1.Default().Priority
	var want []string
	for _, row := range def.ClassValues {
		want = append(want, fmt.Sprintf("≥ %s → %s, ", thousands(row.AtLeast), row.Class))
	}
	if got := m[1]; got != strings.Join(want, "") {
		t.Errorf("docs say the default rows are %q, the code has %q", got, strings.Join(want, ""))
	}
	if m[2] != string(def.DefaultClass) {
		t.Errorf("docs say a pod below every row is %s, the default configuration says %s", m[2], def.DefaultClass)
	}
	if got, err := priority.DefaultTable().Resolve("", false, 0); err != nil || got.String() != m[2] {
		t.Errorf("the device plugin's default table puts a pod of value 0 in %v (%v), the docs say %s", got, err, m[2])
	}
}

// thousands writes n with commas, as the docs do (1,000,000).
func thousands(n int32) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
