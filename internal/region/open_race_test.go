package region

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// A container can truncate its region (mounted read-write) between the node
// side's size check and its first read of the header. OpenRegion must turn
// the fault into an error: before, its header check ran outside Guard and the
// SIGBUS killed the monitor (or the device plugin's collector).
func TestOpenRegionSurvivesATruncationRace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "region")
	if err := CreateRegion(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stop atomic.Bool
	done := make(chan struct{})
	go func() { // the hostile container
		defer close(done)
		for !stop.Load() {
			f.Truncate(0)
			f.Truncate(int64(regionSize))
		}
	}()
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		r, err := OpenRegion(path)
		if err == nil {
			r.Close()
			continue
		}
		if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrBadMagic) {
			t.Errorf("unexpected error class: %v", err)
		}
	}
	stop.Store(true)
	<-done
}
