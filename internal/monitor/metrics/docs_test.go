package metrics

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// docMetric is one metric named in a table row of docs/metrics.md.
type docMetric struct {
	name, typ string
	labels    []string // the {a,b} written after the name
}

var docName = regexp.MustCompile("`(tessera_[a-z0-9_]+)(\\{([a-z_,]+)\\})?`")

func documented(t *testing.T) map[string]docMetric {
	data, err := os.ReadFile("../../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]docMetric{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| `tessera_") {
			continue
		}
		cells := strings.Split(line, "|")
		for _, m := range docName.FindAllStringSubmatch(cells[1], -1) {
			d := docMetric{name: m[1], typ: strings.TrimSpace(cells[2])}
			if m[3] != "" {
				d.labels = strings.Split(m[3], ",")
			}
			out[d.name] = d
		}
	}
	return out
}

var descFQName = regexp.MustCompile(`fqName: "([^"]+)"`)
var descVarLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)

// The names docs/metrics.md documents are exactly the ones the monitor
// registers, counters end in _total, and the label a documented name carries
// in braces is one of its variable labels: a dashboard written from the doc
// must find every series.
func TestDocumentedMetricsAreTheRegisteredOnes(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	NewAgent(reg, "n")
	NewBalloon(reg, "n")
	reg.MustRegister(&Collector{})
	ch := make(chan *prometheus.Desc, 100)
	go func() {
		for _, c := range []prometheus.Collector{&Collector{}, NewAgent(nil, "n").Bypass, NewAgent(nil, "n").Skipped, NewNode("n", "/", nil)} {
			c.Describe(ch)
		}
		a := NewAgent(nil, "n")
		for _, c := range []prometheus.Collector{a.ReapedSlots, a.ReapedBytes, a.Kills, a.Spared, a.IdentityErrors} {
			c.Describe(ch)
		}
		b := NewBalloon(nil, "n")
		for _, c := range []prometheus.Collector{b.Reclaimable, b.Lent, b.Inflations, b.Deflations, b.Evictions, b.OwnerWait, b.OwnerOOMs} {
			c.Describe(ch)
		}
		close(ch)
	}()
	registered := map[string][]string{}
	for d := range ch {
		s := d.String()
		name := descFQName.FindStringSubmatch(s)[1]
		var labels []string
		if m := descVarLabels.FindStringSubmatch(s); m != nil && m[1] != "" {
			labels = strings.Split(m[1], ",")
		}
		registered[name] = labels
	}
	docs := documented(t)
	var missing, undocumented []string
	for name := range registered {
		if _, ok := docs[name]; !ok {
			undocumented = append(undocumented, name)
		}
	}
	for name, d := range docs {
		labels, ok := registered[name]
		if !ok {
			missing = append(missing, name)
			continue
		}
		if (d.typ == "counter") != strings.HasSuffix(name, "_total") {
			t.Errorf("%s is documented as a %s: counters, and only counters, end in _total", name, d.typ)
		}
		for _, l := range d.labels {
			if !contains(labels, l) {
				t.Errorf("%s is documented with label %q; registered labels %v", name, l, labels)
			}
		}
	}
	sort.Strings(missing)
	sort.Strings(undocumented)
	if len(missing) > 0 {
		t.Errorf("documented but not registered: %v", missing)
	}
	if len(undocumented) > 0 {
		t.Errorf("registered but not documented: %v", undocumented)
	}
	if len(docs) < 20 {
		t.Errorf("only %d metrics parsed from docs/metrics.md: the table format changed?", len(docs))
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}
