package region

import (
	"fmt"
	"runtime/debug"
)

// Guard runs f, which reads or writes mapped region or limits files, and turns
// a memory fault into an error instead of a crash. A container can truncate its
// own region file (it is mounted read-write) while the node side has it mapped;
// touching the vanished pages then raises SIGBUS, which must cost the node
// agent one skipped file, never its life. Other panics are not swallowed.
func Guard(path string, f func()) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if _, fault := r.(interface{ Addr() uintptr }); !fault {
			panic(r)
		}
		err = fmt.Errorf("%s: memory fault while reading the mapping (file shrunk?): %v: %w", path, r, ErrTruncated)
	}()
	f()
	return nil
}

// guarded runs check under Guard and returns the fault or check's own error.
func guarded(path string, check func() error) error {
	var err error
	if gerr := Guard(path, func() { err = check() }); gerr != nil {
		return gerr
	}
	return err
}

// Check validates the header of an open region again: the container can
// rewrite it while it is mapped. Call it under Guard.
func (r *Region) Check() error { return r.validate() }

// Check validates the header of an open limits file again. Call it under Guard.
func (l *Limits) Check() error { return l.validate() }
