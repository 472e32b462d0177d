package v1

import (
	"strings"
	"testing"
	"time"
)

func TestMonitorConfigParsesAndValidates(t *testing.T) {
	c := DefaultMonitor()
	c.NodeName = "node-1"
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	err := ParseMonitor([]byte("version: v1\nlistenAddress: 127.0.0.1:9999\nenforcement:\n  policy: kill\n  grace: 2s\n"), c)
	if err != nil || c.ListenAddress != "127.0.0.1:9999" || c.Enforcement.Policy != PolicyKill ||
		c.Enforcement.Grace.Duration != 2*time.Second || c.Enforcement.Interval.Duration != 2*time.Second {
		t.Fatalf("%+v %v", c, err)
	}
}

func TestMonitorConfigErrorsNameTheField(t *testing.T) {
	for in, field := range map[string]string{
		"version: v2\n":                                    "version",
		"version: v1\nenforcment: {}\n":                    "enforcment",
		"version: v1\nreapInterval: soon\n":                "reapInterval",
		"version: v1\nenforcement: {toleranceMiB: lots}\n": "toleranceMiB",
	} {
		c := DefaultMonitor()
		if err := ParseMonitor([]byte(in), c); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%q: %v (want an error naming %s)", in, err, field)
		}
	}
	c := DefaultMonitor()
	c.NodeName = ""
	c.StateDir = "rel"
	c.Enforcement.Policy = "shoot"
	c.Enforcement.ToleranceMiB = -1
	c.ReapInterval = Duration{}
	err := c.Validate()
	for _, field := range []string{"nodeName", "stateDir", "enforcement.policy", "enforcement.toleranceMiB", "reapInterval"} {
		if err == nil || !strings.Contains(err.Error(), field+":") {
			t.Errorf("Validate: %v, want %s named", err, field)
		}
	}
}

// toleranceMiB is shifted into bytes and added to every cap: a value past
// what uint64 bytes hold wrapped around, so a container inside its cap
// counted as over it (and under kill was killed).
func TestMonitorToleranceMustFitInBytes(t *testing.T) {
	c := DefaultMonitor()
	c.NodeName = "node-1"
	c.Enforcement.ToleranceMiB = 1<<44 - 1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "enforcement.toleranceMiB:") {
		t.Fatalf("Validate: %v, want enforcement.toleranceMiB named", err)
	}
	c.Enforcement.ToleranceMiB = 1 << 20 // 1 TiB: larger than any GPU, still valid
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
