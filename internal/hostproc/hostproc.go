// Package hostproc reads the node's process table from /proc as the node agent
// sees it (the host pid namespace): for each process its pid in every namespace
// down to its own (NSpid), its start time, whether it is a finished zombie, and
// its cgroup, which names the container it runs in. Regions record pids as the
// container sees them; this table is how the node side recognises them.
package hostproc

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Process is one entry of the table.
type Process struct {
	PID       uint32 // in the reader's (host) pid namespace
	NSPID     uint32 // in the process's own, innermost pid namespace
	StartTime uint64 // /proc/<pid>/stat field 22, clock ticks since boot
	Finished  bool   // a zombie with no thread left: its GPU memory is gone
	Cgroup    string // the unified (v2) or first v1 cgroup path
}

// Table is a snapshot of the processes. Cgroups are read when a process is
// first looked up with Get (most passes need few of them).
type Table struct {
	procRoot string
	byPID    map[uint32]Process
	cgroupOK map[uint32]bool // Cgroup of byPID[pid] is known
	// byNSPID indexes by innermost pid; a pid can exist in many namespaces.
	byNSPID map[uint32][]Process
	// Incomplete is set when some process could not be read for a reason other
	// than having exited: liveness answers "alive" for everything then.
	Incomplete bool
}

// Scan reads every process under procRoot ("/proc").
func Scan(procRoot string) (*Table, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("process table %s: %w", procRoot, err)
	}
	t := &Table{procRoot: procRoot, byPID: make(map[uint32]Process, len(entries)), byNSPID: make(map[uint32][]Process, len(entries)),
		cgroupOK: map[uint32]bool{}}
	for _, e := range entries {
		pid, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || pid == 0 {
			continue
		}
		p, err := readIdentity(procRoot, uint32(pid))
		switch {
		case gone(err):
			continue
		case err != nil:
			t.Incomplete = true
			continue
		}
		t.add(p)
	}
	return t, nil
}

// NewTable builds a table from known processes (tests, and callers that
// already hold them).
func NewTable(procs ...Process) *Table {
	t := &Table{byPID: map[uint32]Process{}, byNSPID: map[uint32][]Process{}, cgroupOK: map[uint32]bool{}}
	for _, p := range procs {
		t.add(p)
		t.cgroupOK[p.PID] = true
	}
	return t
}

func (t *Table) add(p Process) {
	t.byPID[p.PID] = p
	t.byNSPID[p.NSPID] = append(t.byNSPID[p.NSPID], p)
}

// Len is the number of processes read.
func (t *Table) Len() int { return len(t.byPID) }

// Get returns the process with this host pid, with its cgroup. Not safe for
// concurrent use (it fills the cgroup in).
func (t *Table) Get(pid uint32) (Process, bool) {
	p, ok := t.byPID[pid]
	if ok && !t.cgroupOK[pid] {
		if cg, err := os.ReadFile(filepath.Join(t.procRoot, strconv.FormatUint(uint64(pid), 10), "cgroup")); err == nil {
			p.Cgroup = ParseCgroup(cg)
		}
		t.byPID[pid] = p
		t.cgroupOK[pid] = true
	}
	return p, ok
}

// Match returns the unfinished processes whose innermost pid is nspid and that
// started at startTime (0: a slot still being claimed; any start time).
func (t *Table) Match(nspid uint32, startTime uint64) []Process {
	var out []Process
	for _, p := range t.byNSPID[nspid] {
		if !p.Finished && (startTime == 0 || p.StartTime == startTime) {
			out = append(out, p)
		}
	}
	return out
}

// Alive is a region.Liveness for slots written in any pid namespace below the
// reader's: a slot is alive while some unfinished process has its innermost pid
// and start time. It errs towards alive: a pid shared by two containers keeps
// both slots, and an incomplete table keeps everything. Never take a live
// process's usage away.
func (t *Table) Alive(nspid uint32, startTime uint64) bool {
	return t.Incomplete || len(t.Match(nspid, startTime)) > 0
}

// Read reads one process, with its cgroup.
func Read(procRoot string, pid uint32) (Process, error) {
	p, err := readIdentity(procRoot, pid)
	if err != nil {
		return p, err
	}
	if cg, err := os.ReadFile(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "cgroup")); err == nil {
		p.Cgroup = ParseCgroup(cg)
	}
	return p, nil
}

// readIdentity reads a process's pids, start time and state.
func readIdentity(procRoot string, pid uint32) (Process, error) {
	dir := filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return Process{}, err
	}
	st, err := ParseStat(stat)
	if err != nil {
		return Process{}, fmt.Errorf("%s/stat: %w", dir, err)
	}
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return Process{}, err
	}
	nspid, err := ParseNSPID(status)
	if err != nil {
		return Process{}, fmt.Errorf("%s/status: %w", dir, err)
	}
	return Process{PID: pid, NSPID: nspid, StartTime: st.StartTime, Finished: st.Finished()}, nil
}

func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// Stat is what the table needs of /proc/<pid>/stat.
type Stat struct {
	State     byte
	Threads   uint64
	StartTime uint64
}

// Finished says the process has exited: a zombie whose last thread is gone. A
// thread-group leader that called pthread_exit is a zombie too while its other
// threads (and its GPU memory) live on.
func (s Stat) Finished() bool { return (s.State == 'Z' || s.State == 'X') && s.Threads <= 1 }

// ParseStat parses a /proc/<pid>/stat line. comm (field 2) may hold spaces and
// parentheses: fields are counted from the last ')'.
func ParseStat(data []byte) (Stat, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return Stat{}, errors.New("no command field")
	}
	f := strings.Fields(string(data[i+2:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("%d fields after the command, want at least 20", len(f))
	}
	threads, err := strconv.ParseUint(f[17], 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("field 20 (num_threads): %w", err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("field 22 (starttime): %w", err)
	}
	return Stat{State: f[0][0], Threads: threads, StartTime: start}, nil
}

// ParseNSPID returns the innermost pid of the NSpid line of /proc/<pid>/status
// (the process's pid in its own namespace; the only one without namespaces).
func ParseNSPID(status []byte) (uint32, error) {
	for line := range bytes.Lines(status) {
		rest, ok := bytes.CutPrefix(line, []byte("NSpid:"))
		if !ok {
			continue
		}
		f := strings.Fields(string(rest))
		if len(f) == 0 {
			return 0, errors.New("empty NSpid line")
		}
		pid, err := strconv.ParseUint(f[len(f)-1], 10, 32)
		if err != nil || pid == 0 {
			return 0, fmt.Errorf("NSpid %q is not a pid", f[len(f)-1])
		}
		return uint32(pid), nil
	}
	return 0, errors.New("no NSpid line (kernel older than 4.1?)")
}

// ParseCgroup returns the path of the unified hierarchy ("0::/path"), or on a
// cgroup v1 host the first hierarchy's path.
func ParseCgroup(data []byte) string {
	first := ""
	for line := range bytes.Lines(data) {
		parts := strings.SplitN(strings.TrimRight(string(line), "\n"), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			return parts[2]
		}
		if first == "" {
			first = parts[2]
		}
	}
	return first
}
