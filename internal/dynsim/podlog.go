package dynsim

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/tessera-gpu/tessera/internal/priority"
)

// podLogHeader names the columns of a pod log: one row per reported pod
// (arrived after the warm-up) that started, in name order. first_start_s is
// its first start; wait_s all its pending time (evictions to restarts
// included, as in the statistics); evictions how often it was preempted;
// by_p0..by_p3 by which class; reserved whether it ever held a reservation.
const podLogHeader = "mode,pod,class,gpus,gpu_milli,run_s,arrive_s,first_start_s,wait_s,evictions,by_p0,by_p1,by_p2,by_p3,reserved\n"

// podRecord is what the pod log says about one job beyond its wait.
type podRecord struct {
	firstStart time.Duration
	evictions  int
	evictedBy  [priority.NumClasses]int
	reserved   bool
}

// writePodLog writes the log of a finished run: called before the waits
// are sorted into the class statistics, so each pod's entry is its own.
func (s *state) writePodLog(w io.Writer) error {
	if _, err := io.WriteString(w, podLogHeader); err != nil {
		return err
	}
	names := make([]string, 0, len(s.waitAt))
	for name, at := range s.waitAt {
		if at >= 0 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		j, rec := s.byKey[name], s.records[name]
		wait := s.res.class(j.Class).waits[s.waitAt[name]]
		if _, err := fmt.Fprintf(w, "%s,%s,%s,%d,%d,%.0f,%.3f,%.0f,%.3f,%d,%d,%d,%d,%d,%t\n", s.cfg.Mode.Name, name, j.Class,
			j.Request.NumGPU, j.Request.GPUMilli, j.Run.Seconds(), j.Arrive.Seconds(), rec.firstStart.Seconds(), wait.Seconds(),
			rec.evictions, rec.evictedBy[0], rec.evictedBy[1], rec.evictedBy[2], rec.evictedBy[3], rec.reserved); err != nil {
			return fmt.Errorf("pod log: %w", err)
		}
	}
	return nil
}
