package region

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sizes of the two files, from the Go mirror (held to the C header by a test).
var (
	limitsSize = int(unsafe.Sizeof(rawLimits{}))
	regionSize = int(unsafe.Sizeof(rawRegion{}))
)

// FileSize is the size of a container's region file (RegionSize) and limits
// file (LimitsSize): the space a new container's accounting takes.
var (
	RegionSize = regionSize
	LimitsSize = limitsSize
)

// Errors that say what is wrong with a file; match them with errors.Is.
var (
	ErrTruncated  = errors.New("file is shorter than its layout")
	ErrBadMagic   = errors.New("wrong magic number")
	ErrBadVersion = errors.New("unsupported ABI version")
	ErrBadSize    = errors.New("size field does not match the layout")
)

// mapping is one file mapped MAP_SHARED read-write.
type mapping struct {
	path string
	data []byte
}

// mapFile maps path, which must be at least size bytes. create makes the file
// (and grows an empty one) instead of failing.
func mapFile(path string, size int, create bool) (*mapping, bool, error) {
	var f *os.File
	var err error
	created := false // by this call: only then is a failure's file ours to remove
	if create {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		created = err == nil
		if errors.Is(err, os.ErrExist) {
			f, err = os.OpenFile(path, os.O_RDWR, 0)
		}
	} else {
		f, err = os.OpenFile(path, os.O_RDWR, 0)
	}
	if err != nil {
		return nil, false, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("stat %s: %w", path, err)
	}
	fresh := false
	switch {
	case st.Size() == 0 && create:
		// Allocate every block now: a sparse file's holes are filled
		// when a page is first written through the mapping, and on a
		// full filesystem that write is a SIGBUS in whoever makes it
		// (the plugin initialising the header, a hook claiming a slot).
		// Allocated here, a full filesystem is an error at creation and
		// never a fault later.
		if err := allocate(f, size); err != nil {
			if created {
				os.Remove(path) // leave no partial file behind
			}
			return nil, false, fmt.Errorf("size %s to %d bytes: %w", path, size, err)
		}
		fresh = true
	case st.Size() < int64(size):
		return nil, false, fmt.Errorf("%s: %d bytes, want %d: %w", path, st.Size(), size, ErrTruncated)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, false, fmt.Errorf("mmap %s: %w", path, err)
	}
	return &mapping{path: path, data: data}, fresh, nil
}

// allocate gives f size bytes of allocated blocks (posix_fallocate), or
// where the filesystem cannot (EOPNOTSUPP) a plain size.
func allocate(f *os.File, size int) error {
	err := unix.Fallocate(int(f.Fd()), 0, 0, int64(size))
	if errors.Is(err, unix.EOPNOTSUPP) {
		err = f.Truncate(int64(size))
	}
	return err
}

func (m *mapping) close() error {
	if m.data == nil {
		return nil
	}
	err := unix.Munmap(m.data)
	m.data = nil
	if err != nil {
		return fmt.Errorf("munmap %s: %w", m.path, err)
	}
	return nil
}

// checkHeader validates the common header words (magic, version, size).
func checkHeader(path string, magic uint64, version, size uint32, wantMagic uint64, wantSize int) error {
	switch {
	case magic != wantMagic:
		return fmt.Errorf("%s: magic %#x, want %#x: %w", path, magic, wantMagic, ErrBadMagic)
	case version != ABIVersion:
		return fmt.Errorf("%s: ABI version %d, this build reads %d: %w", path, version, ABIVersion, ErrBadVersion)
	case int(size) != wantSize:
		return fmt.Errorf("%s: size field %d, want %d: %w", path, size, wantSize, ErrBadSize)
	}
	return nil
}
