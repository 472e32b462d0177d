package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const chartDir = "../helm/tessera"

func readValues(t *testing.T) []Value {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	vs, err := Values(data)
	if err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	return vs
}

// TestEveryValueIsDocumented: values.yaml parses with every key documented
// (Values fails on one that is not), and the keys the templates rely on are
// among them.
func TestEveryValueIsDocumented(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range readValues(t) {
		if v.Doc == "" {
			t.Errorf("%s: empty documentation", v.Path)
		}
		seen[v.Path] = true
	}
	for _, k := range []string{"image.repository", "image.tag", "node.driver.mode", "node.hostPaths.stateDir",
		"node.devicePlugin.config.deviceListStrategy", "scheduler.replicas", "scheduler.leaderElection.enabled",
		"webhook.enabled", "metrics.serviceMonitor.enabled", "metrics.podMonitor.enabled"} {
		if !seen[k] {
			t.Errorf("%s not documented", k)
		}
	}
}

func TestUndocumentedKeyIsNamed(t *testing.T) {
	_, err := Values([]byte("# -- documented\na: 1\ngroup:\n  # -- fine\n  b: 2\n  c: 3\n"))
	if err == nil || !strings.Contains(err.Error(), "group.c") || !strings.Contains(err.Error(), "line 6") {
		t.Fatalf("err = %v, want group.c at line 6", err)
	}
}

// TestValuesReferenceInSync: docs/operator-guide.md's table is what
// values.yaml generates (`make manifests` rewrites it).
func TestValuesReferenceInSync(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operator-guide.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := ReplaceTable(string(doc), ValuesTable(readValues(t)))
	if err != nil {
		t.Fatal(err)
	}
	if want != string(doc) {
		t.Fatal("docs/operator-guide.md's values reference differs from values.yaml: run `make manifests`")
	}
}

// FuzzValues: any input gives documented values or an error, never a
// panic, and a table of one row per value.
func FuzzValues(f *testing.F) {
	if data, err := os.ReadFile(filepath.Join(chartDir, "values.yaml")); err == nil {
		f.Add(data)
	}
	f.Add([]byte("# -- a\na: 1\nb:\n  # -- c\n  c: [1, {d: e}]\n"))
	f.Add([]byte("a:\n  b:\n"))
	f.Add([]byte("- 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		vs, err := Values(data)
		if err != nil {
			return
		}
		if rows := strings.Count(ValuesTable(vs), "\n"); rows != len(vs)+2 {
			t.Fatalf("%d values, %d table lines", len(vs), rows)
		}
	})
}
