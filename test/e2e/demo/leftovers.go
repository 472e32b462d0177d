package demo

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LiveChildren lists this process's children that are still alive (not
// zombies): what a finished demo must not leave behind, since everything it
// starts (containers' programs, vgpu-monitor, the simulator) is its child.
func LiveChildren() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	me := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) > 1 && f[1] == me && f[0] != "Z" {
			out = append(out, pid)
		}
	}
	return out, nil
}
