// Command hook-installer copies the CUDA hook library onto the host: the
// node DaemonSet's init container runs it from the hook image with the
// host's hook directory mounted (deploy/helm/tessera).
//
//	hook-installer SRC DST
//
// DST is replaced only when its content differs, by a new inode (written,
// flushed, renamed over DST, directory flushed): a running container has
// the old inode bind-mounted and keeps it, ld.so.preload still names the
// same path, and a power loss leaves the old or the new library, never a
// partial one that every new GPU container would fail to preload.
package main

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: hook-installer SRC DST")
		os.Exit(2)
	}
	changed, err := install(os.Args[1], os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "hook-installer:", err)
		os.Exit(1)
	}
	if changed {
		fmt.Printf("installed %s\n", os.Args[2])
	} else {
		fmt.Printf("%s is up to date\n", os.Args[2])
	}
}

// nodeMachine is the ELF machine of each architecture tessera builds for.
var nodeMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// install copies src to dst unless dst already holds the same bytes.
func install(src, dst string) (bool, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return false, err
	}
	// The image could hold anything at src; refuse what ld.so cannot load
	// rather than install it into every GPU container's preload.
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return false, fmt.Errorf("%s is not an ELF file: %w", src, err)
	}
	if f.Type != elf.ET_DYN {
		return false, fmt.Errorf("%s is not a shared library (ELF type %s)", src, f.Type)
	}
	// ld.so skips a preload entry of another machine with a warning and
	// runs the program uncapped; this installer runs on the node's
	// architecture (its image is built per architecture).
	if want, known := nodeMachine[runtime.GOARCH]; known && f.Machine != want {
		return false, fmt.Errorf("%s is built for machine %s, this node is %s (%s)", src, f.Machine, want, runtime.GOARCH)
	}
	if have, err := os.ReadFile(dst); err == nil && bytes.Equal(have, data) {
		return false, os.Chmod(dst, 0o755)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	tmp := dst + ".tmp"
	if err := writeSynced(tmp, data); err != nil {
		_ = os.Remove(tmp)
		return false, err
	}
	if err := os.Rename(tmp, dst); err != nil {
		_ = os.Remove(tmp)
		return false, err
	}
	dir, err := os.Open(filepath.Dir(dst))
	if err != nil {
		return true, err
	}
	defer dir.Close()
	return true, dir.Sync()
}

// writeSynced creates path afresh: whatever is there (a stale file of a
// crashed run, or a link to some other host file, which O_TRUNC would write
// through as root) is removed first, and O_EXCL|O_NOFOLLOW refuse anything
// that appears at the name in between.
func writeSynced(path string, data []byte) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o755)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// The mode must not depend on the umask: containers of any user load it.
		err = os.Chmod(path, 0o755)
	}
	return err
}
