package mig

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const sampleMinors = `config 1
monitor 2
gpu0/gi1/access 12
gpu0/gi1/ci0/access 13
gpu0/gi2/access 21
gpu0/gi2/ci0/access 22
gpu3/gi1/access 39
gpu3/gi1/ci0/access 40
`

func TestParseMinors(t *testing.T) {
	m, err := ParseMinors(strings.NewReader(sampleMinors), "mig-minors")
	if err != nil {
		t.Fatal(err)
	}
	if m["config"] != 1 || m["monitor"] != 2 || len(m) != 8 {
		t.Fatalf("parsed %v", m)
	}
	got, err := m.AccessMinors(Location{ParentMinor: 3, GI: 1, CI: 0})
	if err != nil || len(got) != 2 || got[0] != 39 || got[1] != 40 {
		t.Fatalf("GPU 3 GI 1 CI 0 → %v, %v", got, err)
	}
	if _, err := m.AccessMinors(Location{ParentMinor: 3, GI: 2, CI: 0}); err == nil || !strings.Contains(err.Error(), "gpu3/gi2/access") {
		t.Fatalf("missing GI must name the capability: %v", err)
	}
	if _, err := m.AccessMinors(Location{ParentMinor: 0, GI: 1, CI: 1}); err == nil || !strings.Contains(err.Error(), "gpu0/gi1/ci1/access") {
		t.Fatalf("missing CI must name the capability: %v", err)
	}
	if p := CapDevicePath("/host/dev", 13); p != "/host/dev/nvidia-caps/nvidia-cap13" {
		t.Fatalf("device path %s", p)
	}
}

func TestParseMinorsRejectsWithLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"config 1\ngpu0/gi1/access x\n", "f:2:"},
		{"config 1\n\ngpu0/gi1/access\n", "f:3:"},
		{"gpu0/gi1/access 3 4\n", "f:1:"},
		{"gpu0/gi1/access -3\n", "bad minor"},
		{"gpu0/gix/access 3\n", `bad "gi" component`},
		{"gpu0/gi1/ci0/ci0/access 3\n", "unknown capability"},
		{"gpu0/gi1/open 3\n", "unknown capability"},
		{"gpu01/gi1/access 3\n", `bad "gpu" component`},
		{"fabric 3\n", "unknown capability"},
		{"config 1\nconfig 2\n", "listed twice"},
	} {
		_, err := ParseMinors(strings.NewReader(tc.in), "f")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.in, err, tc.want)
		}
	}
}

func TestReadMinorsNamesMissingFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadMinors(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, MinorsFile)) {
		t.Fatalf("missing file: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "driver/nvidia-caps"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, MinorsFile), []byte(sampleMinors), 0o644); err != nil {
		t.Fatal(err)
	}
	if m, err := ReadMinors(dir); err != nil || m["gpu0/gi2/ci0/access"] != 22 {
		t.Fatalf("read %v, %v", m, err)
	}
}

// FuzzParseMinors: the parser never panics, and whatever it accepts
// contains only well-formed names with non-negative minors that a
// re-serialisation parses back identically.
func FuzzParseMinors(f *testing.F) {
	f.Add(sampleMinors)
	f.Add("config 1\r\nmonitor 2\r\n")
	f.Add("gpu0/gi1/access 12\ngpu0/gi1/access 12\n")
	f.Add("gpu0/gi/access 1\n")
	f.Add("  gpu7/gi14/ci7/access   4095  \n\n")
	f.Fuzz(func(t *testing.T, in string) {
		m, err := ParseMinors(strings.NewReader(in), "fuzz")
		if err != nil {
			return
		}
		var b strings.Builder
		for name, minor := range m {
			if minor < 0 || checkCapName(name) != nil {
				t.Fatalf("accepted %q %d", name, minor)
			}
			b.WriteString(name + " " + strconv.Itoa(minor) + "\n")
		}
		again, err := ParseMinors(strings.NewReader(b.String()), "again")
		if err != nil || len(again) != len(m) {
			t.Fatalf("round trip: %v, %d vs %d", err, len(again), len(m))
		}
		for k, v := range m {
			if again[k] != v {
				t.Fatalf("round trip %s: %d vs %d", k, again[k], v)
			}
		}
	})
}
