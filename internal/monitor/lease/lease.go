// Package lease makes exactly one node monitor the acting one. During a
// DaemonSet rollout with maxSurge, or with a second copy started by hand, two
// monitors share one state directory; both serve metrics, but only the holder
// of the node lease reaps slots as TESSERA_REAPER_NODE, checks enforcement,
// posts Events and kills. Two reapers could both finish one slot, and the
// later one zero a slot a new process had just claimed; two enforcers would
// count, report and kill twice.
//
// The lease is flock(2) on the state directory itself: the kernel drops it
// when its holder exits, however it exits (SIGKILL, OOM, node agent crash), so
// the standby takes over within one retry interval, and no file has to be
// created to hold it (it works on a full filesystem). The holder also writes
// holder.json (who holds it, for the standby's log line and for operators);
// that file is informative only: the lock decides.
package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// HolderFile is the name, in the state directory, of the holder's description.
const HolderFile = "monitor-holder.json"

// Holder describes the monitor that holds the lease.
type Holder struct {
	PID   int       `json:"pid"`
	Pod   string    `json:"pod,omitempty"` // $POD_NAME, else the hostname (the pod's name in a pod)
	Node  string    `json:"node,omitempty"`
	Since time.Time `json:"since"`
}

// Lease is one monitor's claim on a state directory.
type Lease struct {
	Dir  string // the state directory
	Self Holder // written to HolderFile once held (PID and Since are filled in)
	Log  *slog.Logger
	// OnWriteError sees a failed write of HolderFile (the metric): a full
	// filesystem must not cost the lease, only the description.
	OnWriteError func(error)

	held atomic.Bool
	mu   sync.Mutex
	fd   int // the locked directory, -1 when not held
}

// Held says whether this monitor holds the lease (may reap, enforce, kill).
func (l *Lease) Held() bool { return l.held.Load() }

// TryAcquire takes the lease if it is free. It returns false, with no error,
// when another process holds it.
func (l *Lease) TryAcquire() (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held.Load() {
		return true, nil
	}
	fd, err := unix.Open(l.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("node lease: open %s: %w", l.Dir, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil
		}
		return false, fmt.Errorf("node lease: flock %s: %w", l.Dir, err)
	}
	l.fd = fd
	l.held.Store(true)
	l.Self.PID, l.Self.Since = os.Getpid(), time.Now().UTC()
	if err := WriteFileAtomic(filepath.Join(l.Dir, HolderFile), l.Self); err != nil {
		l.Log.Warn("node lease held, but its holder file could not be written", "err", err)
		if l.OnWriteError != nil {
			l.OnWriteError(err)
		}
	}
	return true, nil
}

// Run tries to take the lease every retry until it holds it or ctx ends. It
// logs once that this monitor is on standby, and who holds the lease. It
// does not release the lease: the caller does, with Release, once the work
// the lease guards has stopped.
func (l *Lease) Run(ctx context.Context, retry time.Duration) {
	standby := false
	for {
		ok, err := l.TryAcquire()
		switch {
		case ok:
			if standby {
				l.Log.Info("node lease taken over: this monitor now reaps and enforces", "dir", l.Dir)
			} else {
				l.Log.Info("node lease held: this monitor reaps and enforces", "dir", l.Dir)
			}
			return
		case err != nil && !standby:
			l.Log.Warn("node lease unavailable; serving metrics only until it is", "err", err)
			standby = true
		case err == nil && !standby:
			l.Log.Info("another monitor holds the node lease; standby: serving metrics only, not reaping or enforcing",
				"dir", l.Dir, "holder", ReadHolder(l.Dir))
			standby = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}

// Release gives the lease up (the kernel also does when the process exits).
func (l *Lease) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held.Load() {
		return
	}
	l.held.Store(false)
	unix.Close(l.fd) // closing the only descriptor drops the flock
	l.fd = -1
}

// ReadHolder returns the recorded holder, or a string saying why there is none.
func ReadHolder(dir string) any {
	data, err := os.ReadFile(filepath.Join(dir, HolderFile))
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	var h Holder
	if err := json.Unmarshal(data, &h); err != nil {
		return "unknown (" + HolderFile + ": " + err.Error() + ")"
	}
	return h
}

// WriteFileAtomic replaces path with v as JSON: a temporary file in the same
// directory, synced, then renamed over path. Readers see the old file or the
// new one, never a part; a failure (ENOSPC on a full filesystem) removes the
// temporary file and leaves the old one as it was.
func WriteFileAtomic(path string, v any) (err error) {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	if err = os.Chmod(f.Name(), 0o644); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("rename onto %s: %w", path, err)
	}
	return nil
}
