package v1

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func resolve(t *testing.T, body string, args ...string) (*Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	f := BindFlags(fs)
	if body != "" {
		args = append([]string{"--config", writeFile(t, body)}, args...)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f.Resolve()
}

func TestFileThenFlags(t *testing.T) {
	c, err := resolve(t, `
version: v1
nodeName: node-a
splitCount: 4
memoryUnit: 256Mi
placement: spread
health:
  enabled: true
  ignoredXids: [13]
  recoverAfter: 5m
`, "--split-count", "7")
	if err != nil {
		t.Fatal(err)
	}
	if c.SplitCount != 7 {
		t.Errorf("splitCount = %d, want the flag's 7", c.SplitCount)
	}
	if c.MemoryUnitBytes() != 256<<20 || c.Placement != PlacementSpread || c.NodeName != "node-a" {
		t.Errorf("file values lost: %+v", c)
	}
	if c.Health.RecoverAfter.Duration != 5*time.Minute || len(c.Health.IgnoredXids) != 1 {
		t.Errorf("health = %+v", c.Health)
	}
	if c.HookLibrary != Default().HookLibrary {
		t.Errorf("absent field lost its default: %q", c.HookLibrary)
	}
}

func TestDefaultsNeedOnlyNodeName(t *testing.T) {
	c, err := resolve(t, "", "--node-name", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if c.SplitCount != 10 || c.MemoryUnitBytes() != 1<<30 || len(c.Health.IgnoredXids) != 6 ||
		c.ProcRoot != "/proc" || c.DevRoot != "/dev" || c.RediscoverInterval.Duration != time.Minute {
		t.Fatalf("defaults = %+v", c)
	}
}

func TestEveryInvalidFieldIsNamed(t *testing.T) {
	_, err := resolve(t, `
version: v1
nodeName: ""
splitCount: 0
memoryUnit: 100Mi
reservedMemory: -1Gi
placement: random
migStrategy: single
hookLibrary: relative/lib.so
stateDir: /var/lib/tessera
contextReserveMiB: -5
hookLogLevel: loud
reconcileInterval: 10ms
health:
  recoverAfter: -1s
log:
  level: trace
  format: xml
`)
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, field := range []string{"nodeName:", "splitCount:", "memoryUnit:", "reservedMemory:", "placement:", "migStrategy:",
		"hookLibrary:", "contextReserveMiB:", "hookLogLevel:", "reconcileInterval:", "health.recoverAfter:", "log.level:", "log.format:"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error does not name %s: %v", field, err)
		}
	}
}

func TestRejects(t *testing.T) {
	cases := map[string]struct {
		body string
		args []string
		want string
	}{
		"unknown field":   {"version: v1\nnodeName: n\nsplitCnt: 3\n", nil, "splitCnt"},
		"wrong version":   {"version: v2\nnodeName: n\n", nil, "version: unsupported"},
		"no version":      {"nodeName: n\n", nil, "version: unsupported"},
		"bad yaml":        {"version: v1\n  nodeName: [\n", nil, "config"},
		"unit not MiB":    {"version: v1\nnodeName: n\nmemoryUnit: 200000000\n", nil, "memoryUnit: 200M is not a whole number of MiB"},
		"bad duration":    {"version: v1\nnodeName: n\nreconcileInterval: soon\n", nil, "invalid duration"},
		"bad flag int":    {"version: v1\nnodeName: n\n", []string{"--split-count", "x"}, "--split-count: not an integer"},
		"bad flag xid":    {"version: v1\nnodeName: n\n", []string{"--health-ignored-xids", "13,abc"}, `--health-ignored-xids: not an Xid: "abc"`},
		"bad flag unit":   {"version: v1\nnodeName: n\n", []string{"--memory-unit", "lots"}, "--memory-unit: not a quantity"},
		"flag invalid v.": {"version: v1\nnodeName: n\n", []string{"--placement", "x"}, "placement:"},
		"bad node name":   {"version: v1\nnodeName: Node_A\n", nil, `nodeName: "Node_A"`},
		"bad metrics":     {"version: v1\nnodeName: n\nmetricsAddress: nine\n", nil, "metricsAddress:"},
		"single MIG":      {"version: v1\nnodeName: n\nmigStrategy: single\n", nil, `migStrategy: "single" is not supported`},
		"unknown MIG":     {"version: v1\nnodeName: n\nmigStrategy: all\n", []string{}, `migStrategy: "all" (want "none" or "mixed")`},
		"rediscover 10ms": {"version: v1\nnodeName: n\n", []string{"--rediscover-interval", "10ms"}, "rediscoverInterval: 10ms below 1s"},
		"relative proc":   {"version: v1\nnodeName: n\nprocRoot: proc\n", nil, `procRoot: "proc" is not an absolute path`},
		"bad flag spill":  {"version: v1\nnodeName: n\n", []string{"--allow-gpu-spill", "sometimes"}, `--allow-gpu-spill: not true or false: "sometimes"`},
		"relative dev":    {"version: v1\nnodeName: n\n", []string{"--dev-root", "dev"}, `devRoot: "dev" is not an absolute path`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := resolve(t, tc.body, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestMissingFile(t *testing.T) {
	if _, err := Load("/nonexistent/tessera.yaml"); err == nil || !strings.Contains(err.Error(), "/nonexistent/tessera.yaml") {
		t.Fatalf("error = %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("version: v1\nnodeName: n\nsplitCount: 3\nmemoryUnit: 512Mi\n")
	f.Add("version: v1\nhealth: {ignoredXids: [1,2]}\n")
	f.Fuzz(func(t *testing.T, s string) {
		c := Default()
		if err := Parse([]byte(s), c); err != nil {
			return
		}
		_ = c.Validate() // must not panic on anything the parser accepted
	})
}

func TestRediscoveryCanBeDisabledAndRootsSet(t *testing.T) {
	c, err := resolve(t, "version: v1\nnodeName: n\nrediscoverInterval: 0s\nprocRoot: /host/proc\n", "--dev-root", "/host/dev")
	if err != nil {
		t.Fatal(err)
	}
	if c.RediscoverInterval.Duration != 0 || c.ProcRoot != "/host/proc" || c.DevRoot != "/host/dev" {
		t.Fatalf("config = %+v", c)
	}
}

// TestFileValueErrorsNameTheField: a value of the wrong form in the file
// (a duration, a quantity) is reported with its field, as every other
// invalid value is.
func TestFileValueErrorsNameTheField(t *testing.T) {
	for body, field := range map[string]string{
		"reconcileInterval: soon\n":      "reconcileInterval",
		"reconcileInterval: 30\n":        "reconcileInterval",
		"rediscoverInterval: \"\"\n":     "rediscoverInterval",
		"health:\n  recoverAfter: x\n":   "health.recoverAfter",
		"memoryUnit: lots\n":             "memoryUnit",
		"reservedMemory: 2 Gi\n":         "reservedMemory",
		"splitCount: ten\n":              "splitCount",
		"allowGPUSpill: maybe\n":         "allowGPUSpill",
		"health:\n  ignoredXids: [-1]\n": "health.ignoredXids",
		"deviceListStrategy: cdi\n":      "deviceListStrategy",
		"cdiKind: gpu\n":                 "cdiKind",
		"cdiKind: nvidia.com/g p u\n":    "cdiKind",
		"cdiKind: /gpu\n":                "cdiKind",
	} {
		_, err := resolve(t, "version: v1\nnodeName: n\n"+body)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%q: error %v does not name %s", body, err, field)
		}
	}
}

// TestGPUSpillIsOffUnlessChosen: spreading a single-GPU request over GPUs
// is an explicit choice, in the file or by flag, and the flag wins.
func TestGPUSpillIsOffUnlessChosen(t *testing.T) {
	c, err := resolve(t, "", "--node-name", "n")
	if err != nil || c.AllowGPUSpill {
		t.Fatalf("default allowGPUSpill = %v (err %v), want false", c != nil && c.AllowGPUSpill, err)
	}
	if c, err = resolve(t, "version: v1\nnodeName: n\nallowGPUSpill: true\n"); err != nil || !c.AllowGPUSpill {
		t.Fatalf("file allowGPUSpill: true not applied (err %v)", err)
	}
	if c, err = resolve(t, "version: v1\nnodeName: n\nallowGPUSpill: true\n", "--allow-gpu-spill=false"); err != nil || c.AllowGPUSpill {
		t.Fatalf("--allow-gpu-spill=false did not override the file (err %v)", err)
	}
	if c, err = resolve(t, "", "--node-name", "n", "--allow-gpu-spill", "true"); err != nil || !c.AllowGPUSpill {
		t.Fatalf("--allow-gpu-spill true not applied (err %v)", err)
	}
}

// TestDeviceListStrategy: envvar and the NVIDIA kind by default; the CDI
// strategies and another kind from the file or flags.
func TestDeviceListStrategy(t *testing.T) {
	c, err := resolve(t, "", "--node-name", "n")
	if err != nil || c.DeviceListStrategy != DeviceListEnvVar || c.CDIKind != "nvidia.com/gpu" {
		t.Fatalf("defaults %q %q (err %v)", c.DeviceListStrategy, c.CDIKind, err)
	}
	c, err = resolve(t, "version: v1\nnodeName: n\ndeviceListStrategy: cdi-annotations\ncdiKind: sim.tessera.io/gpu\n")
	if err != nil || c.DeviceListStrategy != DeviceListCDIAnnotations || c.CDIKind != "sim.tessera.io/gpu" {
		t.Fatalf("file: %+v (err %v)", c, err)
	}
	if c, err = resolve(t, "", "--node-name", "n", "--device-list-strategy", "cdi-cri"); err != nil || c.DeviceListStrategy != DeviceListCDICRI {
		t.Fatalf("flag: %v (err %v)", c, err)
	}
}
