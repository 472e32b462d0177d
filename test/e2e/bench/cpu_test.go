//go:build bench

package bench

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/procfs"

	"github.com/tessera-gpu/tessera/test/e2e/binaries"
	"github.com/tessera-gpu/tessera/test/e2e/cluster"
)

// apiServer names the API server's process.
var apiServer = binaries.KubeAPIServer.Name

// benchClient names this test process in a CPU breakdown: the pod
// creators and the bind watch.
const benchClient = "bench client"

// cpuSample is the CPU time used so far by every process of the cluster,
// this test process, and the whole machine.
type cpuSample struct {
	at     time.Time
	byName map[string]time.Duration
	// machineBusy and machineAll: CPU seconds of all processes on the
	// machine (other jobs too) busy and in all, from /proc/stat.
	machineBusy, machineAll float64
}

func sampleCPU(c *cluster.Cluster) (cpuSample, error) {
	s := cpuSample{at: time.Now(), byName: map[string]time.Duration{}}
	for _, p := range c.Processes() {
		d, err := p.CPUTime()
		if err != nil {
			return s, err
		}
		s.byName[p.Name] = d
	}
	self, err := procfs.Self()
	if err != nil {
		return s, fmt.Errorf("own CPU time: %w", err)
	}
	st, err := self.Stat()
	if err != nil {
		return s, fmt.Errorf("own CPU time: %w", err)
	}
	s.byName[benchClient] = time.Duration(st.CPUTime() * float64(time.Second))
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return s, fmt.Errorf("machine CPU time: %w", err)
	}
	ms, err := fs.Stat()
	if err != nil {
		return s, fmt.Errorf("machine CPU time: %w", err)
	}
	t := ms.CPUTotal
	s.machineBusy = t.User + t.Nice + t.System + t.IRQ + t.SoftIRQ + t.Steal
	s.machineAll = s.machineBusy + t.Idle + t.Iowait
	return s, nil
}

// cpuUse is the CPU time spent between two samples.
type cpuUse struct {
	wall   time.Duration
	byName map[string]time.Duration // processes alive at both samples
	// machineBusy and machineAll: CPU seconds of the whole machine.
	machineBusy, machineAll float64
}

func (after cpuSample) since(before cpuSample) cpuUse {
	u := cpuUse{wall: after.at.Sub(before.at), byName: map[string]time.Duration{},
		machineBusy: after.machineBusy - before.machineBusy, machineAll: after.machineAll - before.machineAll}
	for name, d := range after.byName {
		if b, ok := before.byName[name]; ok {
			u.byName[name] = d - b
		}
	}
	return u
}

// String lists the processes by CPU seconds, largest first, then the
// machine: how busy it was and how much of that was other jobs.
func (u cpuUse) String() string {
	names := slices.Collect(maps.Keys(u.byName))
	slices.SortFunc(names, func(a, b string) int { return int(u.byName[b] - u.byName[a]) })
	var sb strings.Builder
	var ours float64
	for _, n := range names {
		fmt.Fprintf(&sb, "%s %.1f s, ", n, u.byName[n].Seconds())
		ours += u.byName[n].Seconds()
	}
	fmt.Fprintf(&sb, "in %.1f s wall; machine busy %.1f of %.1f CPU-s (%.1f by other jobs)",
		u.wall.Seconds(), u.machineBusy, u.machineAll, u.machineBusy-ours)
	return sb.String()
}
