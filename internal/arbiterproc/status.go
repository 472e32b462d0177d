package arbiterproc

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tessera-gpu/tessera/internal/arbiter"
)

// statusFD is the descriptor under which the arbiter's process finds its
// status page (the supervisor's ExtraFiles[0]).
const statusFD = 3

// statusSize is the page: the words below, rounded up.
const statusSize = 4096

// status is the page of memory (a memfd) that the supervisor and the
// arbiter's process both map: the process's loop counts its steps and
// records its longest gap there (arbiter.Stats, plain atomic words), and the
// supervisor reads them without any message passing. One page lives as long
// as the supervisor and is handed to each process it starts, so a gap
// across a restart is counted as the gap it is.
type status struct {
	file *os.File // nil in the arbiter's process
	mem  []byte
}

// Where the words lie in the page: the loop's arbiter.Stats, then the
// current process's collector: its setting and what it did (gcWords).
const (
	offStats = 0
	offGC    = 64
)

// gcWords is what the arbiter's process publishes about its collector.
type gcWords struct {
	Cycles      atomic.Uint64 // completed collections
	Percent     atomic.Int64  // GOGC as set (-1: off)
	MemoryLimit atomic.Int64  // bytes
}

// newStatus makes the supervisor's page.
func newStatus() (*status, error) {
	fd, err := unix.MemfdCreate("tessera-arbiter-status", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("arbiter status page: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "tessera-arbiter-status")
	if err := f.Truncate(statusSize); err != nil {
		f.Close()
		return nil, fmt.Errorf("arbiter status page: %w", err)
	}
	s, err := mapStatus(fd)
	if err != nil {
		f.Close()
		return nil, err
	}
	s.file = f
	return s, nil
}

// openStatus maps the page the supervisor handed down at statusFD.
func openStatus() (*status, error) {
	var st unix.Stat_t
	if err := unix.Fstat(statusFD, &st); err != nil {
		return nil, fmt.Errorf("arbiter status page (fd %d from the supervisor): %w", statusFD, err)
	}
	if st.Size < statusSize {
		return nil, fmt.Errorf("arbiter status page (fd %d): %d bytes, want %d", statusFD, st.Size, statusSize)
	}
	return mapStatus(statusFD)
}

func mapStatus(fd int) (*status, error) {
	mem, err := unix.Mmap(fd, 0, statusSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("arbiter status page: mmap: %w", err)
	}
	return &status{mem: mem}, nil
}

// Stats are the loop's words in the page.
func (s *status) Stats() *arbiter.Stats { return (*arbiter.Stats)(unsafe.Pointer(&s.mem[offStats])) }

func (s *status) close() {
	unix.Munmap(s.mem)
	if s.file != nil {
		s.file.Close()
	}
}

// GC is the current process's collector words.
func (s *status) GC() *gcWords { return (*gcWords)(unsafe.Pointer(&s.mem[offGC])) }

// The words must fit where they lie.
var (
	_ [offGC - offStats - int(unsafe.Sizeof(arbiter.Stats{}))]byte
	_ [statusSize - offGC - int(unsafe.Sizeof(gcWords{}))]byte
)
