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
	c.Arbiter.RealtimePriority = 100
	c.Arbiter.TurnGrace = Duration{-time.Millisecond}
	c.Arbiter.MemoryLimitMiB = 4
	c.Arbiter.HandOverPoll = Duration{2 * time.Millisecond} // longer than the tick
	err := c.Validate()
	for _, field := range []string{"nodeName", "stateDir", "enforcement.policy", "enforcement.toleranceMiB", "reapInterval",
		"arbiter.realtimePriority", "arbiter.turnGrace", "arbiter.memoryLimitMiB", "arbiter.handOverPoll"} {
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

// With a tolerance of 0 a legitimate process is killed: a hooked process
// holds its CUDA context before its first charge claims a slot (no_region
// past the grace while it loads a model), and a container at its cap holds
// its contexts on top (over_cap). The defaults must cover a context, and
// kill with less needs the operator's explicit opt-in.
func TestKillNeedsAToleranceThatCoversAContext(t *testing.T) {
	c := DefaultMonitor()
	c.NodeName = "node-1"
	if c.Enforcement.ToleranceMiB < MinKillToleranceMiB {
		t.Fatalf("default toleranceMiB %d is less than a context (%d MiB)", c.Enforcement.ToleranceMiB, MinKillToleranceMiB)
	}
	c.Enforcement.Policy = PolicyKill
	if err := c.Validate(); err != nil {
		t.Fatalf("kill with the default tolerance: %v", err)
	}
	for _, tol := range []int{0, MinKillToleranceMiB - 1} {
		c.Enforcement.ToleranceMiB = tol
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "enforcement.toleranceMiB:") || !strings.Contains(err.Error(), "enforcement.allowLowTolerance") {
			t.Errorf("kill with toleranceMiB %d: %v, want an error naming enforcement.toleranceMiB and the opt-in", tol, err)
		}
	}
	c.Enforcement.AllowLowTolerance = true // contexts charged by the plugin's contextReserveMiB, say
	if err := c.Validate(); err != nil {
		t.Errorf("kill with toleranceMiB 0 and the opt-in: %v", err)
	}
	c.Enforcement = DefaultMonitor().Enforcement
	c.Enforcement.ToleranceMiB = 0 // report kills nothing: any tolerance is fine
	if err := c.Validate(); err != nil {
		t.Errorf("report with toleranceMiB 0: %v", err)
	}
	if err := ParseMonitor([]byte("version: v1\nenforcement: {policy: kill, toleranceMiB: 0, allowLowTolerance: true}\n"), c); err != nil || !c.Enforcement.AllowLowTolerance {
		t.Errorf("allowLowTolerance not parsed: %+v %v", c.Enforcement, err)
	}
}

func TestMonitorBalloonConfig(t *testing.T) {
	c := DefaultMonitor()
	c.NodeName = "node-1"
	if err := ParseMonitor([]byte("version: v1\nballoon:\n  enabled: true\n  waitMs: 5000\n"), c); err != nil {
		t.Fatal(err)
	}
	if !c.Balloon.Enabled || c.Balloon.WaitMS != 5000 || c.Balloon.Settle.Duration != 10*time.Minute {
		t.Fatalf("%+v", c.Balloon)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.Balloon.WaitMS = 61000
	c.Balloon.Settle = Duration{time.Hour}
	c.Balloon.MarginPercent = 100
	err := c.Validate()
	for _, field := range []string{"balloon.waitMs", "balloon.settle", "balloon.marginPercent"} {
		if err == nil || !strings.Contains(err.Error(), field+":") {
			t.Errorf("Validate: %v, want %s named", err, field)
		}
	}
}

func TestMonitorContainerdAndKubernetesFields(t *testing.T) {
	c := DefaultMonitor()
	c.NodeName = "n"
	if c.Containerd.Socket != "/run/containerd/containerd.sock" || c.Containerd.Namespace != "k8s.io" {
		t.Fatalf("defaults: %+v", c.Containerd)
	}
	if err := ParseMonitor([]byte("version: v1\ncontainerd: {socket: \"\"}\nkubernetes: {kubeconfig: /etc/kc}\n"), c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil || c.Containerd.Socket != "" || c.Kubernetes.Kubeconfig != "/etc/kc" {
		t.Fatalf("containerd off: %v %+v", err, c)
	}
	c.Containerd = ContainerdConfig{Socket: "run/c.sock"}
	err := c.Validate()
	for _, field := range []string{"containerd.socket", "containerd.namespace"} {
		if err == nil || !strings.Contains(err.Error(), field+":") {
			t.Errorf("Validate: %v, want %s named", err, field)
		}
	}
	if err := ParseMonitor([]byte("version: v1\ncontainerd: {sockett: /x}\n"), DefaultMonitor()); err == nil || !strings.Contains(err.Error(), "sockett") {
		t.Errorf("unknown field: %v", err)
	}
}

// memoryLimitMiB is shifted into bytes for the arbiter's process: a value
// past what int64 bytes hold wrapped to 0 or below, which the process then
// refused (--memory-limit below 1 MiB) at every start: the monitor retried
// for ever and no arbiter ever ran, although Validate had passed.
func TestArbiterMemoryLimitMustFitInBytes(t *testing.T) {
	c := DefaultMonitor()
	c.NodeName = "node-1"
	c.Arbiter.MemoryLimitMiB = 1 << 44
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "arbiter.memoryLimitMiB:") {
		t.Fatalf("Validate: %v, want arbiter.memoryLimitMiB named", err)
	}
	c.Arbiter.MemoryLimitMiB = MaxArbiterMemoryLimitMiB
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate at the largest memoryLimitMiB: %v", err)
	}
}

// A config file written before arbiter.handOverPoll existed keeps loading:
// the field takes its default, which is within any tick the file may set
// (the tick's floor is the default poll).
func TestArbiterHandOverPollDefaultsForOldFiles(t *testing.T) {
	for _, tick := range []string{"100us", "1ms", "5ms"} {
		c := DefaultMonitor()
		c.NodeName = "node-1"
		if err := ParseMonitor([]byte("version: v1\narbiter:\n  tick: "+tick+"\n  quantum: 10ms\n  idleAfter: 5ms\n"), c); err != nil {
			t.Fatalf("tick %s: %v", tick, err)
		}
		if c.Arbiter.HandOverPoll.Duration != 100*time.Microsecond {
			t.Errorf("tick %s: handOverPoll %v, want the default 100µs", tick, c.Arbiter.HandOverPoll)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("tick %s: %v", tick, err)
		}
	}
	c := DefaultMonitor()
	if err := ParseMonitor([]byte("version: v1\narbiter:\n  handOverPoll: 250us\n"), c); err != nil || c.Arbiter.HandOverPoll.Duration != 250*time.Microsecond {
		t.Errorf("handOverPoll: 250us read as %v (%v)", c.Arbiter.HandOverPoll, err)
	}
}
