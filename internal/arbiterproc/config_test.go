package arbiterproc

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/arbiter"
)

func validConfig() Config {
	return Config{StateDir: "/var/lib/tessera", Tick: time.Millisecond, HandOverPoll: 100 * time.Microsecond, Rescan: 200 * time.Millisecond,
		Policy: arbiter.Policy{Quantum: 10 * time.Millisecond, IdleAfter: 5 * time.Millisecond, PriorityHold: 100 * time.Millisecond,
			PriorityFloor: 0.05, TurnGrace: 2 * time.Millisecond},
		RealtimePriority: 5, MemoryLimit: 32 << 20, ParentPID: 4242, LogLevel: "info", LogFormat: "json"}
}

func TestArgsParseRoundTrip(t *testing.T) {
	c := validConfig()
	got, err := Parse(c.Args())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("Parse(Args(c)) = %+v, want %+v", got, c)
	}
}

func TestBadValuesAreNamed(t *testing.T) {
	c := validConfig()
	c.StateDir, c.Tick, c.Policy.Quantum, c.Policy.PriorityFloor = "", 0, -time.Millisecond, 1.5
	c.RealtimePriority, c.MemoryLimit, c.ParentPID, c.LogFormat, c.LogLevel = 100, 1000, 1, "xml", "loud"
	_, err := Parse(c.Args())
	for _, flag := range []string{"--state-dir", "--tick", "--hand-over-poll", "--quantum", "--priority-floor", "--realtime-priority",
		"--memory-limit", "--parent-pid", "--log-format", "--log-level"} {
		if err == nil || !strings.Contains(err.Error(), flag+":") {
			t.Errorf("Parse: %v, want %s named", err, flag)
		}
	}
	for _, args := range [][]string{{"--tick=soon"}, {"--nope=1"}, append(validConfig().Args(), "extra")} {
		if _, err := Parse(args); err == nil {
			t.Errorf("Parse(%q) accepted", args)
		}
	}
}

// FuzzParse: whatever the arguments, Parse either refuses them or returns a
// configuration that survives Args and Parse unchanged.
func FuzzParse(f *testing.F) {
	f.Add(strings.Join(validConfig().Args(), "\x00"))
	f.Add("--tick=1ms\x00--priority-floor=NaN")
	f.Add("--state-dir=\x00--memory-limit=-1")
	f.Fuzz(func(t *testing.T, joined string) {
		c, err := Parse(strings.Split(joined, "\x00"))
		if err != nil {
			return
		}
		again, err := Parse(c.Args())
		if err != nil {
			t.Fatalf("Parse accepted %q but not its own Args: %v", joined, err)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("round trip: %+v, want %+v", again, c)
		}
	})
}
