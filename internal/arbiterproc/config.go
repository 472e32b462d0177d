package arbiterproc

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/tessera-gpu/tessera/internal/arbiter"
)

// Subcommand is the first argument that makes vgpu-monitor the arbiter's
// process (RunChild) instead of the monitor.
const Subcommand = "arbiter"

// Config is everything the arbiter's process runs with: the monitor's
// validated configuration (api/config/v1 ArbiterConfig) and what the
// supervisor adds. It travels as flags (Args, Parse), so that `ps` shows
// what the process runs with.
type Config struct {
	StateDir string
	Tick     time.Duration
	// HandOverPoll: how soon the loop steps again while a hand-over drains.
	HandOverPoll time.Duration
	Rescan       time.Duration
	Policy       arbiter.Policy
	// RealtimePriority: SCHED_FIFO priority of every thread (1..99); 0 none.
	RealtimePriority int
	// MemoryLimit is the Go memory limit in bytes (the collector is off
	// below it).
	MemoryLimit int64
	// ParentPID is the supervisor's pid: the process exits once its parent
	// is another (the supervisor died, the process was reparented).
	ParentPID int
	// LogLevel and LogFormat as api/config/v1 LogConfig.
	LogLevel, LogFormat string
}

// Args is c as the subcommand's arguments (after Subcommand).
func (c Config) Args() []string {
	return []string{
		"--state-dir=" + c.StateDir,
		"--tick=" + c.Tick.String(),
		"--hand-over-poll=" + c.HandOverPoll.String(),
		"--rescan=" + c.Rescan.String(),
		"--quantum=" + c.Policy.Quantum.String(),
		"--idle-after=" + c.Policy.IdleAfter.String(),
		"--priority-hold=" + c.Policy.PriorityHold.String(),
		"--priority-floor=" + strconv.FormatFloat(c.Policy.PriorityFloor, 'g', -1, 64),
		"--turn-grace=" + c.Policy.TurnGrace.String(),
		"--realtime-priority=" + strconv.Itoa(c.RealtimePriority),
		"--memory-limit=" + strconv.FormatInt(c.MemoryLimit, 10),
		"--parent-pid=" + strconv.Itoa(c.ParentPID),
		"--log-level=" + c.LogLevel,
		"--log-format=" + c.LogFormat,
	}
}

// Parse reads the subcommand's arguments back and validates them; an error
// names the flag.
func Parse(args []string) (Config, error) {
	var c Config
	fs := flag.NewFlagSet(Subcommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.StateDir, "state-dir", "", "state directory")
	fs.DurationVar(&c.Tick, "tick", 0, "how often grants are written")
	fs.DurationVar(&c.HandOverPoll, "hand-over-poll", 0, "how soon to step again while a hand-over drains")
	fs.DurationVar(&c.Rescan, "rescan", 0, "how often the state directory is listed")
	fs.DurationVar(&c.Policy.Quantum, "quantum", 0, "longest turn")
	fs.DurationVar(&c.Policy.IdleAfter, "idle-after", 0, "idle after no demand for this long")
	fs.DurationVar(&c.Policy.PriorityHold, "priority-hold", 0, "lower priorities stay throttled this long")
	fs.Float64Var(&c.Policy.PriorityFloor, "priority-floor", 0, "share (0..1) a throttled lower priority keeps")
	fs.DurationVar(&c.Policy.TurnGrace, "turn-grace", 0, "grace past a turn's end in its grant's deadline")
	fs.IntVar(&c.RealtimePriority, "realtime-priority", 0, "SCHED_FIFO priority of every thread")
	fs.Int64Var(&c.MemoryLimit, "memory-limit", 0, "Go memory limit, bytes")
	fs.IntVar(&c.ParentPID, "parent-pid", 0, "the supervisor's pid")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level")
	fs.StringVar(&c.LogFormat, "log-format", "json", "log format: json or text")
	if err := fs.Parse(args); err != nil {
		return Config{}, fmt.Errorf("%s: %w", Subcommand, err)
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("%s: unexpected argument %q", Subcommand, fs.Arg(0))
	}
	return c, c.Validate()
}

// Validate names every bad field by its flag.
func (c Config) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if c.StateDir == "" {
		bad("state-dir", "empty")
	}
	positive := func(flag string, d time.Duration) {
		if d <= 0 {
			bad(flag, "%s is not positive", d)
		}
	}
	positive("tick", c.Tick)
	if c.HandOverPoll <= 0 || c.HandOverPoll > c.Tick {
		bad("hand-over-poll", "%s outside (0, tick %s]", c.HandOverPoll, c.Tick)
	}
	positive("rescan", c.Rescan)
	positive("quantum", c.Policy.Quantum)
	positive("idle-after", c.Policy.IdleAfter)
	if c.Policy.PriorityHold < 0 {
		bad("priority-hold", "negative %s", c.Policy.PriorityHold)
	}
	if c.Policy.TurnGrace < 0 {
		bad("turn-grace", "negative %s", c.Policy.TurnGrace)
	}
	if !(c.Policy.PriorityFloor >= 0 && c.Policy.PriorityFloor <= 1) {
		bad("priority-floor", "%v outside 0..1", c.Policy.PriorityFloor)
	}
	if c.RealtimePriority < 0 || c.RealtimePriority > 99 {
		bad("realtime-priority", "%d outside 0..99", c.RealtimePriority)
	}
	if c.MemoryLimit < 1<<20 {
		bad("memory-limit", "%d bytes is below 1 MiB", c.MemoryLimit)
	}
	if c.ParentPID <= 1 {
		bad("parent-pid", "%d is not a supervisor's pid", c.ParentPID)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		bad("log-level", "%q is not a level (debug, info, warn, error)", c.LogLevel)
	}
	switch c.LogFormat {
	case "json", "text":
	default:
		bad("log-format", "%q is neither json nor text", c.LogFormat)
	}
	return errors.Join(errs...)
}
